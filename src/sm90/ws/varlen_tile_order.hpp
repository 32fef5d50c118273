// The order in which VarlenTileScheduler (tile_scheduler.hpp) deals a packed batch's tiles: the
// tiles of one sequence by local index i (varlen_tile_in), and the k-th item of CTA b among G
// (varlen_work_index); with the folded unit and the round-robin that the fixed-length TileOrder and
// StaticTileScheduler share. Host and device, so that the CPU tests can check that the order is a
// permutation and model how evenly a round-robin over 132 CTAs spreads the causal work.
#pragma once

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90::ws {

struct VarlenTileIndex {
  int m_block, head;  // m_block -1: the empty second half of an odd nb's middle unit (folded)
};

// The folded causal order's unit u (of a (batch, head) with nb query blocks): its first half is
// query block nb-1-u, its second u, so every unit costs nb+1 key blocks; an odd nb's middle unit has
// one tile, and its second half is m_block -1 (empty, skipped by every role).
HOPATTN_HOST_DEVICE inline int folded_m_block(int u, int half, int nb) {
  const int m_long = nb - 1 - u;
  return half == 0 ? m_long : (u == m_long ? -1 : u);
}

// The work index of item r of CTA b in a round-robin over g CTAs: r * g + b; with `snake`, odd
// rounds dealt from the last CTA down; folded (causal), both halves of unit r/2 * g + b back to
// back. Strictly increasing in r for every b, as VarlenTileScheduler::valid requires; below
// 2 * (units + g) or items + 2g, so within int for any grid TileOrder accepts.
template <bool kCausal>
HOPATTN_HOST_DEVICE inline int round_robin_index(int r, int g, int b, bool fold, bool snake) {
  if (kCausal && fold) return 2 * ((r >> 1) * g + b) + (r & 1);
  return r * g + ((snake && (r & 1)) ? g - 1 - b : b);
}

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
    const int unit = i >> 1, upb = (nb + 1) / 2;
    t.head = unit / upb;
    t.m_block = folded_m_block(unit % upb, i & 1, nb);
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
  return round_robin_index<kCausal>(r, g, b, fold, kCausal && balanced);
}

}  // namespace hopattn::sm90::ws
