// Ids of the hardware named barriers (bar.sync / bar.arrive) used by the warp-specialised kernel.
// Ids are relative to CUTLASS's user range (NamedBarrier adds ReservedNamedBarrierCount = 8),
// so 0..7 here are hardware barriers 8..15; keep the total at 8 or below.
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopattn::sm90::ws {

enum class FwdBarrier : unsigned {
  // Consumers arrive when their epilogue no longer reads the Q/O shared buffer; the producer warp
  // waits on it before its TMA overwrites that buffer with the next tile's Q.
  kQueryEmpty = 0,
  // One per consumer warpgroup (only the first kNumConsumerWG are used): its 128 threads sync
  // after writing their O slice to smem, before one of them issues the TMA store of that slice.
  kEpilogueWG0 = 1,  // .. kEpilogueWG0 + 2
  // Ping-pong turn tokens, one per consumer warpgroup: a warpgroup may issue its GEMMs only
  // after syncing on its own id, then arrives on the next warpgroup's id.
  kGemmTurnWG0 = 4,  // .. kGemmTurnWG0 + 2
  // O in V's buffer (Cfg::kOInV, two consumer warpgroups, so the third epilogue id is free): both
  // warpgroups sync before either writes O, since both read every V stage in their P V.
  kValueEmpty = 3,
  // O in V's buffer: each warpgroup's first warp arrives once its TMA store has read O out of V's
  // buffer; the producer warp syncs before loading the next tile's V over it (kOutputStoredThreads).
  kOutputStored = 7,
};

// kOutputStored's participants: the producer warp and the first warp of each of the two consumer
// warpgroups (the warp whose thread 0 issued, and waited for, its warpgroup's O store).
inline constexpr unsigned kOutputStoredThreads = 32 + 2 * 32;

inline constexpr unsigned kFwdBarrierCount = 8;
static_assert(kFwdBarrierCount <= 16 - cutlass::arch::NamedBarrier::ReservedNamedBarrierCount);

__device__ __forceinline__ unsigned barrier_id(FwdBarrier b, int offset = 0) {
  return static_cast<unsigned>(b) + static_cast<unsigned>(offset);
}

}  // namespace hopattn::sm90::ws
