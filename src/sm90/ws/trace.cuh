// Per-tile timestamps of the forward kernel, in builds with HOPATTN_FWD_TRACE=1 only (a measuring
// library, scripts/variant-lib.sh; bench/fwd_trace.py reads them): for each tile with keys, when
// consumer warpgroup 0 began it and when it had issued its O store (%globaltimer, ns), on which
// SM, and how many key blocks it walked. What the records answer: the cost of a tile against its key
// blocks (a per-block slope and a per-tile intercept), the gaps between a CTA's tiles, and how
// unevenly the persistent CTAs finish. The records share the backward trace's buffer and format
// (sm90/bwd/trace.hpp, HOPATTN_BWD_TRACE=1 allocates it): kernel 2, and the key-block count in the
// record's `detail`; kernel 3 splits the tile's start (kFwdTraceStartKernel), kernel 4 its end
// (kFwdTraceEndKernel), kernel 5 times the walk between them (kFwdTraceWalkKernel). Default builds
// compile none of this.
#pragma once

#include "sm90/bwd/trace.hpp"

namespace hopattn::sm90::ws {

inline constexpr uint32_t kFwdTraceKernel = 2;
// A second record per tile, for its start: from the scheduler's answer (`top`) to the first S
// GEMM's completion, with the setup before mma_tile (the tile's bounds, mask, softmax) in `detail`
// and the wait for Q and the first K after it in `block`, both in ns.
inline constexpr uint32_t kFwdTraceStartKernel = 3;
// A third, for its end: from the walk's end (the last block's softmax and P conversion done) to the
// O store's issue, with the last P V (its turn wait, issue and completion) in `block` and the
// finalize (O / l, lse, the O-in-V sync) in `detail`, both in ns; the rest is the epilogue's store.
inline constexpr uint32_t kFwdTraceEndKernel = 4;
// A fourth, for the walk: from the first S's completion to the walk's end, with the tile's key
// blocks in `detail` (its slope against the blocks is a block's steady cost) and, in `block`, the
// ns this trace's own slot atomic took (from session 59 on; before, the end record included it).
inline constexpr uint32_t kFwdTraceWalkKernel = 5;
// mma_tile's stamps (thread 0; 0 where a path does not stamp): Q and the first K in, the first S
// done, the walk done, the last P V done.
inline constexpr int kFwdTraceMarks = 4;

#if defined(__CUDACC__)
// One thread (consumer warpgroup 0's first), at the end of a tile: `top` when the scheduler
// answered, `start` when mma_tile began, `marks` mma_tile's stamps (kFwdTraceMarks), `pre_store`
// just before the epilogue's store. One atomic for the four records, as one costs a few hundred ns.
// It repeats bwd::trace_cta's few lines rather than sharing a slot helper with it: trace_cta is
// compiled into every shipped backward kernel, and routing it through such a helper changed their
// SASS (session 50, bwd_bf16_hdim64: 5 of 6 functions).
__device__ __forceinline__ void trace_fwd_tile(const bwd::BwdTrace& t, int key_blocks, uint64_t top, uint64_t start,
                                               const uint64_t (&marks)[kFwdTraceMarks], uint64_t pre_store) {
  if (t.records == nullptr) return;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  // The store is issued now; the slot's atomic (a return trip to L2) comes after and counts in the
  // tile (record 0's end, so the gap to the next tile excludes it) but not in the store (record 2's
  // end); its own time goes in the walk record's `block`.
  const uint64_t stored = bwd::trace_clock();
  const unsigned i = atomicAdd(t.count, 4u);
  const uint64_t end = bwd::trace_clock();
  if (i + 3 < bwd::kBwdTraceCapacity) {
    t.records[i] = bwd::BwdTraceRecord{kFwdTraceKernel, blockIdx.x, sm, uint32_t(key_blocks), start, end};
    const uint32_t load_wait = marks[0] ? uint32_t(marks[0] - start) : 0u;
    t.records[i + 1] = bwd::BwdTraceRecord{kFwdTraceStartKernel, load_wait, sm, uint32_t(start - top), top, marks[1]};
    const bool ended = marks[2] != 0 && marks[3] != 0;  // both stamped: the end splits
    t.records[i + 2] = bwd::BwdTraceRecord{kFwdTraceEndKernel, ended ? uint32_t(marks[3] - marks[2]) : 0u, sm,
                                           ended ? uint32_t(pre_store - marks[3]) : 0u, ended ? marks[2] : 0u, stored};
    t.records[i + 3] = bwd::BwdTraceRecord{kFwdTraceWalkKernel, uint32_t(end - stored), sm, uint32_t(key_blocks), marks[1],
                                           marks[1] != 0 ? marks[2] : 0u};
  }
}
#endif

}  // namespace hopattn::sm90::ws
