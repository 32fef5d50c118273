// Warp-wide reductions for values every lane of a converged warp must agree on (the varlen
// scheduler's search, the packed sequence's offsets and lengths). redux.sync leaves its result in a
// uniform register (REDUX.SUM/MIN UR), where a shuffle leaves it in a vector register. With the
// scheduler's search written in these (and its loop closed before the tile), the packed FP8 d64
// kernel ran 1-4% faster; the same broadcast of seq_info's loads alone had not helped
// (docs/perf-notes.md, "Packed causal batches: the balanced order").
#pragma once

#include <cuda_runtime.h>

namespace hopattn::sm90::ws {

// The lanes' minimum: the value itself when all lanes hold the same one (a broadcast load).
__device__ __forceinline__ int warp_uniform(int v) { return __reduce_min_sync(0xffffffffu, v); }
__device__ __forceinline__ int warp_sum(int v) { return __reduce_add_sync(0xffffffffu, v); }

}  // namespace hopattn::sm90::ws
