// The two small kernels around the backward main loop.
// Preprocess: per query row, D = rowsum(dO * O) and lse in base 2, into padded workspace arrays,
// and the row's dQ accumulator zeroed. Postprocess: dQ = scale * accumulator, to the caller's dtype
// and strides. Both are memory-bound streaming passes.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "api/problem.hpp"
#include "sm90/bwd/mainloop.cuh"
#include "sm90/bwd/workspace.hpp"

namespace hopattn::sm90::bwd {

struct PrePostParams {
  const void* out;
  const void* dout;
  const float* lse;  // (batch, heads_q, seqlen_q)
  void* dq;
  float* lse_log2;   // workspace, (batch, heads_q, seqlen_q_padded)
  float* dpsum;
  float* dq_accum;   // (batch, heads_q, seqlen_q_padded, head_dim)
  int* semaphore;    // (batch, heads_q, m_blocks)
  int64_t o_stride[3], do_stride[3], dq_stride[3];
  int seqlen_q, seqlen_q_padded, heads_q, batch, m_blocks;
  float scale;
};

template <class T>
__device__ __forceinline__ float to_float(T x) { return static_cast<float>(x); }

// One warp per row: each lane reads head_dim/32 contiguous elements of O and dO.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(256) bwd_preprocess_kernel(const PrePostParams p) {
  constexpr int kPerLane = kHeadDim / 32;
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q_padded;
  const int64_t row_id = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;  // (batch, head, row) flattened
  const int lane = threadIdx.x % 32;
  if (row_id >= rows) return;
  const int row = int(row_id % p.seqlen_q_padded);
  const int head = int((row_id / p.seqlen_q_padded) % p.heads_q);
  const int batch = int(row_id / (int64_t(p.seqlen_q_padded) * p.heads_q));
  float dot = 0.f;
  float lse2 = INFINITY;  // pad rows and rows with no key: P = exp2(s - inf) = 0
  if (row < p.seqlen_q) {
    const Element* o = static_cast<const Element*>(p.out) + batch * p.o_stride[0] + row * p.o_stride[1] +
                       head * p.o_stride[2] + lane * kPerLane;
    const Element* d = static_cast<const Element*>(p.dout) + batch * p.do_stride[0] + row * p.do_stride[1] +
                       head * p.do_stride[2] + lane * kPerLane;
    #pragma unroll
    for (int i = 0; i < kPerLane; ++i) dot += to_float(o[i]) * to_float(d[i]);
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float l = p.lse[(int64_t(batch) * p.heads_q + head) * p.seqlen_q + row];
    if (l != -INFINITY) lse2 = l * 1.4426950408889634f;
  }
  if (lane == 0) {
    p.dpsum[row_id] = dot;
    p.lse_log2[row_id] = lse2;
  }
  float4* acc = reinterpret_cast<float4*>(p.dq_accum + row_id * kHeadDim);
  for (int i = lane; i < kHeadDim / 4; i += 32) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lane == 0 && row % kQueryBlock == 0) p.semaphore[row_id / kQueryBlock] = 0;
}

// One CTA per (batch, head, query block), one thread per main-kernel consumer thread: thread t
// reads the values it would have held in the dQ accumulator fragment (16-byte loads, consecutive
// across the warp) and writes them to their (row, col) through the same fragment mapping.
template <class Mainloop>
__global__ void __launch_bounds__(Mainloop::kdQElems / Mainloop::kdQPerThread)
    bwd_postprocess_kernel(const PrePostParams p) {
  using namespace cute;
  using Element = typename Mainloop::Element;
  constexpr int kThreads = Mainloop::kdQElems / Mainloop::kdQPerThread;
  constexpr int kBlockM = Mainloop::kBlockM, kHeadDim = Mainloop::kHeadDim;
  const int64_t tile = blockIdx.x;  // (batch, head, m_block) flattened
  const int m_block = int(tile % p.m_blocks);
  const int head = int((tile / p.m_blocks) % p.heads_q);
  const int batch = int(tile / (int64_t(p.m_blocks) * p.heads_q));
  const int t = threadIdx.x;
  typename Mainloop::TiledMmadQ mma_dq;
  Tensor coords = mma_dq.get_thread_slice(t).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  static_assert(decltype(size(coords))::value == Mainloop::kdQPerThread);
  const float* acc = p.dq_accum + tile * Mainloop::kdQElems;
  float v[Mainloop::kdQPerThread];
#pragma unroll
  for (int j = 0; j < Mainloop::kdQPerThread / 4; ++j) {
    const float4 x = *reinterpret_cast<const float4*>(acc + Mainloop::dq_offset(t, 4 * j));
    v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
  }
  Element* dq = static_cast<Element*>(p.dq) + batch * p.dq_stride[0] + head * p.dq_stride[2];
#pragma unroll
  for (int i = 0; i < Mainloop::kdQPerThread; i += 2) {  // fragment columns come in adjacent pairs
    const int row = m_block * kBlockM + get<0>(coords(i));
    if (row < p.seqlen_q) {
      cutlass::Array<float, 2> pair;
      pair[0] = v[i] * p.scale;
      pair[1] = v[i + 1] * p.scale;
      *reinterpret_cast<cutlass::Array<Element, 2>*>(dq + row * p.dq_stride[1] + get<1>(coords(i))) =
          cutlass::NumericArrayConverter<Element, float, 2>{}(pair);
    }
  }
}

}  // namespace hopattn::sm90::bwd
