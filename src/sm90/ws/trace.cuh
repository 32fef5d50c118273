// Per-tile timestamps of the forward kernel, in builds with HOPATTN_FWD_TRACE=1 only (a measuring
// library, scripts/variant-lib.sh; bench/fwd_trace.py reads them): for each tile with keys, when
// consumer warpgroup 0 began it and when it had issued its O store (%globaltimer, ns), on which
// SM, and how many key blocks it walked. What the records answer: the cost of a tile against its key
// blocks (a per-block slope and a per-tile intercept), the gaps between a CTA's tiles, and how
// unevenly the persistent CTAs finish. The records share the backward trace's buffer and format
// (sm90/bwd/trace.hpp, HOPATTN_BWD_TRACE=1 allocates it): kernel 2, and the key-block count in the
// record's `detail`; kernel 3 splits the tile's start (kFwdTraceStartKernel). Default builds
// compile none of this.
#pragma once

#include "sm90/bwd/trace.hpp"

namespace hopattn::sm90::ws {

inline constexpr uint32_t kFwdTraceKernel = 2;
// A second record per tile, for its start: from the scheduler's answer (`top`) to the first S
// GEMM's completion, with the setup before mma_tile (the tile's bounds, mask, softmax) in `detail`
// and the wait for Q and the first K after it in `block`, both in ns.
inline constexpr uint32_t kFwdTraceStartKernel = 3;

#if defined(__CUDACC__)
// One thread (consumer warpgroup 0's first), at the end of a tile: `top` when the scheduler
// answered, `start` when mma_tile began, `marks` Q and the first K in and the first S done
// (mma_tile's stamps; 0 on paths that do not stamp). One atomic for both records, as one costs
// a few hundred ns. It repeats bwd::trace_cta's few lines rather than sharing a slot helper with
// it: trace_cta is compiled into every shipped backward kernel, and routing it through such a
// helper changed their SASS (session 50, bwd_bf16_hdim64: 5 of 6 functions).
__device__ __forceinline__ void trace_fwd_tile(const bwd::BwdTrace& t, int key_blocks, uint64_t top, uint64_t start,
                                               const uint64_t (&marks)[2]) {
  if (t.records == nullptr) return;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const unsigned i = atomicAdd(t.count, 2u);
  const uint64_t end = bwd::trace_clock();
  if (i + 1 < bwd::kBwdTraceCapacity) {
    t.records[i] = bwd::BwdTraceRecord{kFwdTraceKernel, blockIdx.x, sm, uint32_t(key_blocks), start, end};
    const uint32_t load_wait = marks[0] ? uint32_t(marks[0] - start) : 0u;
    t.records[i + 1] = bwd::BwdTraceRecord{kFwdTraceStartKernel, load_wait, sm, uint32_t(start - top), top, marks[1]};
  }
}
#endif

}  // namespace hopattn::sm90::ws
