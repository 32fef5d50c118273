// The in-place KV append of the decode path: k_new/v_new rows into the cache at each sequence's
// cache_seqlens[b] .. + seqlen_new, before the attention kernel reads them (same stream).
#pragma once

#include <cuda_runtime_api.h>

#include "api/kvcache_problem.hpp"

namespace hopattn::sm90::decode {

// Enqueues the copy for a validated problem with seqlen_new > 0 (16-bit dtypes, 16-byte aligned
// rows). Rows that would land at or past the capacity (unchecked bad cache_seqlens) are dropped;
// page indices are clamped into the pool. Returns the launch's error code.
cudaError_t launch_append(const KvCacheProblem& p, cudaStream_t stream);

}  // namespace hopattn::sm90::decode
