// Which kernel a KV-cache call runs. The split-KV decode kernel (mma.sync, a few query rows per KV
// head) is built for decoding. Chunked prefill (many new query rows against the cache) runs the
// warp-specialised forward kernel instead, on the cache's batched views with per-sequence key
// counts: 3.3-3.7x faster than the decode kernel from 128 rows per sequence up, within 1-3% of
// hopattn::forward on the same keys (docs/design-kvcache-prefill.md, BENCHMARKS.md).
// A pure host function of the validated problem, so the CPU tests pin every rule.
#pragma once

#include <climits>
#include <cstdint>
#include <cstring>

#include "api/kvcache_problem.hpp"
#include "sm90/ws/key_tile.hpp"

namespace hopattn {

enum class KvKernel { kDecode, kForward };

// Query rows per sequence from which the forward kernel is the faster one. Its query tiles are
// 128 rows of one head, so fewer rows leave most of each tile empty; the decode kernel packs a GQA
// group's heads into its row blocks instead. H200, 32/8 heads, d128, 8k cache (perf-notes, "The
// KV-cache call with many query rows"): at 16 rows decode 101 TFLOP/s against forward 83, at 32
// rows 115 against 160-166, at 64 rows 164-166 against 301-325.
constexpr int64_t kKvForwardMinSeqlenQ = 32;

// What the forward kernel's TMA views need (16-byte aligned base and strides) and its 32-bit
// indices hold; anything else stays on the decode kernel, which takes any validated layout.
inline bool kv_forward_layout_ok(const KvCacheProblem& p) {
  const auto aligned = [](const void* ptr, const int64_t (&stride)[3]) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    for (int64_t s : stride)
      if (s % 8 != 0) return false;  // 8 elements of a 16-bit dtype: 16 bytes
    return true;
  };
  constexpr int64_t kMaxIndex = INT_MAX / 2;  // ws_indices_fit's bound
  const int64_t m_blocks = (p.seqlen_q + 127) / 128;
  // An empty cache (capacity 0) has no key rows for a TMA view: the decode kernel writes its zeros.
  return aligned(p.q, p.q_stride) && aligned(p.out, p.o_stride) && aligned(p.k_cache, p.k_stride) &&
         aligned(p.v_cache, p.v_stride) && p.seqlen_q <= kMaxIndex && p.capacity > 0 && p.capacity <= kMaxIndex &&
         p.heads_q <= kMaxIndex && p.batch <= kMaxIndex && m_blocks * p.heads_q * p.batch <= INT_MAX / 4;
}

// The key tile of the forward kernel the call would run: the causal configuration's for causal,
// window and softcap problems (the local kernels are built on it), else the plain one's.
inline int kv_forward_key_tile(const KvCacheProblem& p) {
  const bool masked = p.causal || p.window_left >= 0 || p.window_right >= 0 || p.softcap > 0.f;
  return sm90::ws::default_key_tile(static_cast<int>(p.head_dim), masked);
}

// A paged cache runs the forward kernel when each key tile lies inside one page, so that one TMA
// box per tile reads it: page_size a multiple of the key tile (128 at d64 and at causal d128, so
// pages of 128, 256, ...). Other page sizes keep the decode kernel, which gathers rows of any page
// size. The view's page count and page size are 32-bit TMA coordinates.
inline bool kv_forward_pages_ok(const KvCacheProblem& p) {
  if (!p.paged) return true;
  return p.page_size % kv_forward_key_tile(p) == 0 && p.num_pages > 0 && p.num_pages <= INT_MAX &&
         p.page_size <= INT_MAX;
}

// `forced`: the HOPATTN_KV_KERNEL environment value ("decode" or "forward"), or null. It is for
// tests and benchmarks that time both kernels on one shape; "forward" still needs a problem the
// forward kernel can run. Page sizes that are not a multiple of the key tile, and explicit split
// counts above 1 (a split-KV request), keep the decode kernel.
inline KvKernel choose_kv_kernel(const KvCacheProblem& p, const char* forced) {
  if (forced != nullptr && std::strcmp(forced, "decode") == 0) return KvKernel::kDecode;
  const bool force_forward = forced != nullptr && std::strcmp(forced, "forward") == 0;
  if (p.num_splits > 1 || p.no_queries() || !kv_forward_layout_ok(p) || !kv_forward_pages_ok(p))
    return KvKernel::kDecode;
  return force_forward || p.seqlen_q >= kKvForwardMinSeqlenQ ? KvKernel::kForward : KvKernel::kDecode;
}

}  // namespace hopattn
