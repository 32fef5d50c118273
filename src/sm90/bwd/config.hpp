// Tile sizes, warpgroup roles and named-barrier ids of the Hopper backward kernel: the one place
// that decides them per (dtype, head dim, causal). Everything else in src/sm90/bwd/ derives from it.
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/bwd/workspace.hpp"

namespace hopattn::sm90::bwd {

// Each CTA owns kBlockN keys of one (batch, kv head) and walks every query block that sees them,
// over all query heads of the GQA group: dK and dV stay in registers for the whole walk (so they
// are summed over the group without atomics and are deterministic), while dQ leaves each step
// as an fp32 reduce-add into the workspace.
//
// Two ways to share a CTA's work between its two consumer warpgroups:
// - key split (head_dim 64, 128): each warpgroup owns 64 of the 128 keys for every GEMM.
// - head_dim split (head_dim 256): dK and dV of 64 keys at d256 are 2 x 128 fp32 per thread of
//   one warpgroup, over the 240 registers it gets. So the CTA owns 64 keys, warpgroup 0 computes
//   S^T and P^T, warpgroup 1 dP^T and dS^T (exchanged through shared memory), and both split
//   head_dim for dV, dK and dQ (2 x 64 fp32 per thread for dK, dV). See docs/design-backward.md.
// kLocal_ (with kCausal_): a sliding window with run-time bounds; a separate instantiation so that the
// causal kernels keep compile-time bounds (as the forward's, tile_shape.hpp).
// kSoftcap_ (with kLocal_): softcapped scores, and dS times the cap's derivative; like the forward,
// only in the local kernel (unbounded run-time bounds for a problem without a window).
// kQueryStep_: the query rows per step (bwd_query_step, workspace.hpp); 0 = the head dim's
// default, the step of packed batches.
template <DType kDType, int kHeadDim_, bool kCausal_, bool kLocal_ = false, bool kSoftcap_ = false, int kQueryStep_ = 0>
struct BwdConfig {
  static_assert(kHeadDim_ == 64 || kHeadDim_ == 128 || kHeadDim_ == 256, "backward head_dim must be 64, 128 or 256");
  using Element = typename ws::ElementOf<kDType>::type;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kCausal = kCausal_;  // masked: causal, or a window (kLocal)
  static constexpr bool kLocal = kCausal_ && kLocal_;
  static constexpr bool kSoftcap = kSoftcap_;
  static_assert(!kSoftcap || kLocal, "softcapping lives in the local (run-time window) kernel only");
  static constexpr bool kSplitHeadDim = kHeadDim == 256;
  // The key split's dQ writer warp stores each tile's first partial (dq_first_store, workspace.hpp).
  static_assert(dq_first_store(kHeadDim) == !kSplitHeadDim);
  // Only the head split's consumers count themselves done (count_dq_done).
  static_assert(!dq_overlap(kHeadDim) || kSplitHeadDim);
  // Queries per step: the N of the S^T / dP^T GEMMs and the K of the dK / dV GEMMs. d128: 64 keeps
  // the transposed scores (32 fp32 per thread each) beside dK and dV (2 x 64 per thread); 80 (40
  // each) still fits and fills shared memory (fixed-length unmasked batches: bwd_query_step). d64:
  // dK and dV take only 2 x 32, so 128 queries (S^T, dP^T 64 each) fit and halve the per-step
  // overheads (barriers, dQ staging) per FLOP. d256: 64, bounded by shared memory (Q and dO
  // stages of 64 x 256 are 32 KB each).
  static constexpr int kBlockM = kQueryStep_ != 0 ? kQueryStep_ : bwd_query_step(kHeadDim, true, true);
  static_assert(kBlockM == bwd_query_step(kHeadDim, true, true) ||
                    (kBlockM == bwd_query_step(kHeadDim, false, false) && !kCausal_ && !kSoftcap_),
                "a query step that bwd_query_step never picks");
  // Tile t's turn counter is semaphore t * (kBlockM / kQueryBlock) (BwdKernel::dq_semaphore): one per
  // tile and inside the per-kQueryBlock array when the step is a multiple of it or below twice it.
  static_assert(kBlockM % 16 == 0 && (kBlockM % kQueryBlock == 0 || kBlockM < 2 * kQueryBlock));
  // Keys per CTA: one 64-row WGMMA slice per consumer warpgroup (key split), or one for both.
  static constexpr int kBlockN = kSplitHeadDim ? 64 : 128;
  static constexpr int kStages = 2;  // Q (+ lse) and dO (+ D) double-buffered
  static constexpr int kNumConsumerWG = 2;
  static constexpr int kNumMmaThreads = kNumConsumerWG * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;  // + the producer warpgroup
  // setmaxnreg: 128*24 + 256*240 = 64512 <= 64K registers per SM.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
};

// Named barriers (CUTLASS's user range; see ws/named_barriers.hpp).
enum class BwdBarrier : unsigned {
  kdSReady = 0,   // dS^T is in shared memory (key split: both slices): the dK (head split) and dQ GEMMs may read it
  kdQReady = 1,   // head_dim split, deterministic mode: both warpgroups' halves are added; the turn may pass
  kPReady = 2,    // head_dim split: warpgroup 0 wrote P^T; warpgroup 1 may read it
  kdQStagedWG0 = 3,  // head_dim split, one per consumer warpgroup (3, 4): its 128 threads staged their dQ half
  // Key split (ids shared with the head split's above: a kernel runs one split): the dQ writer warp
  // (producer warpgroup) and each consumer warpgroup hand that warpgroup's half of the staging
  // buffer back and forth: Full (the warpgroup arrives, the writer syncs) and Empty (the writer
  // arrives once its bulk add has read the half, the warpgroup syncs before staging the next step).
  // One pair per warpgroup, so the warpgroups meet only at kdSReady.
  kdQFullWG0 = 1,   // .. kdQFullWG0 + 1
  kdQEmptyWG0 = 3,  // .. kdQEmptyWG0 + 1
  // store_dk_dv (both splits): every consumer is past its last GEMM (K and V are free), and then every
  // consumer has written its dK and dV into them.
  kKvStore = 5,
};

__device__ __forceinline__ unsigned barrier_id(BwdBarrier b) { return static_cast<unsigned>(b); }

}  // namespace hopattn::sm90::bwd
