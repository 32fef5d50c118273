// The split merge of the decode path: one warp per query row reads the row's num_splits partial
// (normalised O, log2-domain LSE) pairs from the workspace and writes
//   out = sum_s w_s O_s / sum_s w_s,  w_s = 2^(lse_s - max_s lse_s),  lse = ln2 * (max + log2(sum w)).
// Splits are summed in index order (bitwise reproducible); splits whose weight is 0 (no key seen)
// are skipped, so their O is never read. A row no split saw gets out = 0 and lse = -inf.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/decode/params.hpp"
#include "sm90/decode/ptx.cuh"

namespace hopattn::sm90::decode {

// kPerLane consecutive fp32 columns of one row, loaded as float2/float4 vectors.
template <int kPerLane>
__device__ __forceinline__ void load_columns(const float* src, float (&v)[kPerLane]) {
  if constexpr (kPerLane == 2) {
    const float2 a = *reinterpret_cast<const float2*>(src);
    v[0] = a.x; v[1] = a.y;
  } else {
#pragma unroll
    for (int k = 0; k < kPerLane; k += 4) {
      const float4 a = *reinterpret_cast<const float4*>(src + k);
      v[k] = a.x; v[k + 1] = a.y; v[k + 2] = a.z; v[k + 3] = a.w;
    }
  }
}

// kPerLane (2, 4 or 8) values as 16-bit elements in one 4-, 8- or 16-byte store.
template <typename Element, int kPerLane>
__device__ __forceinline__ void store_columns(Element* dst, const float (&v)[kPerLane]) {
  using Op = Mma<Element>;
  if constexpr (kPerLane == 2) {
    *reinterpret_cast<uint32_t*>(dst) = Op::pack(v[0], v[1]);
  } else if constexpr (kPerLane == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(Op::pack(v[0], v[1]), Op::pack(v[2], v[3]));
  } else {
    *reinterpret_cast<uint4*>(dst) =
        make_uint4(Op::pack(v[0], v[1]), Op::pack(v[2], v[3]), Op::pack(v[4], v[5]), Op::pack(v[6], v[7]));
  }
}

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) combine_kernel(const __grid_constant__ DecodeParams params) {
  constexpr int kPerLane = kHeadDim / 32;
  __shared__ float weights[kWarps][kMaxSplits];
  const KvCacheProblem& p = params.p;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t total_rows = p.batch * p.heads_q * p.seqlen_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // (b * heads_q + h) * seqlen_q + i
  if (row >= total_rows) return;  // whole warps only; no block-wide barrier follows
  const int splits = params.num_splits;
  const float* lse_in = params.partial_lse + row;

  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, lse_in[s * total_rows]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));

  const int64_t i = row % p.seqlen_q, h = (row / p.seqlen_q) % p.heads_q, b = row / (p.seqlen_q * p.heads_q);
  Element* out = static_cast<Element*>(p.out) + b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2] +
                 lane * kPerLane;
  float acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.f;
  if (m == -INFINITY) {  // no split saw a key
    store_columns<Element, kPerLane>(out, acc);
    if (lane == 0 && p.lse != nullptr) p.lse[row] = -INFINITY;
    return;
  }

  float total = 0.f;
  for (int s = lane; s < splits; s += 32) {
    const float w = exp2f(lse_in[s * total_rows] - m);
    weights[warp][s] = w;
    total += w;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
  __syncwarp();

  const float* o_in = params.partial_o + row * kHeadDim + lane * kPerLane;
#pragma unroll 2  // two splits' loads in flight; 4 makes ptxas spill at head_dim 256
  for (int s = 0; s < splits; ++s) {
    const float w = weights[warp][s];
    if (w == 0.f) continue;  // warp-uniform
    float v[kPerLane];
    load_columns<kPerLane>(o_in + s * total_rows * kHeadDim, v);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) acc[k] += w * v[k];
  }
  const float inv = 1.f / total;  // total >= 1: the maximum's own weight
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] *= inv;
  store_columns<Element, kPerLane>(out, acc);
  if (lane == 0 && p.lse != nullptr) p.lse[row] = (m + log2f(total)) * kLn2;
}

}  // namespace hopattn::sm90::decode
