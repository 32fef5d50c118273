#include "api/fp8_heuristics.hpp"
#include "api/heuristics.hpp"

#include "api/tuning_override.hpp"
#include "api/varlen_heuristics.hpp"

namespace hopattn::heuristics {

FwdTuning& fwd_tuning() {
  static FwdTuning t{env_override("HOPATTN_WS_SNAKE"), env_override("HOPATTN_WS_FOLD"),
                     env_override("HOPATTN_WS_VARLEN_BALANCE"), env_override("HOPATTN_FP8_KEY_TILE"),
                     env_override("HOPATTN_D128_KEY_TILE"), env_override("HOPATTN_D64_QUERY_TILE"),
                     env_override("HOPATTN_D256_KEY_TILE"), env_override("HOPATTN_FWD_CLUSTER")};
  return t;
}

// Measured over the paper grid: the snake order gains 6-11% at seqlen >= 4k, where each CTA runs
// many causal tiles of widely different lengths, and loses ~5% at 1k-2k, where tiles are short
// and runs of equal-length ones already balance the plain round-robin.
bool causal_snake_order(int64_t seqlen_q) {
  return forced_or(fwd_tuning().snake, seqlen_q >= 4096);
}

// Measured on the paper grid (docs/perf-notes.md, v3): with 128-row tiles (d128, d256) folding gains
// 16-23% at causal 512-2k, 3-6% at 4k, 1-2% at 8k and nothing at 16k; with 192-row tiles (d64) it
// loses 2-23%: an odd number of query blocks leaves a half-cost unit per head, and with 132 CTAs
// the same CTAs draw it every round. FP8 fixed-length, on compare.py's causal FP8 grid (perf-notes,
// "The fold order for fixed-length FP8"): 128-row tiles gain 2-10% up to 8k, d64 loses 4-19%.
// Packed FP8 batches folded at every height until session 23 (+11-21% over the plain order,
// perf-notes "FP8 on packed batches"); at d64 the balanced order beats the fold (perf-notes,
// "Packed causal batches: the balanced order"), so d64 packed batches no longer fold either.
bool causal_fold_order(int block_m) {
  return forced_or(fwd_tuning().fold, block_m == 128);
}

// The plain order deals each sequence's query blocks m_block fastest; with 132 CTAs and 11 blocks
// per head (2k at d64's 192 rows) every CTA draws the same block in every round. Measured with
// bench/varlen_same_work.py (perf-notes, "Packed causal batches: the balanced order"): bf16 d64
// 16 x 2k causal 1.65x -> 1.05-1.06x the fixed-length call, 4 x 8k 1.20x -> 1.00-1.04x; FP8 d64
// 16 x 2k 1.19x (folded) -> 1.07-1.09x, 4 x 8k 1.12x -> 1.09-1.10x.
bool varlen_balanced_order() { return forced_or(fwd_tuning().varlen_balance, true); }

// A load model of bench/varlen.py's powers-of-two causal mix (perf-notes, "a load model"): the
// static order leaves the busiest CTA at 1.050 of the mean, greedy dealing of the same list at 1.002.
int& varlen_dynamic_override() {
  static int forced = env_override("HOPATTN_WS_VARLEN_DYNAMIC");
  return forced;
}
bool varlen_dynamic_order() { return forced_or(varlen_dynamic_override(), true); }

// docs/perf-notes.md, "FP8 d128 with 224-key tiles": at 8k and 16k keys the 224-key tile runs
// attention_fp8 2-4% faster; below, the last tile's padding (up to 9% more keys at 1k and 2k, 4% at
// 4k) costs more than the longer GEMMs win. HOPATTN_FP8_KEY_TILE=224/128 forces either.
int fp8_key_tile(int64_t head_dim, int64_t seqlen_k, bool varlen) {
  constexpr int kWide = 224;  // sm90::fp8::kWideKeyBlock (this file stays free of kernel headers)
  constexpr int64_t kMinKeys = 8192;
  if (head_dim != 128 || varlen) return 0;
  const int forced = fwd_tuning().fp8_key_tile;
  if (forced == kWide) return kWide;
  if (forced == 128) return 0;
  return seqlen_k >= kMinKeys ? kWide : 0;
}

// Up to 1k keys, N = 128 pads nothing at the grid's powers of two and leaves shared memory for the
// separate O buffer (+18% at 512); up to 4k, N = 160 keeps the separate O buffer (+4% at 2k);
// beyond, N = 176 amortises each softmax over the most keys (+1.5% at 16k).
// HOPATTN_D128_KEY_TILE=128/160/176 forces one (other values are ignored).
int d128_noncausal_key_tile(int64_t seqlen_k) {
  switch (fwd_tuning().d128_key_tile) {
    case 128: return 128;
    case 160: return 160;
    case 176: return 0;
    default: break;
  }
  return seqlen_k <= 1024 ? 128 : seqlen_k <= 4096 ? 160 : 0;
}

int64_t causal_tile_pairs(int64_t seqlen_q, int64_t seqlen_k, int block_m, int block_n) {
  if (seqlen_q <= 0 || seqlen_k <= 0 || block_m <= 0 || block_n <= 0) return 0;
  // FwdMainloop::row_shift: the padding a seqlen that is no multiple of the tile leaves, in whole
  // warpgroups (64 rows), goes before the first row.
  const int64_t shift = block_m % 128 != 0 ? (block_m - seqlen_q % block_m) % block_m / 64 * 64 : 0;
  int64_t pairs = 0;
  for (int64_t first = -shift; first < seqlen_q; first += block_m) {
    const int64_t last = first + block_m - 1 < seqlen_q - 1 ? first + block_m - 1 : seqlen_q - 1;
    int64_t keys = last + 1 + seqlen_k - seqlen_q;  // the tile's last row sees keys [0, keys)
    keys = keys < 0 ? 0 : keys > seqlen_k ? seqlen_k : keys;
    pairs += int64_t(block_m) * ((keys + block_n - 1) / block_n) * block_n;
  }
  return pairs;
}

namespace {

struct Tiling {
  int rows, keys;
};

// Whether a short causal call should leave the default tiling for a smaller one: the default
// computes >= min_ratio x the smaller one's score pairs. Only up to 1k query rows, the range
// measured for both rules below (from there on the ratios stay under their bars anyway).
bool smaller_tiling_pays(int64_t seqlen_q, int64_t seqlen_k, Tiling dflt, Tiling smaller, double min_ratio) {
  constexpr int64_t kMaxRows = 1024;
  if (seqlen_q > kMaxRows) return false;
  const int64_t small = causal_tile_pairs(seqlen_q, seqlen_k, smaller.rows, smaller.keys);
  return small > 0 && double(causal_tile_pairs(seqlen_q, seqlen_k, dflt.rows, dflt.keys)) >= min_ratio * double(small);
}

}  // namespace

// Measured on an H100 (docs/perf-notes.md, session 53), the 128-row kernel against the 192-row one:
// causal 512 +8.8%, 1k -5.5%, 2k -8.6%, 4k -10.2% (non-causal -4 to -9% at 512-4k: never taken).
// Per score pair computed, 128-row tiles run at ~0.86 of the 192-row rate (2k: 0.914 x the 1.058
// pair ratio), so they win where the 192-row tiling computes >= 1/0.86 = 1.16x their pairs: at 512
// (1.20x, with the 64 padding rows) and below, not at 1k (1.12x).
int d64_causal_query_tile(int64_t seqlen_q, int64_t seqlen_k) {
  const int forced = fwd_tuning().d64_query_tile;
  if (forced == 128 || forced == 192) return forced;
  return smaller_tiling_pays(seqlen_q, seqlen_k, {192, 128}, {128, 128}, 1.17) ? 128 : 192;
}

// Measured on an H100 (docs/perf-notes.md, session 53), 64-key against 80-key tiles: causal 512
// +4.2%, 1k +2.7%, 2k -2.7%; non-causal 512 -0.3%, 1k -1.8%, 4k -0.8% (never taken). 80 keys do
// not divide the 128-row tiles' diagonal: at 512 they compute 1.125x the pairs of 64-key tiles, at
// 1k 1.059x, at 2k 1.029x, while a 64-key tile carries its block's fixed costs over fewer keys
// (per pair computed, 0.93-0.97 of the 80-key rate). So 64 where the ratio is >= 1.05.
int d256_causal_key_tile(int64_t seqlen_q, int64_t seqlen_k) {
  const int forced = fwd_tuning().d256_key_tile;
  if (forced == 64 || forced == 80) return forced;
  return smaller_tiling_pays(seqlen_q, seqlen_k, {128, 80}, {128, 64}, 1.05) ? 64 : 80;
}

// Measured on an H100 (docs/perf-notes.md, session 54), clusters against single CTAs, two A/Bs of 3
// rounds each: d128 1k -2.5%, 2k +4.2% / -1.4% and 4k +0.8% / +0.4% (level), 8k +1.2% / +2.8%,
// 16k +2.1% / +1.8%; d256 1k -3.0%, 2k -0.8%, 4k +0.5%, 8k -0.7%, 16k +0.9% / +1.8%. Short tiles
// lose: the pair moves in lockstep (a stage is free only when both CTAs have released it). On the
// H200 (session 67, the same library with the cluster forced, ab.py) d256 gains at 4k and 8k too,
// +2.8% / +4.2%, where the H100 read level: so both head dims from 4k keys.
bool fwd_cluster(int64_t head_dim, int64_t query_blocks, int64_t seqlen_k) {
  if ((head_dim != 128 && head_dim != 256) || query_blocks <= 0 || query_blocks % 2 != 0) return false;
  return forced_or(fwd_tuning().cluster, seqlen_k >= 4096);
}

// Measured on an H100 (docs/perf-notes.md, session 70; forward_fp8, clusters against single CTAs,
// 3 rounds, a second single-CTA arm for the spread): d256 4k +1.7%, 16k +1.9% (spread 0.5% / 1.0%);
// d128 4k +0.9% (spread 0.4%, one round of three below), and d128's 224-key tile through
// attention_fp8 8k -0.9%, 16k +1.0%: level. So d256 from 4k keys, as the 16-bit rule; d128 only
// when forced, until the H200 says otherwise.
Fp8Tuning& fp8_tuning() {
  static Fp8Tuning t{env_override("HOPATTN_FP8_CLUSTER")};
  return t;
}

bool fp8_cluster(int64_t head_dim, int64_t query_blocks, int64_t seqlen_k) {
  if ((head_dim != 128 && head_dim != 256) || query_blocks <= 0 || query_blocks % 2 != 0) return false;
  return forced_or(fp8_tuning().cluster, head_dim == 256 && seqlen_k >= 4096) && seqlen_k > 0;
}

}  // namespace hopattn::heuristics
