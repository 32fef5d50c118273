// The KV append kernel: a grid-stride copy of 16-byte chunks (8 elements of either 16-bit dtype,
// so one kernel serves bf16 and fp16) from k_new/v_new into the cache rows that hold tokens
// cache_seqlens[b] + t, through the same address rule the attention kernel reads with.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "sm90/decode/append.hpp"
#include "sm90/decode/kv_rows.cuh"

namespace hopattn::sm90::decode {
namespace {

constexpr int kAppendThreads = 256;

__global__ void __launch_bounds__(kAppendThreads) append_kernel(const __grid_constant__ KvCacheProblem p) {
  const int64_t row_chunks = p.head_dim / 8;
  const int64_t per_tensor = p.batch * p.seqlen_new * p.heads_kv * row_chunks;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < 2 * per_tensor; idx += stride) {
    const bool is_v = idx >= per_tensor;
    int64_t e = is_v ? idx - per_tensor : idx;  // (b, t, h, chunk), chunk fastest: coalesced rows
    const int64_t c = e % row_chunks;
    e /= row_chunks;
    const int h = static_cast<int>(e % p.heads_kv);
    e /= p.heads_kv;
    const int64_t t = e % p.seqlen_new;
    const int b = static_cast<int>(e / p.seqlen_new);
    const int64_t pos = max(__ldg(p.cache_seqlens + b), 0) + t;
    if (pos >= p.capacity) continue;  // past the cache: dropped (values unchecked)
    const int64_t* ns = is_v ? p.vn_stride : p.kn_stride;
    const int64_t* cs = is_v ? p.v_stride : p.k_stride;
    const auto* src = static_cast<const uint16_t*>(is_v ? p.v_new : p.k_new) + b * ns[0] + t * ns[1] + h * ns[2] + c * 8;
    auto* dst = static_cast<uint16_t*>(is_v ? p.v_cache : p.k_cache) +
                cache_row_offset(p, cs[0], cs[1], cs[2], b, h, static_cast<int>(pos)) + c * 8;
    *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
  }
}

__global__ void key_counts_kernel(const int32_t* __restrict__ cache_seqlens, int64_t seqlen_new, int64_t capacity,
                                  int64_t batch, int32_t* __restrict__ key_counts) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < batch) key_counts[b] = static_cast<int32_t>(min(max(int64_t{__ldg(cache_seqlens + b)}, int64_t{0}) + seqlen_new, capacity));
}

}  // namespace

cudaError_t launch_key_counts(const KvCacheProblem& p, int32_t* key_counts, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>((p.batch + kAppendThreads - 1) / kAppendThreads);
  key_counts_kernel<<<blocks, kAppendThreads, 0, stream>>>(p.cache_seqlens, p.seqlen_new, p.capacity, p.batch,
                                                           key_counts);
  return cudaGetLastError();
}

cudaError_t launch_append(const KvCacheProblem& p, cudaStream_t stream) {
  const int64_t chunks = 2 * p.batch * p.seqlen_new * p.heads_kv * (p.head_dim / 8);
  if (chunks == 0) return cudaSuccess;
  // A few waves of a memcpy-like kernel; the grid-stride loop covers the rest.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((chunks + kAppendThreads - 1) / kAppendThreads, 4096));
  append_kernel<<<blocks, kAppendThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace hopattn::sm90::decode
