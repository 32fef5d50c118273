#include "api/bwd_heuristics.hpp"

#include "api/tuning_override.hpp"

namespace hopattn::heuristics {

BwdTuning& bwd_tuning() {
  static BwdTuning t{env_override("HOPATTN_BWD_KEY_BLOCKS_INNER"), env_override("HOPATTN_BWD_DQ_FIRST_STORE"),
                     env_override("HOPATTN_BWD_PDL"), env_override("HOPATTN_BWD_SECTION_HEADS"),
                     env_override("HOPATTN_BWD_DQ_OVERLAP"),
                     env_override("HOPATTN_BWD_TAIL_SPLIT")};
  return t;
}

// Measured (docs/perf-notes.md, backward v3 and v5): d128 causal 1k / 2k / 4k 256 / 362 / 457 TFLOP/s
// against 208 / 272 / 424 longest-first across heads; d64 and d256 favour it at every length too.
bool bwd_causal_key_blocks_inner() { return forced_or(bwd_tuning().key_blocks_inner, true); }

// Sections (docs/perf-notes.md, backward v13): longest first inside a group of heads whose Q, dO and
// dQ accumulator fit in L2. The 40 MiB budget leaves room in the 50 MB L2 for the resident CTAs' K
// and V and for the lse and D rows.
int bwd_causal_section_heads(long long bytes_per_head, int heads) {
  if (heads < 1) return 1;
  if (!bwd_causal_key_blocks_inner()) return heads;
  const int forced = bwd_tuning().section_heads;
  if (forced >= 1) return forced < heads ? forced : heads;
  constexpr long long kL2Budget = 40ll << 20;
  const long long fit = bytes_per_head > 0 ? kL2Budget / bytes_per_head : heads;
  if (fit >= heads) return heads;
  int section = 1;
  while (section * 2LL <= fit) section *= 2;
  return section;
}

// Measured (docs/perf-notes.md, backward v11): the preprocess no longer writes the accumulator.
bool bwd_dq_first_store() { return forced_or(bwd_tuning().dq_first_store, true); }

// Off: measured no gain (docs/perf-notes.md, backward v12; d128 1k-4k, causal and not, within +-1%
// and 2k causal 1-2% slower). The main kernel's CTAs need a whole SM, so they cannot start before the
// preprocess's blocks on that SM have left, and the launch gap on a busy stream is already hidden.
bool bwd_programmatic_launch() { return forced_or(bwd_tuning().pdl, false); }

// Measured (docs/perf-notes.md, backward v16): d256 +1.6% at 1k, level at 4k-16k and causal.
bool bwd_dq_overlap() { return forced_or(bwd_tuning().dq_overlap, true); }

// Measured (docs/perf-notes.md, backward v17): d256 +0.9% / +1.3% at 8k / 16k, level at 4k (the
// model splits nothing at 1k); the main kernel's last wave 203 -> 115 us at 4k in a trace.
int bwd_tail_split_mode() { return bwd_tuning().tail_split >= 0 ? bwd_tuning().tail_split : 1; }

}  // namespace hopattn::heuristics
