// The CUDA reference: one 128-thread block per query row, fp64 scores and accumulators, online
// softmax over 128-key chunks. Slow next to the sm90 kernels but exact enough to judge them at
// sizes the CPU reference cannot reach. Also fill_no_keys, the seqlen_k == 0 result of any backend.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "api/instantiations.hpp"
#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

constexpr int kThreads = 128;  // also the key chunk: one score per thread per chunk
constexpr int kWarps = kThreads / 32;
constexpr int kMaxColumnsPerThread = (kMaxReferenceHeadDim + kThreads - 1) / kThreads;
// grid.x is limited to 2^31-1; larger problems loop (grid-stride) instead of using grid.y/z,
// whose 65535 limit batch*heads would exceed.
constexpr int64_t kMaxBlocks = 2147483647;

__device__ double to_double(__nv_bfloat16 x) { return static_cast<double>(__bfloat162float(x)); }
__device__ double to_double(__half x) { return static_cast<double>(__half2float(x)); }
// Direct double -> 16-bit conversions round once, to nearest even (no double rounding via fp32).
template <typename T> __device__ T from_double(double x);
template <> __device__ __nv_bfloat16 from_double<__nv_bfloat16>(double x) { return __double2bfloat16(x); }
template <> __device__ __half from_double<__half>(double x) { return __double2half(x); }

__device__ double warp_sum(double x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ double warp_max(double x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Every thread gets the block-wide result. `scratch` holds kWarps doubles; the leading barrier
// keeps a previous call's readers from racing this call's writers.
template <bool kIsMax>
__device__ double block_reduce(double x, double* scratch) {
  x = kIsMax ? warp_max(x) : warp_sum(x);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  double r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = kIsMax ? fmax(r, scratch[w]) : r + scratch[w];
  return r;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) reference_forward_kernel(AttnProblem p) {
  __shared__ double q_row[kMaxReferenceHeadDim];
  __shared__ double chunk[kThreads];  // scores of the current key chunk, then their weights
  __shared__ double scratch[kWarps];
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  T* out = static_cast<T*>(p.out);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int d = static_cast<int>(p.head_dim);
  const int64_t rows = p.batch * p.heads_q * p.seqlen_q;
  const double scale = p.scale;

  // Consecutive blocks take consecutive query rows of one head, so they share K/V in L2.
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % p.seqlen_q;
    const int64_t h = (row / p.seqlen_q) % p.heads_q;
    const int64_t b = row / (p.seqlen_q * p.heads_q);
    const int64_t kv_head = h / (p.heads_q / p.heads_kv);  // GQA: AttnProblem::group() is host-only
    // Bottom-right aligned window (causal: keys j <= i + sk - sq): keys [kr.begin, kr.end).
    const KeyRange kr = visible_keys(i, p.seqlen_q, p.seqlen_k, p.window_left, p.window_right);
    const int64_t visible = kr.end > kr.begin ? kr.end - kr.begin : 0;
    const T* k_head = k + b * p.k_stride[0] + kr.begin * p.k_stride[1] + kv_head * p.k_stride[2];
    const T* v_head = v + b * p.v_stride[0] + kr.begin * p.v_stride[1] + kv_head * p.v_stride[2];
    T* o_row = out + b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2];

    __syncthreads();  // the previous row's readers of q_row are done
    for (int c = tid; c < d; c += kThreads) q_row[c] = to_double(q[b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2] + c]);

    double o[kMaxColumnsPerThread] = {};  // this thread's columns tid + r*kThreads of the O row
    double running_max = -INFINITY;
    double my_sum = 0;  // this thread's share of the softmax denominator (scaled like o)
    for (int64_t j0 = 0; j0 < visible; j0 += kThreads) {
      const int n = static_cast<int>(min(int64_t{kThreads}, visible - j0));
      __syncthreads();  // q_row is written; the previous chunk's weights are consumed
      // One warp per key, lanes across head_dim: loads of a K row are coalesced.
      for (int j = warp; j < n; j += kWarps) {
        const T* k_row = k_head + (j0 + j) * p.k_stride[1];
        double dot = 0;
        for (int c = lane; c < d; c += 32) dot += q_row[c] * to_double(k_row[c]);
        dot = warp_sum(dot);
        if (lane == 0) chunk[j] = p.softcap > 0 ? p.softcap * tanh(scale * dot / p.softcap) : scale * dot;
      }
      __syncthreads();
      const double score = tid < n ? chunk[tid] : -INFINITY;
      const double new_max = fmax(running_max, block_reduce<true>(score, scratch));
      // exp(-inf) = 0 on the first chunk; new_max is finite because the chunk is non-empty.
      const double correction = exp(running_max - new_max);
      running_max = new_max;
      const double weight = tid < n ? exp(score - new_max) : 0.0;
      my_sum = my_sum * correction + weight;
      chunk[tid] = weight;  // safe: block_reduce's barriers ordered every read of chunk before this
      __syncthreads();
      // Thread-per-column: for each key the block reads one V row, coalesced.
#pragma unroll
      for (int r = 0; r < kMaxColumnsPerThread; ++r) {
        const int c = tid + r * kThreads;
        if (c >= d) break;
        double acc = o[r] * correction;
        for (int j = 0; j < n; ++j) acc += chunk[j] * to_double(v_head[(j0 + j) * p.v_stride[1] + c]);
        o[r] = acc;
      }
    }
    const double sum = block_reduce<false>(my_sum, scratch);  // >= 1 when any key is visible
#pragma unroll
    for (int r = 0; r < kMaxColumnsPerThread; ++r) {
      const int c = tid + r * kThreads;
      if (c >= d) break;
      o_row[c] = from_double<T>(visible > 0 ? o[r] / sum : 0.0);
    }
    if (p.lse != nullptr && tid == 0)
      p.lse[(b * p.heads_q + h) * p.seqlen_q + i] =
          visible > 0 ? static_cast<float>(running_max + log(sum)) : -INFINITY;
  }
}

