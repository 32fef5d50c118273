// The order in which VarlenTileScheduler (tile_scheduler.hpp) deals a packed batch's tiles: the
// tiles of one sequence by local index i (varlen_tile_in), and the k-th item of CTA b among G
// (varlen_work_index). Host and device, so that the CPU tests can check that the order is a
// permutation and model how evenly a round-robin over 132 CTAs spreads the causal work.
#pragma once

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90::ws {

struct VarlenTileIndex {
  int m_block, head;  // m_block -1: the empty second half of an odd nb's middle unit (folded)
};

// Tile i of a sequence with nb query blocks and `heads` query heads.
// - Non-causal: every tile of the sequence costs the same; m_block runs fastest (a head's tiles,
//   which share its K/V in L2, are adjacent).
// - Causal, folded: units of query blocks u and nb-1-u, index 2 * unit + half; each unit costs nb+1
//   key blocks (an odd nb's middle unit half that).
// - Causal, plain: a tile's cost grows with m_block. `balanced` false: m_block fastest and
//   descending within each head. Dealt round-robin over G CTAs, CTA b then draws m_block
//   nb-1-(b mod nb) in every round when G is a multiple of nb (132 CTAs, nb = 11: a 2k sequence
//   of 192-row tiles): some CTAs draw only the longest tiles, others only the shortest.
//   `balanced`: heads fastest, m_block descending (longest first across the sequence's heads, the
//   fixed-length TileOrder's rule within one sequence), dealt in snake order (varlen_work_index).
template <bool kCausal>
HOPATTN_HOST_DEVICE inline VarlenTileIndex varlen_tile_in(int i, int nb, int heads, bool fold, bool balanced) {
  VarlenTileIndex t{0, 0};
  if (kCausal && fold) {
    const int half = i & 1, upb = (nb + 1) / 2;
    const int unit = i >> 1;
    const int u = unit % upb;
    t.head = unit / upb;
    const int m_long = nb - 1 - u;
    t.m_block = half == 0 ? m_long : (u == m_long ? -1 : u);
  } else if (kCausal && balanced) {
    t.head = i % heads;
    t.m_block = nb - 1 - i / heads;
  } else {
    t.m_block = kCausal ? nb - 1 - i % nb : i % nb;  // causal: longest first
    t.head = i / nb;
  }
  return t;
}

// The batch-wide work index of item r of CTA b in a grid of g: round-robin (r * g + b); folded,
// both halves of unit r * g + b; balanced (plain causal), in snake order, odd rounds dealt from the
// last CTA down, so that a CTA that drew a round's long tiles draws the next round's short ones.
// Strictly increasing in r for every b, as VarlenTileScheduler::valid requires.
template <bool kCausal>
HOPATTN_HOST_DEVICE inline int varlen_work_index(int r, int g, int b, bool fold, bool balanced) {
  if (kCausal && fold) return 2 * ((r >> 1) * g + b) + (r & 1);
  if (kCausal && balanced && (r & 1)) return r * g + g - 1 - b;
  return r * g + b;
}

}  // namespace hopattn::sm90::ws
