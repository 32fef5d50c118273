// The device half of the forward's tail split (tail_split.hpp): a piece's key range, and the merge
// of the pieces of one split tile by the consumer warp that finishes last.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "sm90/ws/tail_split.hpp"
#include "sm90/ws/warp_uniform.cuh"

namespace hopattn::sm90::ws {

// The piece's key blocks (tail_split.hpp's piece_block_range) as the mainloop's KeyBlocks. The
// last piece holds the last block, the one a partial seqlen_k masks; the mask is per block, so any
// piece may hold it.
template <class KeyBlocks>
__device__ __forceinline__ KeyBlocks piece_key_blocks(const TailSplit& split, KeyBlocks kb, int piece) {
  const BlockRange r = piece_block_range(split, kb.begin, kb.end, piece);
  return {r.begin, r.end};
}

// bar.red.or over the `threads` threads of named barrier `id` (a hardware id): every thread gets
// the OR of their predicates. CUTLASS's NamedBarrier has sync and arrive only.
__device__ __forceinline__ bool named_barrier_or(uint32_t id, uint32_t threads, bool pred) {
  uint32_t out;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(out)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  // Through redux.sync: ptxas cannot tell that an asm result is warp-uniform, and a branch on it
  // made it treat the whole tile loop as divergent (WARPSYNC before every GEMM of the key loop).
  return warp_uniform(static_cast<int>(out)) != 0;
}

// One consumer warpgroup's 64 rows of a piece: after finalize, o_rc holds them normalised and lse
// their natural-log sums. Every piece stores them to its slot; the warpgroup whose count comes
// last (of the split tile's `pieces` warpgroups that own these rows) merges every slot in piece
// order, so that the result does not depend on which piece finished last (bitwise the same run to
// run), and returns true with the merged O in o_rc and the merged lse: it then stores the tile as
// usual. The others return false and store nothing. The decision is the whole warpgroup's, since
// the epilogue syncs its 128 threads. `barrier` (an id of CUTLASS's NamedBarrier range) is the
// warpgroup's epilogue barrier, free here: the epilogue has not started.
//
// Slot of piece j, warp w: O as float4 groups [row][column group][lane], then lse [row][lane]
// (the four lanes of a quad hold a row's lse alike). .cg accesses: the slots are written and read
// in this kernel, by other SMs, so L1 must not serve them.
template <int kNumMmaThreads, class AccRowCol, int kRows>
__device__ bool merge_tail_pieces(const TailSplit& split, int split_tile, int piece, int thread_idx, uint32_t barrier,
                                  AccRowCol& o_rc, float (&lse)[kRows]) {
  using namespace cute;
  constexpr int kWarps = kNumMmaThreads / 32;
  constexpr int kCols = decltype(size<1>(o_rc))::value;
  static_assert(decltype(size<0>(o_rc))::value == kRows && kCols % 4 == 0);
  constexpr int kWarpFloats = kRows * kCols * 32 + kRows * 32;
  constexpr int kSlotFloats = kWarps * kWarpFloats;
  const int warp = thread_idx / 32, lane = thread_idx % 32, wg = thread_idx / 128;
  auto warp_slot = [&](int j) {
    return split.partial + (int64_t(split_tile) * split.pieces + j) * kSlotFloats + int64_t(warp) * kWarpFloats;
  };
  {
    float* mine = warp_slot(piece);
    float4* o4 = reinterpret_cast<float4*>(mine);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < kCols; c += 4)
        __stcg(o4 + (r * (kCols / 4) + c / 4) * 32 + lane,
               make_float4(o_rc(r, c), o_rc(r, c + 1), o_rc(r, c + 2), o_rc(r, c + 3)));
      __stcg(mine + kRows * kCols * 32 + r * 32 + lane, lse[r]);
    }
  }
  // Release: every thread's slot stores are visible device-wide before its warpgroup counts itself
  // (the fence, then the barrier orders them before thread 0's atomic).
  __threadfence();
  cutlass::arch::NamedBarrier::sync(128, barrier);
  bool last = false;
  if (thread_idx % 128 == 0) {
    last = atomicAdd(split.counters + split_tile * (kNumMmaThreads / 128) + wg, 1) == split.pieces - 1;
    __threadfence();  // acquire: the other pieces' slots, released before their counts
  }
  if (!named_barrier_or(barrier + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount, 128, last)) return false;
  __threadfence();

  float m[kRows], sum[kRows];
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    sum[r] = 0.f;
  }
  for (int j = 0; j < split.pieces; ++j) {
    const float* lse_j = warp_slot(j) + kRows * kCols * 32;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) m[r] = fmaxf(m[r], __ldcg(lse_j + r * 32 + lane));
  }
  CUTE_UNROLL
  for (int i = 0; i < size(o_rc); ++i) o_rc(i) = 0.f;
  for (int j = 0; j < split.pieces; ++j) {
    const float* slot = warp_slot(j);
    const float4* o4 = reinterpret_cast<const float4*>(slot);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      // A piece whose rows saw no key (lse -inf) weighs 0; so does every piece of a row none saw.
      const float l = __ldcg(slot + kRows * kCols * 32 + r * 32 + lane);
      const float w = m[r] == -INFINITY ? 0.f : expf(l - m[r]);
      sum[r] += w;
      CUTE_UNROLL
      for (int c = 0; c < kCols; c += 4) {
        const float4 v = __ldcg(o4 + (r * (kCols / 4) + c / 4) * 32 + lane);
        o_rc(r, c) = fmaf(w, v.x, o_rc(r, c));
        o_rc(r, c + 1) = fmaf(w, v.y, o_rc(r, c + 1));
        o_rc(r, c + 2) = fmaf(w, v.z, o_rc(r, c + 2));
        o_rc(r, c + 3) = fmaf(w, v.w, o_rc(r, c + 3));
      }
    }
  }
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const bool empty = !(sum[r] > 0.f);
    const float inv = empty ? 0.f : 1.f / sum[r];
    lse[r] = empty ? -INFINITY : m[r] + logf(sum[r]);
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) o_rc(r, c) *= inv;
  }
  return true;
}

}  // namespace hopattn::sm90::ws
