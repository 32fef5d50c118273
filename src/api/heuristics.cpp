#include "api/heuristics.hpp"

#include "api/tuning_override.hpp"

namespace hopattn::heuristics {

FwdTuning& fwd_tuning() {
  static FwdTuning t{env_override("HOPATTN_WS_SNAKE"), env_override("HOPATTN_WS_FOLD"),
                     env_override("HOPATTN_WS_VARLEN_BALANCE")};
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
// the same CTAs draw it every round.
bool causal_fold_order(int block_m) {
  return forced_or(fwd_tuning().fold, block_m == 128);
}

// FP8, measured with bench/varlen.py --fp8 (docs/perf-notes.md, "FP8 on packed batches"): packed
// causal batches gain 11-21% at every head dim, 192-row d64 tiles included (the varlen scheduler
// folds within each sequence, so the half-cost units do not all land on the same CTAs). Fixed-length
// FP8 follows the 16-bit rule, measured on compare.py's causal FP8 grid (perf-notes, "The fold
// order for fixed-length FP8"): 128-row tiles (d128, d256) gain 2-10% up to 8k and stay level at
// 16k; d64's 192-row tiles lose 4-19%.
bool fp8_causal_fold_order(int block_m, bool varlen) {
  return forced_or(fwd_tuning().fold, varlen || causal_fold_order(block_m));
}

// Not measured yet (session 22 had no GPU time left): the CPU model of a 132-CTA round-robin
// (tests/cpu/test_varlen_tile_order.cpp) predicts the gain, the GPU has to confirm it.
bool varlen_balanced_order() { return forced_or(fwd_tuning().varlen_balance, false); }

// Up to 1k keys, N = 128 pads nothing at the grid's powers of two and leaves shared memory for the
// separate O buffer (+18% at 512); up to 4k, N = 160 keeps the separate O buffer (+4% at 2k);
// beyond, N = 176 amortises each softmax over the most keys (+1.5% at 16k).
int d128_noncausal_key_tile(int64_t seqlen_k) { return seqlen_k <= 1024 ? 128 : seqlen_k <= 4096 ? 160 : 0; }

}  // namespace hopattn::heuristics
