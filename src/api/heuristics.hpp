// Host-side schedule heuristics of the forward kernels, measured on the H200 (docs/perf-notes.md,
// "v2"). They live outside the kernel headers so that retuning a threshold recompiles this one
// file rather than every kernel instantiation. The backward's live in bwd_heuristics.hpp, so that a
// backward switch does not touch the forward kernels' includes either.
#pragma once

#include <cstdint>

namespace hopattn::heuristics {

// Overrides for tuning runs; a negative field means "use the heuristic". Initialised once from the
// environment (HOPATTN_WS_SNAKE=0/1); bench/fa3_stages.cu sets the fields directly.
struct FwdTuning {
  int snake = -1;
  int fold = -1;                  // HOPATTN_WS_FOLD=0/1
  int varlen_balance = -1;        // HOPATTN_WS_VARLEN_BALANCE=0/1
  int fp8_key_tile = -1;          // HOPATTN_FP8_KEY_TILE=128/224
  int d128_key_tile = -1;         // HOPATTN_D128_KEY_TILE=128/160/176
  int d64_query_tile = -1;        // HOPATTN_D64_QUERY_TILE=128/192 (causal)
  int d256_key_tile = -1;         // HOPATTN_D256_KEY_TILE=64/80 (causal)
  int cluster = -1;               // HOPATTN_FWD_CLUSTER=0/1 (d128/d256 non-causal CTA pairs)
};
FwdTuning& fwd_tuning();

// Whether the persistent scheduler hands causal tiles out in snake order (see tile_scheduler.hpp).
bool causal_snake_order(int64_t seqlen_q);

// Whether the persistent scheduler hands masked (causal, windowed) tiles out in folded units (see
// tile_scheduler.hpp) for a kernel of block_m query rows per tile; it overrides the snake order.
// The same rule for the 16-bit and the FP8 kernels, fixed-length and packed.
bool causal_fold_order(int block_m);

// Whether packed causal batches that are not folded take the balanced tile order within each
// sequence (sm90/ws/varlen_tile_order.hpp). On unless forced off.
bool varlen_balanced_order();

// The FP8 key tile (Fp8AttnProblem::key_tile) of attention_fp8, and of forward_fp8 when K's
// descales are per head: 0 (128 keys) or sm90::fp8::kWideKeyBlock (224 keys; attention_fp8 then
// quantises K in 224-row blocks), head_dim 128 fixed-length only, from 8192 keys.
// HOPATTN_FP8_KEY_TILE=224 asks for the wide tile where it exists, 128 forces 0.
int fp8_key_tile(int64_t head_dim, int64_t seqlen_k, bool varlen);

// Key tile (keys per pipeline stage) of the d128 non-causal FlashAttention-3 kernel; 0 means the
// config's default (176).
int d128_noncausal_key_tile(int64_t seqlen_k);

// Score pairs a causal call computes per (batch, head) with tiles of block_m query rows and
// block_n-key blocks, bottom-right aligned; tiles of a row count that is no multiple of 128 (d64's
// 192) start row_shift rows above the sequence as the kernel's do (FwdMainloop's kRowShift).
int64_t causal_tile_pairs(int64_t seqlen_q, int64_t seqlen_k, int block_m, int block_n);

// Query rows per tile of the d64 fixed-length causal 16-bit kernel: 192 (the configuration's
// default, sm90::ws::default_query_tile) or 128. HOPATTN_D64_QUERY_TILE=128/192 forces one.
int d64_causal_query_tile(int64_t seqlen_q, int64_t seqlen_k);

// Key tile of the d256 fixed-length causal 16-bit kernel: 80 (the configuration's default,
// sm90::ws::default_key_tile) or 64. HOPATTN_D256_KEY_TILE=64/80 forces one.
int d256_causal_key_tile(int64_t seqlen_q, int64_t seqlen_k);

// Whether a fixed-length non-causal 16-bit forward call of head_dim 128 or 256 runs as 2-CTA
// clusters that share each K/V load (sm90::ws kBitCluster), given its 128-row query blocks per
// head (only an even count pairs up) and its keys. HOPATTN_FWD_CLUSTER=0/1 forces it off or on (on
// still needs the even count).
bool fwd_cluster(int64_t head_dim, int64_t query_blocks, int64_t seqlen_k);

}  // namespace hopattn::heuristics
