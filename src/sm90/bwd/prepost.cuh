// The two small kernels around the backward main loop.
// Preprocess: per query row, D = rowsum(dO * O) and lse in base 2, into padded workspace arrays,
// the dQ tiles' counters zeroed, and (unless dq_first_store) the row's dQ accumulator zeroed.
// Postprocess: dQ = scale * accumulator, to the caller's dtype and strides; tiles that no key block
// reached (their counter is 0, so the accumulator was never written) get zeros. Both are
// memory-bound streaming passes.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "api/problem.hpp"
#include "sm90/bwd/kernel_common.cuh"
#include "sm90/bwd/mainloop.cuh"
#include "sm90/bwd/workspace.hpp"
#include "sm90/grid_dependency.cuh"

namespace hopattn::sm90::bwd {

struct PrePostParams {
  const void* out;
  const void* dout;
  const float* lse;  // (batch, heads_q, seqlen_q), or varlen's (heads_q, total_q)
  void* dq;
  float* lse_log2;   // workspace per-row arrays (RowLayout)
  float* dpsum;
  float* dq_accum;   // head_dim values per row
  int* semaphore;    // one per kQueryBlock rows
  bool dq_first_store;  // the main kernel stores each tile's first partial: no zeroing (workspace.hpp)
  int64_t o_stride[3], do_stride[3], dq_stride[3];
  int seqlen_q, seqlen_q_padded, heads_q, batch, m_blocks;
  float scale;
  RowLayout rows;
  // Varlen (null cu_q: fixed-length): sequence b's query rows, as the main kernel's SeqInfo.
  const int32_t* cu_q;
  const int32_t* used_q;
  int total_q;
  // dq_overlap (workspace.hpp): per (batch, kv head), the main-kernel CTAs done, zeroed by the
  // preprocess (dq_done_count of them); the postprocess waits for dq_done_target (the main grid's key
  // blocks) on its tile's. Null: no overlap, the postprocess waits for the whole main grid.
  int* dq_done;
  int dq_done_count, dq_done_target, group;
  int tail_first, tail_parts;  // the main kernel's tail split (workspace.hpp, dq_done_target); INT_MAX, 1: none
  BwdTrace trace;  // HOPATTN_BWD_TRACE=1: a record per postprocess CTA (trace.hpp)
  // The main kernel's tail split (workspace.hpp): tail_units slots and counters to zero.
  float* tail_acc;
  int* tail_count;
  int tail_units;
};

// Query rows of batch entry b: its first token row, length (rows written) and seqused (rows that
// take part), clamped to the tensor like the main kernel's.
struct QueryRows {
  int offset, len, used;
};
__device__ __forceinline__ QueryRows query_rows(const PrePostParams& p, int b) {
  if (p.cu_q == nullptr) return {0, p.seqlen_q, p.seqlen_q};
  const int o = min(max(__ldg(p.cu_q + b), 0), p.total_q);
  const int len = min(max(__ldg(p.cu_q + b + 1) - o, 0), p.total_q - o);
  return {o, len, p.used_q == nullptr ? len : min(max(__ldg(p.used_q + b), 0), len)};
}

template <class T>
__device__ __forceinline__ float to_float(T x) { return static_cast<float>(x); }

// Shape of the preprocess: kLanesPerRow lanes share a row, each reading 16 bytes of O and of dO,
// so one warp instruction covers kRowsPerPass rows; a warp takes kPasses such groups, consecutive
// rows of one (batch, head), and issues all their loads before the first use.
template <class Element, int kHeadDim>
struct PreprocessShape {
  static constexpr int kVec = 16 / int(sizeof(Element));   // elements per 16-byte load
  static constexpr int kLanesPerRow = kHeadDim / kVec;      // 8, 16, 32 at d64, d128, d256
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0);
  static constexpr int kRowsPerPass = 32 / kLanesPerRow;
  static constexpr int kPasses = 4;
  static constexpr int kRowsPerWarp = kRowsPerPass * kPasses;
  // A warp's rows never straddle two (batch, head) pairs: seqlen_q_padded is a multiple of
  // kRowPadding (workspace_layout).
  static_assert(kRowPadding % kRowsPerWarp == 0);
  static constexpr int kThreads = 256;
  static constexpr int kRowsPerBlock = kThreads / 32 * kRowsPerWarp;
  static int64_t blocks(int64_t rows) { return (rows + kRowsPerBlock - 1) / kRowsPerBlock; }
};

