// Arrivals on another CTA's mbarrier for the 2-CTA forward clusters, written so that nothing
// per-thread stays live across the key loop.
#pragma once

#include <cstdint>

#include <cute/arch/util.hpp>
#include <cutlass/arch/barrier.h>

namespace hopattn::sm90::ws {

// Arrives on the mbarrier at `bar`'s offset in CTA `cta` of the cluster, where `pred` holds. The
// predicate stays inside the asm: CUTLASS's ClusterBarrier::arrive(cta, pred) branches on it, and a
// lane-dependent branch inside the tile loop makes ptxas treat the key loop as divergent (see the
// kOutputStored arrival in kernel.cuh).
__device__ __forceinline__ void arrive_on_cta_if(uint64_t* bar, uint32_t cta, bool pred) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 remote;\n\t"
      "setp.ne.b32 p, %2, 0;\n\t"
      "@p mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "@p mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n\t"
      "}"
      :
      : "r"(cute::cast_smem_ptr_to_uint(bar)), "r"(cta), "r"(static_cast<uint32_t>(pred))
      : "memory");
}

// A consumer warpgroup's release of a K/V stage in a 2-CTA cluster: the stage's empty barrier in
// each CTA counts one arrival per consumer warpgroup of the cluster (PipelineTmaAsync's count).
// Thread 0 of the warpgroup arrives on CTA 0's barrier, thread 32 on CTA 1's. CUTLASS's
// consumer_release spreads the same two arrivals by a (pred, cta) pair that each thread computes
// once and holds; at 240 registers ptxas spilled both pairs (K's and V's) and read them back with
// 3-4 LDL per key block. Here both come from %tid.x inside the asm, read again at every release
// (warpgroups start at multiples of 128 threads, so bits 0-4 and 6 pick the thread, bit 5 the CTA).
// Same memory semantics as CUTLASS's (mbarrier.arrive's default .release.cta). Used where
// FwdMainloop::kPairReleaseFromTid holds: d256 only (at d128 it measured slower, see there).
__device__ __forceinline__ void release_stage_in_pair(uint64_t* empty_barrier) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 t, r, remote;\n\t"
      "mov.u32 t, %%tid.x;\n\t"
      "and.b32 r, t, 0x5f;\n\t"
      "setp.eq.u32 p, r, 0;\n\t"
      "bfe.u32 r, t, 5, 1;\n\t"
      "@p mapa.shared::cluster.u32 remote, %0, r;\n\t"
      "@p mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t"
      "}"
      :
      : "r"(cute::cast_smem_ptr_to_uint(empty_barrier))
      : "memory");
}

// The mbarrier word of a pipeline stage's barrier (ClusterBarrier is that word and nothing else;
// its member is protected).
__device__ __forceinline__ uint64_t* stage_barrier(cutlass::arch::ClusterBarrier& b) {
  static_assert(sizeof(cutlass::arch::ClusterBarrier) == sizeof(uint64_t));
  return reinterpret_cast<uint64_t*>(&b);
}

}  // namespace hopattn::sm90::ws
