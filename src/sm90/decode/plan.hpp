// How a KV-cache problem maps onto the decode kernels: query rows per block, row blocks, key splits
// and the workspace they need. Host-only arithmetic, apart from the launcher so the CPU tests can
// pin it down (the split heuristic in particular).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "api/kvcache_problem.hpp"
#include "sm90/decode/params.hpp"

namespace hopattn::sm90::decode {

// Resident decode blocks per SM, as their shared memory allows (228 KB per SM on sm_90, 1 KB of it
// reserved per block); the registers allow at least as many (the ptxas report: <= 248 per thread
// at 128 threads). 3 at head_dim 64, 2 at 128, 1 at 256.
constexpr int64_t kSmemPerSm = 228 * 1024;
constexpr int64_t kSmemReservedPerBlock = 1024;
inline int blocks_per_sm(int64_t head_dim, int row_tiles) {
  int64_t smem = 0;
  switch (head_dim) {
    case 64: smem = row_tiles > 1 ? TileConfig<64, 2>::kSmemBytes : TileConfig<64, 1>::kSmemBytes; break;
    case 128: smem = row_tiles > 1 ? TileConfig<128, 2>::kSmemBytes : TileConfig<128, 1>::kSmemBytes; break;
    case 256: smem = TileConfig<256, 1>::kSmemBytes; break;
    default: return 1;
  }
  return static_cast<int>(std::max<int64_t>(1, kSmemPerSm / (smem + kSmemReservedPerBlock)));
}

// `blocks_per_split`: thread blocks per split (batch * heads_kv * row blocks); `capacity`: the most
// keys the kernel splits for one sequence (the host does not know cache_seqlens, which live on the
// device): the cache capacity, or fewer under a window with a left bound
// (KvCacheProblem::max_window_keys); `slots`: the wave the split decision fills, one block per SM
// (plan_decode); `requested`: KvCacheArgs::num_splits. A forced count is clamped to the capacity's
// 64-key steps and kMaxSplits.
//
// The kernel is bound by HBM, and a partly filled last wave leaves most SMs idle while it streams
// its keys, so the heuristic looks at wave efficiency, (blocks / slots) / ceil(blocks / slots):
// no split when the unsplit grid fills 80% of a wave already; otherwise the fewest splits (each
// split costs a partial O per row, the combine, and one more pipeline fill) whose efficiency is
// within 95% of the best count's, never below kMinKeysPerSplit keys a split. Time goes as
// 1 / efficiency, so a looser bound trades kernel time for fewer splits: 85% picked 15 splits
// where 16 fill the wave (docs/perf-notes.md, "KV-cache decoding v2").
inline int choose_num_splits(int64_t blocks_per_split, int64_t capacity, int64_t slots, int requested) {
  const int64_t steps = std::max<int64_t>(1, (capacity + kStepKeys - 1) / kStepKeys);
  const int64_t limit = std::min<int64_t>(kMaxSplits, steps);
  if (requested >= 1) return static_cast<int>(std::min<int64_t>(requested, limit));
  slots = std::max<int64_t>(slots, 1);
  if (blocks_per_split <= 0 || blocks_per_split * 5 >= slots * 4) return 1;
  const int64_t most = std::min(limit, std::max<int64_t>(1, capacity / kMinKeysPerSplit));
  const auto efficiency = [&](int64_t splits) {
    const int64_t blocks = blocks_per_split * splits;
    const int64_t waves = (blocks + slots - 1) / slots;
    return static_cast<double>(blocks) / static_cast<double>(waves * slots);
  };
  double best = 0;
  for (int64_t s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
  for (int64_t s = 1; s <= most; ++s)
    if (efficiency(s) >= 0.95 * best) return static_cast<int>(s);
  return 1;
}

struct DecodePlan {
  int row_tiles = 1;   // 16-row tiles per block (the kernel instantiation)
  int64_t row_blocks = 0;
  int num_splits = 1;
  int64_t blocks = 0;  // of the split kernel
  std::size_t workspace = 0;
};

// The plan for a validated problem on a GPU with num_sms SMs. blocks is 0 when there are no
// query rows (only the append runs).
inline DecodePlan plan_decode(const KvCacheProblem& p, int num_sms) {
  DecodePlan plan;
  const int64_t rows = p.rows_per_kv_head();
  if (p.no_queries() || rows == 0) return plan;
  plan.row_tiles = rows > 16 ? max_row_tiles(static_cast<int>(p.head_dim)) : 1;
  plan.row_blocks = (rows + 16 * plan.row_tiles - 1) / (16 * plan.row_tiles);
  const int64_t blocks_per_split = p.batch * p.heads_kv * plan.row_blocks;
  // Contiguous caches: one block per SM, although shared memory fits up to blocks_per_sm: at batch 1,
  // 32 splits of two resident blocks per SM measured 7-9% slower than 16 splits of one (perf-notes,
  // decode v2): each block streams too few keys to amortise its pipeline fill. Paged caches: every
  // resident block, as each 16-key chunk waits on a page-table load first and one 4-warp block per
  // SM cannot hide that (batch 8: 2 splits 3.6 TB/s against 4 splits 4.0-4.3 at 32k-128k).
  const int64_t slots = p.paged ? static_cast<int64_t>(num_sms) * blocks_per_sm(p.head_dim, plan.row_tiles) : num_sms;
  // A window with a left bound caps the keys of a sequence (seqlen_q + left): a 4k window over a
  // 128k cache is split as 4k keys, not 128k.
  plan.num_splits = choose_num_splits(blocks_per_split, p.max_window_keys(), slots, p.num_splits);
  plan.blocks = blocks_per_split * plan.num_splits;
  plan.workspace = workspace_bytes(p.batch * p.heads_q * p.seqlen_q, p.head_dim, plan.num_splits);
  return plan;
}

// The grid is one-dimensional (batch * heads_kv would overflow grid.y/z limits).
constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();

}  // namespace hopattn::sm90::decode
