// Host-side schedule heuristics of the forward kernels, measured on the H200 (docs/perf-notes.md,
// "v2"). They live outside the kernel headers so that retuning a threshold recompiles this one
// file rather than every kernel instantiation.
#pragma once

#include <cstdint>

namespace hopattn::heuristics {

// Overrides for tuning runs; a negative field means "use the heuristic". Initialised once from the
// environment (HOPATTN_WS_SNAKE=0/1, HOPATTN_WS_L2_SECTION_MB); bench/fa3_stages.cu sets the
// fields directly.
struct FwdTuning {
  int snake = -1;
  double l2_section_mb = -1;  // K/V megabytes per causal L2 section (HOPATTN_WS_L2_SECTION_MB)
};
FwdTuning& fwd_tuning();

// Whether the persistent scheduler hands causal tiles out in snake order (see tile_scheduler.hpp).
bool causal_snake_order(int64_t seqlen_q);

// (batch, head) pairs per L2 section of the causal dynamic scheduler (tile_scheduler.hpp), given
// the K+V bytes one pair reads, the pair count and the device's L2 size. At least 1, at most pairs.
int causal_l2_section_pairs(int64_t kv_bytes_per_pair, int pairs, int l2_bytes);

// Key tile (keys per pipeline stage) of the d128 non-causal FlashAttention-3 kernel; 0 means the
// config's default (176).
int d128_noncausal_key_tile(int64_t seqlen_k);

}  // namespace hopattn::heuristics
