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
// through fp32 atomics into the workspace.
template <DType kDType, int kHeadDim_, bool kCausal_>
struct BwdConfig {
  static_assert(kHeadDim_ == 64 || kHeadDim_ == 128, "backward head_dim must be 64 or 128");
  using Element = typename ws::ElementOf<kDType>::type;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kCausal = kCausal_;
  // Queries per step: the N of the S^T / dP^T GEMMs and the K of the dK / dV GEMMs. d128: 64 keeps
  // the transposed scores (32 fp32 per thread each) beside dK and dV (2 x 64 per thread). d64: dK
  // and dV take only 2 x 32, so 128 queries (S^T, dP^T 64 each) fit and halve the per-step
  // overheads (barriers, dQ staging) per FLOP.
  static constexpr int kBlockM = kHeadDim == 64 ? 128 : 64;
  static_assert(kRowPadding % kBlockM == 0 && kBlockM % kQueryBlock == 0);
  // Keys per CTA: one 64-row WGMMA slice per consumer warpgroup.
  static constexpr int kBlockN = 128;
  static constexpr int kStages = 2;  // Q (+ lse) and dO (+ D) double-buffered
  static constexpr int kNumConsumerWG = kBlockN / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWG * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;  // + the producer warpgroup
  // setmaxnreg: 128*24 + 256*240 = 64512 <= 64K registers per SM.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
};

// Named barriers (CUTLASS's user range; see ws/named_barriers.hpp).
enum class BwdBarrier : unsigned {
  kdSReady = 0,   // both consumer warpgroups wrote their dS^T slice: the dQ GEMM may read it
  kdQReady = 1,   // both consumer warpgroups staged their dQ: one thread may issue the bulk reduce-add
};

__device__ __forceinline__ unsigned barrier_id(BwdBarrier b) { return static_cast<unsigned>(b); }

}  // namespace hopattn::sm90::bwd
