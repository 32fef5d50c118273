// Host side of the forward's tail split (sm90/ws/tail_split.hpp): which problems split their last
// round's tiles, into how many pieces, and the workspace that takes. forward_workspace_size,
// forward's workspace form and the launcher all read the plan from here, so they agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"

namespace hopattn::heuristics {

// Pieces per split tile for `tiles` equal tiles of `key_blocks` key blocks dealt round-robin over
// `num_sms` persistent CTAs: 1 (no split) unless cutting the last round's `tiles mod num_sms` tiles
// shortens the call by the model below. forced (HOPATTN_FWD_TAIL_SPLIT): < 0 the model, 0 or 1
// never, k > 1 k pieces whenever there is a partial last round (at most key_blocks and kMaxPieces).
int tail_split_pieces(int64_t tiles, int num_sms, int64_t key_blocks, int forced);
inline constexpr int kMaxTailPieces = 8;

struct TailSplitPlan {
  int64_t tiles = 0;      // query tiles of the call
  int split_tiles = 0;    // the last round's, split when pieces > 1
  int pieces = 1;
  int block_m = 0;        // the kernel's query tile
  std::size_t workspace_bytes = 0;
};

// The plan of a validated problem on a device of num_sms SMs: pieces == 1 for every problem the
// split does not apply to (masked, softcapped, packed or per-sequence keys, not bf16/fp16, head_dim
// other than 64 and 128).
TailSplitPlan tail_split_plan(const AttnProblem& p, int num_sms);

// HOPATTN_FWD_TAIL_SPLIT, read once (the `forced` of tail_split_pieces); tests and A/B runs may set it.
int& tail_split_override();

}  // namespace hopattn::heuristics
