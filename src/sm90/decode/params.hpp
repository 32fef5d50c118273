// The decode kernels' shared vocabulary: their parameter struct (the validated problem plus the
// split count and the workspace), the tile sizes (all in one place) and the workspace layout.
// Host and device code both include it; nothing here needs the CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/kvcache_problem.hpp"

namespace hopattn::sm90::decode {

// One thread block = kWarps warps over kRows query rows of one (batch, kv head) and one key split.
// Each warp owns a chunk of kChunkKeys keys per step (its own cp.async pipeline, no block-wide
// barrier in the main loop), so one step of the block covers kStepKeys keys; the warps' partial
// softmax states merge through shared memory at the end.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunkKeys = 16;                  // keys per warp per step: one m16n8k16 k-step of P V
constexpr int kStepKeys = kWarps * kChunkKeys;  // keys per block per step; splits are multiples of it
constexpr int kMaxSplits = 128;
// The heuristic never splits finer than one block step. It was 256 keys; at batch 1 with a 1k cache
// (8 KV heads) that capped the split at 4 (32 blocks on 132 SMs, 12.2 us), where 16 splits of 64
// keys take 10.7 us: the combine costs less than the idle SMs (perf-notes, "decode v4").
constexpr int kMinKeysPerSplit = kStepKeys;
constexpr float kLog2e = 1.4426950408889634f;  // scores run in the log2 domain (exp2)
constexpr float kLn2 = 0.6931471805599453f;

// Query-row tiles of 16 (the mma M) per block: up to 2 for head_dim <= 128 (register budget of the
// fp32 O accumulator, kRows x head_dim per warp), 1 for 256.
constexpr int max_row_tiles(int head_dim) { return head_dim <= 128 ? 2 : 1; }

// Stages per warp pipeline: 16-key chunks of K and V a warp has in flight, plus the one it
// computes. 3 at head_dim 128 keeps a block at ~100 KB, so two fit an SM (paged caches use both);
// measured (hopattn-decode-probe, perf-notes "decode v3"), 4 or 6 stages were no faster with one
// block per SM and slower wherever two blocks per SM no longer fit: the split kernel is not short of
// bytes in flight. 4 at head_dim 64 (half the bytes per chunk); 3 at 256 is what fits.
constexpr int default_stages(int head_dim) { return head_dim == 64 ? 4 : 3; }

template <int kHeadDim, int kRowTiles, int kStagesArg = 0>
struct TileConfig {
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "head_dim 64, 128 or 256");
  static_assert(kRowTiles >= 1 && kRowTiles <= max_row_tiles(kHeadDim), "row tiles beyond the register budget");
  static constexpr int kRows = 16 * kRowTiles;
  static constexpr int kRowChunks = kHeadDim / 8;  // 16-byte chunks per row of a 16-bit tile
  static constexpr int kStages = kStagesArg > 0 ? kStagesArg : default_stages(kHeadDim);
  static_assert(kStages >= 2, "one chunk computed while the next lands");
  static constexpr int kTileBytes = kChunkKeys * kHeadDim * 2;  // one K or V chunk
  static constexpr int kWarpStageBytes = 2 * kTileBytes;
  static constexpr int kPipeBytes = kWarps * kStages * kWarpStageBytes;
  static constexpr int kQBytes = kRows * kHeadDim * 2;
  // The end-of-block merge reuses the pipeline's bytes: per warp O (rows x (head_dim + 8) fp32, the
  // pad makes the fragment stores conflict-free), the row maxima and the row sums.
  static constexpr int kMergeStride = kHeadDim + 8;
  static constexpr int kMergeBytes = kWarps * kRows * kMergeStride * 4 + 2 * kWarps * kRows * 4;
  static constexpr int kSmemBytes = kQBytes + (kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes);
  static_assert(kSmemBytes <= 227 * 1024, "more than one block's shared memory on sm_90");
};

// What the kernels read: the problem, the split count, the block's row tiling and the workspace.
struct DecodeParams {
  KvCacheProblem p;
  int num_splits = 1;
  int rows_per_block = 16;  // 16 * kRowTiles of the instantiation launched
  int row_blocks = 1;       // ceil(rows_per_kv_head / rows_per_block)
  // num_splits > 1: each split's normalised O, (num_splits, batch * heads_q * seqlen_q, head_dim),
  // and its log2-domain log-sum-exp, (num_splits, batch * heads_q * seqlen_q); row index
  // (b * heads_q + h) * seqlen_q + i, as lse. Null with one split (the kernel writes out directly).
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
};

constexpr std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

// The workspace of `splits` splits of `rows` query rows (batch * heads_q * seqlen_q): partial_o
// first, then partial_lse at partial_o_bytes (both 256-byte aligned). Empty with one split.
inline std::size_t partial_o_bytes(int64_t rows, int64_t head_dim, int splits) {
  if (splits <= 1 || rows <= 0) return 0;
  return align256(static_cast<std::size_t>(splits) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(head_dim) * 4);
}
inline std::size_t workspace_bytes(int64_t rows, int64_t head_dim, int splits) {
  if (splits <= 1 || rows <= 0) return 0;
  return partial_o_bytes(rows, head_dim, splits) + align256(static_cast<std::size_t>(splits) * static_cast<std::size_t>(rows) * 4);
}

// Keys of each split of a sequence with len_k keys: equal shares rounded up to whole block steps,
// so split s covers [s * keys, (s + 1) * keys) intersected with [0, len_k).
inline HOPATTN_HOST_DEVICE int keys_per_split(int len_k, int splits) {
  const int share = (len_k + splits - 1) / splits;
  return (share + kStepKeys - 1) / kStepKeys * kStepKeys;
}

// The keys [window_key_begin, window_key_end) that query i of a sequence with sq queries and len_k
// keys sees under the normalised window (left, right; -1 unbounded, causal is right = 0):
// visible_keys's rule (api/problem.hpp) in int, as len_k and sq are at most 2^30. The int64 bounds
// are compared before any arithmetic, so no bound overflows; without a window, 0 and len_k.
inline HOPATTN_HOST_DEVICE int window_key_begin(int i, int sq, int len_k, int64_t left) {
  const int diag = i - sq + len_k;
  return left < 0 || left >= diag ? 0 : diag - static_cast<int>(left);
}
inline HOPATTN_HOST_DEVICE int window_key_end(int i, int sq, int len_k, int64_t right) {
  const int diag = i - sq + len_k;  // right < len_k - diag - 1 = sq - i - 1 below: fits an int
  if (right < 0 || right >= len_k - diag - 1) return len_k;
  const int end = diag + static_cast<int>(right) + 1;
  return end > 0 ? end : 0;
}

}  // namespace hopattn::sm90::decode
