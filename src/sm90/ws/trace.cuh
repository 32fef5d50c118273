// Per-tile timestamps of the forward kernel, in builds with HOPATTN_FWD_TRACE=1 only (a measuring
// library, scripts/variant-lib.sh; bench/fwd_trace.py reads them): for each tile with keys, when
// consumer warpgroup 0 began it and when it had issued its O store (%globaltimer, ns), on which
// SM, and how many key blocks it walked. What the records answer: the cost of a tile against its key
// blocks (a per-block slope and a per-tile intercept), the gaps between a CTA's tiles, and how
// unevenly the persistent CTAs finish. The records share the backward trace's buffer and format
// (sm90/bwd/trace.hpp, HOPATTN_BWD_TRACE=1 allocates it): kernel 2, and the key-block count in the
// record's `detail`. Default builds compile none of this.
#pragma once

#include "sm90/bwd/trace.hpp"

namespace hopattn::sm90::ws {

inline constexpr uint32_t kFwdTraceKernel = 2;

#if defined(__CUDACC__)
// One thread (consumer warpgroup 0's first), at the end of a tile that began at `start`.
__device__ __forceinline__ void trace_fwd_tile(const bwd::BwdTrace& t, int key_blocks, uint64_t start) {
  bwd::trace_cta(t, kFwdTraceKernel, start, uint32_t(key_blocks));
}
#endif

}  // namespace hopattn::sm90::ws
