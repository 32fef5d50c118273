// The CPU reference of KV-cache decoding: the append as a byte copy into the cache, then the plain
// forward reference (forward_cpu, double accumulation) on each sequence's keys gathered into a
// dense buffer. Nothing here knows about splits: any split count must agree with this.
#include "reference/kvcache_reference.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

// Element offset of token `pos` of sequence b, kv head h, in a cache with strides s.
int64_t cache_row(const KvCacheProblem& p, const int64_t s[3], int64_t b, int64_t h, int64_t pos) {
  if (!p.paged) return b * s[0] + pos * s[1] + h * s[2];
  const int64_t page = p.page_table[b * p.page_table_stride + pos / p.page_size];
  return page * s[0] + (pos % p.page_size) * s[1] + h * s[2];
}

}  // namespace

void attention_with_kvcache_cpu(const KvCacheProblem& p) {
  const int64_t es = static_cast<int64_t>(dtype_size(p.dtype)), d = p.head_dim, hkv = p.heads_kv;
  const size_t row_bytes = static_cast<size_t>(d * es);
  auto* k_cache = static_cast<uint8_t*>(p.k_cache);
  auto* v_cache = static_cast<uint8_t*>(p.v_cache);
  // 1. The append, in place.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 0; t < p.seqlen_new; ++t)
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t pos = p.cache_seqlens[b] + t;
        std::memcpy(k_cache + cache_row(p, p.k_stride, b, h, pos) * es,
                    static_cast<const uint8_t*>(p.k_new) + (b * p.kn_stride[0] + t * p.kn_stride[1] + h * p.kn_stride[2]) * es,
                    row_bytes);
        std::memcpy(v_cache + cache_row(p, p.v_stride, b, h, pos) * es,
                    static_cast<const uint8_t*>(p.v_new) + (b * p.vn_stride[0] + t * p.vn_stride[1] + h * p.vn_stride[2]) * es,
                    row_bytes);
      }
  if (p.no_queries()) return;
  // 2. Each sequence alone: its keys gathered dense, its queries and outputs as batch-1 views.
  std::vector<uint8_t> k, v;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len_k = p.cache_seqlens[b] + p.seqlen_new;
    k.resize(static_cast<size_t>(len_k * hkv) * row_bytes);
    v.resize(k.size());
    for (int64_t j = 0; j < len_k; ++j)
      for (int64_t h = 0; h < hkv; ++h) {
        const size_t dst = static_cast<size_t>(j * hkv + h) * row_bytes;
        std::memcpy(&k[dst], k_cache + cache_row(p, p.k_stride, b, h, j) * es, row_bytes);
        std::memcpy(&v[dst], v_cache + cache_row(p, p.v_stride, b, h, j) * es, row_bytes);
      }
    AttnProblem s;
    s.batch = 1;
    s.seqlen_q = p.seqlen_q;
    s.seqlen_k = len_k;
    s.heads_q = p.heads_q;
    s.heads_kv = hkv;
    s.head_dim = d;
    s.dtype = p.dtype;
    s.causal = p.causal;
    s.window_left = p.window_left;  // normalised by validate_kvcache as AttnProblem's (causal: right = 0)
    s.window_right = p.window_right;
    s.scale = p.scale;
    s.softcap = p.softcap;
    s.q = static_cast<const uint8_t*>(p.q) + b * p.q_stride[0] * es;
    s.k = k.data();
    s.v = v.data();
    s.out = static_cast<uint8_t*>(p.out) + b * p.o_stride[0] * es;
    s.lse = p.lse ? p.lse + b * p.heads_q * p.seqlen_q : nullptr;
    for (int i = 0; i < 3; ++i) {
      s.q_stride[i] = p.q_stride[i];
      s.o_stride[i] = p.o_stride[i];
    }
    s.k_stride[0] = s.v_stride[0] = 0;  // batch 1
    s.k_stride[1] = s.v_stride[1] = hkv * d;
    s.k_stride[2] = s.v_stride[2] = d;
    forward_cpu(s);
  }
}

}  // namespace hopattn::reference
