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

// Enqueues key_counts[b] = min(max(cache_seqlens[b], 0) + seqlen_new, capacity): the keys each
// sequence attends to after the append (the forward kernel's seqused_k on the chunked-prefill
// route, which reads no cache_seqlens itself). Returns the launch's error code.
cudaError_t launch_key_counts(const KvCacheProblem& p, int32_t* key_counts, cudaStream_t stream);

}  // namespace hopattn::sm90::decode