// One thread per output element (grid-stride), then per lse entry.
template <typename Word>
__global__ void fill_no_keys_kernel(AttnProblem p) {
  Word* out = static_cast<Word*>(p.out);
  const int64_t d = p.head_dim;
  const int64_t elements = p.batch * p.seqlen_q * p.heads_q * d;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < elements; e += stride) {
    const int64_t c = e % d, h = (e / d) % p.heads_q, i = (e / (d * p.heads_q)) % p.seqlen_q;
    const int64_t b = e / (d * p.heads_q * p.seqlen_q);
    out[b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2] + c] = Word{0};  // +0 in every dtype
  }
  if (p.lse == nullptr) return;
  const int64_t lse_entries = p.batch * p.heads_q * p.seqlen_q;  // lse is contiguous
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < lse_entries; e += stride)
    p.lse[e] = -INFINITY;
}

// Sizes and strides by value, so the kernel needs no device copy of them.
struct Strided4d {
  int64_t sizes[4];
  int64_t strides[4];
};

// One thread per element (grid-stride); element e is decomposed row-major over `sizes`.
template <typename Word>
__global__ void zero_fill_kernel(Word* data, Strided4d t, int64_t elements) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < elements; e += stride) {
    int64_t rest = e, offset = 0;
    for (int i = 3; i >= 0; --i) {
      offset += (rest % t.sizes[i]) * t.strides[i];
      rest /= t.sizes[i];
    }
    data[offset] = Word{0};  // +0 in every dtype
  }
}

}  // namespace

cudaError_t forward_cuda(const AttnProblem& p, cudaStream_t stream) {
  if (p.head_dim <= 0 || p.head_dim > kMaxReferenceHeadDim) return cudaErrorInvalidValue;
  const int64_t rows = p.batch * p.heads_q * p.seqlen_q;
  if (rows == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min(rows, kMaxBlocks));
  switch (p.dtype) {
    case DType::kBF16: reference_forward_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p); break;
    case DType::kFP16: reference_forward_kernel<__half><<<blocks, kThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;  // fp32 is a CPU-reference-only dtype
  }
  return cudaGetLastError();
}

cudaError_t fill_no_keys(const AttnProblem& p, cudaStream_t stream) {
  const int64_t elements = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
  if (elements == 0 && (p.lse == nullptr || p.batch * p.heads_q * p.seqlen_q == 0)) return cudaSuccess;
  constexpr int kFillThreads = 256;
  const int64_t work = std::max(elements, p.batch * p.heads_q * p.seqlen_q);
  // A few waves of blocks are plenty for a memset-like kernel; the grid-stride loop covers the rest.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((work + kFillThreads - 1) / kFillThreads, 65536));
  if (dtype_size(p.dtype) == 4)
    fill_no_keys_kernel<uint32_t><<<blocks, kFillThreads, 0, stream>>>(p);
  else
    fill_no_keys_kernel<uint16_t><<<blocks, kFillThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t zero_fill(void* data, DType dtype, const int64_t sizes[4], const int64_t strides[4], cudaStream_t stream) {
  Strided4d t;
  int64_t elements = 1;
  for (int i = 0; i < 4; ++i) {
    if (sizes[i] < 0 || strides[i] < 0) return cudaErrorInvalidValue;
    t.sizes[i] = sizes[i];
    t.strides[i] = strides[i];
    elements *= sizes[i];
  }
  if (elements == 0) return cudaSuccess;
  if (data == nullptr) return cudaErrorInvalidValue;
  constexpr int kFillThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((elements + kFillThreads - 1) / kFillThreads, 65536));
  if (dtype_size(dtype) == 4)
    zero_fill_kernel<uint32_t><<<blocks, kFillThreads, 0, stream>>>(static_cast<uint32_t*>(data), t, elements);
  else
    zero_fill_kernel<uint16_t><<<blocks, kFillThreads, 0, stream>>>(static_cast<uint16_t*>(data), t, elements);
  return cudaGetLastError();
}

}  // namespace hopattn::reference
