#include "api/fwd_tail_split.hpp"

#include "api/heuristics.hpp"
#include "api/tuning_override.hpp"
#include "sm90/ws/key_tile.hpp"
#include "sm90/ws/tail_split.hpp"

namespace hopattn::heuristics {

namespace {

// The model, in key blocks: a whole tile costs its key_blocks plus kTileOverhead (Q load, pipeline
// fill, epilogue), a piece its share of the blocks plus the same overhead and kMergeOverhead (its
// slot store, the count, and for one of them the merge). The last round then lasts
// ceil(split_tiles * k / num_sms) pieces. kMergeOverhead is fitted to the H200 A/B of session 40
// (docs/perf-notes.md, "v4 measured"): on the paper grid 3 pieces won 2.6-3% at d128 8k and d64 4k
// and 1% at d128 16k, but lost 1-2% at d128 2k and 4k (13 and 26 key blocks), where 0.5 had
// predicted gains; 5 blocks is the smallest overhead that turns those two off and keeps the winners.
// It stands for a fixed cost (the slot stores and the k-slot merge at the end of the round) in
// units of key blocks, so at d64, whose blocks are half as long, it is an underestimate.
constexpr double kTileOverhead = 1.0, kMergeOverhead = 5.0;
// A split must shorten the last round by 2% of a whole tile's time at least, and its pieces stay
// within two rounds of the grid (the workspace grows with them).
constexpr double kMinGain = 0.02;

}  // namespace

int& tail_split_override() {
  static int forced = env_override("HOPATTN_FWD_TAIL_SPLIT");
  return forced;
}

int tail_split_pieces(int64_t tiles, int num_sms, int64_t key_blocks, int forced) {
  if (tiles <= 0 || num_sms <= 0 || key_blocks < 2) return 1;
  const int64_t rest = tiles % num_sms;  // every tile when tiles < num_sms
  if (rest == 0) return 1;
  const int64_t max_k = key_blocks < kMaxTailPieces ? key_blocks : kMaxTailPieces;
  if (forced >= 0) return forced <= 1 ? 1 : int(forced < max_k ? forced : max_k);
  const double whole = double(key_blocks) + kTileOverhead;
  int best_k = 1;
  double best = whole * (1.0 - kMinGain);
  for (int64_t k = 2; k <= max_k && rest * k <= 2 * int64_t(num_sms); ++k) {
    const int64_t rounds = (rest * k + num_sms - 1) / num_sms;
    const double piece = double((key_blocks + k - 1) / k) + kTileOverhead + kMergeOverhead;
    if (double(rounds) * piece < best) {
      best = double(rounds) * piece;
      best_k = int(k);
    }
  }
  return best_k;
}

TailSplitPlan tail_split_plan(const AttnProblem& p, int num_sms) {
  TailSplitPlan plan;
  const bool sixteen_bit = p.dtype == DType::kBF16 || p.dtype == DType::kFP16;
  const bool dims = p.head_dim == 64 || p.head_dim == 128;  // FwdWsConfig::kTailSplit: not d256
  if (!sixteen_bit || !dims || p.empty() || p.seqlen_k == 0 || p.causal || p.masked() || p.softcap != 0.f ||
      p.varlen() || p.seqused_k != nullptr || p.paged())
    return plan;
  const int hd = int(p.head_dim);
  plan.block_m = sm90::ws::default_query_tile(hd);
  int block_n = sm90::ws::default_key_tile(hd, false);
  if (hd == 128 && d128_noncausal_key_tile(p.seqlen_k) != 0) block_n = d128_noncausal_key_tile(p.seqlen_k);
  plan.tiles = (p.seqlen_q + plan.block_m - 1) / plan.block_m * p.heads_q * p.batch;
  const int64_t key_blocks = (p.seqlen_k + block_n - 1) / block_n;
  plan.pieces = tail_split_pieces(plan.tiles, num_sms, key_blocks, tail_split_override());
  if (plan.pieces > 1) {
    plan.split_tiles = int(plan.tiles % num_sms);
    plan.workspace_bytes = sm90::ws::tail_split_workspace_bytes(plan.split_tiles, plan.pieces, plan.block_m, hd);
  }
  return plan;
}

}  // namespace hopattn::heuristics