template <class T>
__device__ __forceinline__ float dot16(const uint4& a, const uint4& b) {
  const T* x = reinterpret_cast<const T*>(&a);
  const T* y = reinterpret_cast<const T*>(&b);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < int(16 / sizeof(T)); ++i) s += to_float(x[i]) * to_float(y[i]);
  return s;
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(PreprocessShape<Element, kHeadDim>::kThreads) bwd_preprocess_kernel(const PrePostParams p) {
  using Shape = PreprocessShape<Element, kHeadDim>;
  constexpr int kLanes = Shape::kLanesPerRow, kVec = Shape::kVec, kPasses = Shape::kPasses;
  // The main kernel (launched programmatically behind this one) may be scheduled once every block
  // has started: it waits for this grid's end before reading what it writes.
  launch_dependents();
  if (p.dq_done != nullptr && blockIdx.x == 0) {
    for (int i = threadIdx.x; i < p.dq_done_count; i += blockDim.x) p.dq_done[i] = 0;
  }
  if (p.tail_units > 0) {  // a few MB at most, spread over the whole grid
    const int64_t n = int64_t(p.tail_units) * (kTailSlotFloats / 4), stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
      reinterpret_cast<float4*>(p.tail_acc)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (blockIdx.x == 0) {
      for (int i = threadIdx.x; i < p.tail_units; i += blockDim.x) p.tail_count[i] = 0;
    }
  }
  const int64_t warp_row = (int64_t(blockIdx.x) * (Shape::kThreads / 32) + threadIdx.x / 32) * Shape::kRowsPerWarp;
  if (warp_row >= int64_t(p.batch) * p.heads_q * p.seqlen_q_padded) return;  // whole warps: rows come in kRowsPerWarp
  const int lane = threadIdx.x % 32, sub = lane % kLanes;
  // The warp's (batch, head) and first row; this lane's rows are row0 + i * kRowsPerPass.
  const int head = int((warp_row / p.seqlen_q_padded) % p.heads_q);
  const int batch = int(warp_row / (int64_t(p.seqlen_q_padded) * p.heads_q));
  const int row0 = int(warp_row % p.seqlen_q_padded) + lane / kLanes;
  const QueryRows q = query_rows(p, batch);
  // The main kernel reads whole query blocks of each sequence: fixed-length ones up to
  // seqlen_q_padded (every row of the grid), packed ones up to the sequence's kRowPadding multiple
  // (varlen grids cover max_seqlen_q, so shorter sequences end earlier).
  const int rows_written = p.cu_q == nullptr ? p.seqlen_q_padded : (q.len + kRowPadding - 1) / kRowPadding * kRowPadding;
  const Element* o_base = static_cast<const Element*>(p.out) + batch * p.o_stride[0] + head * p.o_stride[2] + sub * kVec;
  const Element* do_base = static_cast<const Element*>(p.dout) + batch * p.do_stride[0] + head * p.do_stride[2] + sub * kVec;
  // Every load of the warp (O, dO and the rows' lse) is issued before the first use: one memory
  // round trip per warp. (The lse used to be loaded after the reduction, a second dependent trip.)
  // Lane r loads the lse of the warp's row r; the row's lanes take it by a shuffle later, which
  // costs one register where a per-pass copy cost ptxas four more 64-bit addresses and a spill.
  static_assert(Shape::kRowsPerWarp <= 32);
  const int warp_row0 = row0 - lane / kLanes;
  float lse_of_lane = -INFINITY;
  if (lane < Shape::kRowsPerWarp && warp_row0 + lane < q.used) {
    const int row = warp_row0 + lane;
    lse_of_lane = p.cu_q == nullptr ? __ldg(p.lse + (int64_t(batch) * p.heads_q + head) * p.seqlen_q + row)
                                    : __ldg(p.lse + int64_t(head) * p.total_q + q.offset + row);
  }
  uint4 o[kPasses], d[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int row = row0 + i * Shape::kRowsPerPass;
    o[i] = d[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row < q.used) {
      // 16-byte loads: validation requires out's and dout's base pointers and strides to be
      // 16-byte multiples, with head_dim contiguous.
      const int64_t token = int64_t(q.offset) + row;
      o[i] = __ldg(reinterpret_cast<const uint4*>(o_base + token * p.o_stride[1]));
      d[i] = __ldg(reinterpret_cast<const uint4*>(do_base + token * p.do_stride[1]));
    }
  }
  const int64_t w0 = p.rows.base(batch, q.offset) + head * p.rows.head_stride;  // workspace row of row 0
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int row = row0 + i * Shape::kRowsPerPass;
    float dot = dot16<Element>(o[i], d[i]);
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float lse = __shfl_sync(0xffffffffu, lse_of_lane, row - warp_row0);
    if (row >= rows_written) continue;
    const int64_t w = w0 + row;
    if (sub == 0) {
      // Pad rows, rows past seqused and rows with no key (lse -inf): +inf, so P = exp2(s - inf) = 0.
      const float lse2 = lse != -INFINITY ? lse * 1.4426950408889634f : INFINITY;
      p.dpsum[w] = dot;
      p.lse_log2[w] = lse2;
      if (row % kQueryBlock == 0) p.semaphore[w / kQueryBlock] = 0;
    }
    if (!p.dq_first_store) {
      float4* acc = reinterpret_cast<float4*>(p.dq_accum + w * kHeadDim);
#pragma unroll
      for (int j = sub; j < kHeadDim / 4; j += kLanes) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
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
  constexpr int kBlockM = Mainloop::kBlockM;
  const uint64_t trace_start = p.trace.records != nullptr ? trace_clock() : 0;
  const int64_t grid_tile = blockIdx.x;  // (batch, head, m_block) flattened
  const int m_block = int(grid_tile % p.m_blocks);
  const int head = int((grid_tile / p.m_blocks) % p.heads_q);
  const int batch = int(grid_tile / (int64_t(p.m_blocks) * p.heads_q));
  // Launched programmatically behind the main kernel: nothing here may read the accumulator or the
  // counters before that grid has finished (and, through it, the preprocess), or (dq_overlap) before
  // every main-kernel CTA of this tile's (batch, kv head) has counted itself done. Every CTA waits,
  // even one past its sequence's rows: the grid then ends only after every main-kernel CTA has
  // counted itself done, so later work on the stream sees all of dK and dV too.
  if (p.dq_done != nullptr) {
    if (threadIdx.x == 0) {
      const int head_batch = batch * (p.heads_q / p.group) + head / p.group;
      const int target = dq_done_target(head_batch, p.dq_done_target, p.tail_first, p.tail_parts);
      while (load_acquire(p.dq_done + head_batch) < target) __nanosleep(200);
    }
    __syncthreads();
  } else {
    wait_for_primary_grid();
  }
  const QueryRows q = query_rows(p, batch);
  if (m_block * kBlockM >= q.len) return;  // varlen: past this sequence
  // Rows past seqused in a tile that has partials get zeros from them (their lse is +inf, so P = 0).
  const int64_t tile = (p.rows.base(batch, q.offset) + head * p.rows.head_stride) / kBlockM + m_block;
  const int t = threadIdx.x;
  typename Mainloop::TiledMmadQ mma_dq;
  // (query, column) of each fragment value; the transposed dQ GEMM's fragments hold (column, query).
  Tensor coords = mma_dq.get_thread_slice(t).partition_C(make_identity_tensor(typename Mainloop::dQTileShape{}));
  static_assert(decltype(size(coords))::value == Mainloop::kdQPerThread);
  const float* acc = p.dq_accum + tile * Mainloop::kdQElems;
  // Without zeroing (dq_first_store), a tile that no key block reached (causal rows that see no
  // key, rows past seqused) holds whatever the workspace held: its counter says so.
  const bool written = !p.dq_first_store ||
                       (p.semaphore[dq_semaphore_index(tile, kBlockM)] & (kdQStored - 1)) != 0;
  float v[Mainloop::kdQPerThread];
#pragma unroll
  for (int j = 0; j < Mainloop::kdQPerThread / 4; ++j) {
    // L2 only (ld.global.cg): under dq_overlap the main kernel's adds land there while this grid runs.
    const float4 x = written ? __ldcg(reinterpret_cast<const float4*>(acc + Mainloop::dq_offset(t, 4 * j))) : make_float4(0.f, 0.f, 0.f, 0.f);
    v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
  }
  Element* dq = static_cast<Element*>(p.dq) + batch * p.dq_stride[0] + int64_t(q.offset) * p.dq_stride[1] +
                head * p.dq_stride[2];
  // The tile goes through shared memory and leaves in 16-byte row chunks, consecutive across the
  // warp. Stored from the fragments directly, a warp instruction would touch 8 rows 4 KB or more
  // apart: 16-byte pieces of 8 rows (WGMMA's C layout: four lanes per row), or, for the transposed
  // dQ GEMM (kdQSwapAB), 2-byte values of 8 rows. That ran at about half of the 16-byte stores' rate
  // (perf-notes, backward v8 and v10). The row pitch is padded by 16 bytes, so that the eight rows of
  // a warp's fragment stores fall in different banks.
  constexpr int kHeadDim = Mainloop::kHeadDim, kPitch = kHeadDim + 8;
  __shared__ alignas(16) Element staged[kBlockM * kPitch];
#pragma unroll
  for (int i = 0; i < Mainloop::kdQPerThread; ++i) {
    const int query = Mainloop::kdQSwapAB ? get<1>(coords(i)) : get<0>(coords(i));
    const int column = Mainloop::kdQSwapAB ? get<0>(coords(i)) : get<1>(coords(i));
    staged[query * kPitch + column] = static_cast<Element>(v[i] * p.scale);
  }
  __syncthreads();
  // 16-byte stores are safe: validation (check_tensor) requires dq's base pointer and every
  // stride of an extent above 1 to be 16-byte multiples, and head_dim is contiguous.
  constexpr int kChunksPerRow = kHeadDim * int(sizeof(Element)) / 16;
  for (int c = t; c < kBlockM * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * (16 / int(sizeof(Element)));
    const int row = m_block * kBlockM + r;
    if (row < q.len)
      *reinterpret_cast<uint4*>(dq + row * p.dq_stride[1] + col) = *reinterpret_cast<const uint4*>(staged + r * kPitch + col);
  }
  if (p.trace.records != nullptr) {
    __syncthreads();
    if (t == 0) trace_cta(p.trace, 1, trace_start);
  }
}

}  // namespace hopattn::sm90::bwd
