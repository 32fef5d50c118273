// The CPU reference of the KV-cache decoding call (attention_with_kvcache_cpu).
#pragma once

#include "api/kvcache_problem.hpp"

namespace hopattn::reference {

// Host memory, index values already checked (validate_kvcache with Backend::kCpu). Appends
// k_new/v_new into the cache rows of tokens cache_seqlens[b] .. + seqlen_new, then runs
// forward_cpu on each sequence's gathered keys (its first cache_seqlens[b] + seqlen_new cache rows,
// copied into a dense (1, len_k, heads_kv, head_dim) buffer) against its queries.
void attention_with_kvcache_cpu(const KvCacheProblem& p);

}  // namespace hopattn::reference
