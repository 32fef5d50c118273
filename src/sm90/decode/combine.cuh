// The split merge of the decode path: one warp per query row reads the row's num_splits partial
// (normalised O, log2-domain LSE) pairs from the workspace and writes
//   out = sum_s w_s O_s / sum_s w_s,  w_s = 2^(lse_s - max_s lse_s),  lse = ln2 * (max + log2(sum w)).
// Splits are summed in index order (bitwise reproducible); splits whose weight is 0 (no key seen)
// add nothing. A row no split saw gets out = 0 and lse = -inf.
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
  // Splits whose partial O rows are loaded at once, before any of them is needed: a round trip to
  // L2 is ~0.7 us and this kernel is nothing but round trips (16 splits read two at a time cost
  // ~6 us), so every load of a batch is in flight together, with the LSE loads of the first.
  constexpr int kBatch = kHeadDim == 256 ? 8 : 16;
  constexpr int kLsePerLane = kMaxSplits / 32;
  __shared__ float weights[kWarps][kMaxSplits];
  // Launched programmatically behind the split kernel (launch.cuh): everything below reads its
  // output, so wait for it first.
  wait_for_primary_grid();
  const KvCacheProblem& p = params.p;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t total_rows = p.batch * p.heads_q * p.seqlen_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // (b * heads_q + h) * seqlen_q + i
  if (row >= total_rows) return;  // whole warps only; no block-wide barrier follows
  const int splits = params.num_splits;
  const float* lse_in = params.partial_lse + row;
  // The split kernel writes every split's O for every row (zeros where it saw no key), so the O
  // loads need not wait for the weights.
  const float* o_in = params.partial_o + row * kHeadDim + lane * kPerLane;
  const auto load_batch = [&](int first, float (&v)[kBatch][kPerLane]) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (first + j < splits) load_columns<kPerLane>(o_in + (first + j) * total_rows * kHeadDim, v[j]);
  };
  float v[kBatch][kPerLane];
  load_batch(0, v);
  float lse[kLsePerLane];
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) lse[j] = lane + 32 * j < splits ? lse_in[(lane + 32 * j) * total_rows] : -INFINITY;

  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) m = fmaxf(m, lse[j]);
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
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) {
    const float w = exp2f(lse[j] - m);  // 0 past `splits` and for splits that saw no key
    if (lane + 32 * j < kMaxSplits) weights[warp][lane + 32 * j] = w;
    total += w;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
  __syncwarp();

  // Splits are added in index order (bitwise reproducible); zero weights are skipped, as before.
  for (int first = 0; first < splits; first += kBatch) {
    if (first > 0) load_batch(first, v);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const float w = first + j < splits ? weights[warp][first + j] : 0.f;
      if (w == 0.f) continue;  // warp-uniform
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) acc[k] += w * v[j][k];
    }
  }
  const float inv = 1.f / total;  // total >= 1: the maximum's own weight
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] *= inv;
  store_columns<Element, kPerLane>(out, acc);
  if (lane == 0 && p.lse != nullptr) p.lse[row] = (m + log2f(total)) * kLn2;
}

}  // namespace hopattn::sm90::decode
