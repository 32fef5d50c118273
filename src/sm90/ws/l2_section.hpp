// The causal longest-first order in L2-sized sections (TileOrder::section): the (batch, head) pairs
// are dealt G at a time, each group longest query block first, so that only about G pairs' K and V
// are read at once. Without it, the order deals every pair one query block per round: at d64 4k
// (128 pairs, 128 MB of K/V against 50 MB of L2) ncu read an L2 hit rate of 9.9% and ~5.6x the
// minimum HBM bytes (docs/perf-notes.md, "Session 51"). Host and device, so the CPU tests can check
// that the order is a permutation.
#pragma once

#include <cstdint>

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE
#include "sm90/ws/int_divider.hpp"

namespace hopattn::sm90::ws {

struct SectionTile {
  int m_block, pair;  // pair = batch * heads + head (heads fastest: a GQA group's heads adjacent)
};

// Work index idx of nb query blocks x `pairs` pairs, sections of `section` pairs (the last may hold
// fewer): within a section the pair runs fastest and the query block descends.
HOPATTN_HOST_DEVICE inline SectionTile sectioned_causal_tile(int idx, int section, int nb, int pairs) {
  const int per = section * nb;  // tiles in a full section
  const int sec = idx / per;
  const int r = idx - sec * per;
  const int rest = pairs - sec * section;
  const int sp = rest < section ? rest : section;  // pairs in this section
  return {nb - 1 - r / sp, sec * section + r % sp};
}

// The same with the divisions precomputed (TileOrder's, on the device): by section * nb, by the
// section and by the last section's pair count.
struct SectionDividers {
  IntDivider tiles, full, last;
  SectionDividers() = default;
  SectionDividers(int section, int nb, int pairs)
      : tiles(section * nb), full(section), last(section > 0 && pairs % section != 0 ? pairs % section : section) {}
};
HOPATTN_HOST_DEVICE inline SectionTile sectioned_causal_tile(int idx, const SectionDividers& dv, int nb, int pairs) {
  const int section = dv.full.d;
  int r;
  const int sec = dv.tiles.divmod(idx, r);
  const IntDivider& by = pairs - sec * section < section ? dv.last : dv.full;
  int pair_in;
  const int q = by.divmod(r, pair_in);
  return {nb - 1 - q, sec * section + pair_in};
}

// Pairs per section: as many as keep their K and V within `l2_budget` bytes, or 0 (no sections)
// when every pair's already fits. K/V bytes per query head: a GQA group's heads share theirs.
inline int causal_l2_section(int64_t seqlen_k, int head_dim, int elem_bytes, int heads_q, int heads_kv, int batch,
                             int64_t l2_budget) {
  const int group = heads_kv > 0 && heads_q % heads_kv == 0 ? heads_q / heads_kv : 1;
  const int64_t per_pair = 2 * seqlen_k * head_dim * elem_bytes / group;
  const int64_t pairs = int64_t(heads_q) * batch;
  if (per_pair <= 0 || per_pair * pairs <= l2_budget) return 0;
  int64_t g = l2_budget / per_pair;
  if (g < group) g = group;  // keep a GQA group together
  g -= g % group;
  return g >= pairs ? 0 : int(g);
}

// The section size a launch uses: a section of all the pairs or more is the plain order, so 0. It
// also keeps a forced size (HOPATTN_WS_SECTION) from overflowing section * nb in SectionDividers:
// pairs * nb fits the scheduler's index range (the launch checks that).
inline int effective_section(int section, int pairs) { return section > 0 && section < pairs ? section : 0; }

// Where the sections pay: measured on an H100 (session 51, d64 causal, sections with the snake
// against main's order): 1k +4%, 2k +7%, 4k +10-12%, but 8k -13% and 16k -16%. From 43 query blocks
// up a section's rounds alias with the 132 CTAs (a model of the static round-robin puts the slowest
// CTA 34-35% above the mean at 8k and 16k, against 1-4% up to 4k), so those keep one section.
inline constexpr int kMaxSectionedQueryBlocks = 22;

}  // namespace hopattn::sm90::ws
