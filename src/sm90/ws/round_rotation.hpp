// Rotated rounds for the fixed-length non-causal round-robin (StaticTileScheduler with kRotate).
//
// The plain round-robin gives CTA b of G the work indices r * G + b, and a tile's query block is
// its index mod nb (m_block runs fastest, so that a head's tiles share its K/V in L2). When G and nb
// share a factor, CTA b only ever sees the query blocks congruent to b modulo gcd(G, nb): with 132
// CTAs and nb = 3, 6, 11 or 22 (d64's 192-row tiles at 512, 1k, 2k and 4k keys) every CTA draws one
// fixed query block in every round. The last query block is the cheap one (its padding warpgroups
// idle, Mainloop::idle_tile), so the CTAs that draw it idle while the others set the kernel's
// length: ncu on an H100 (session 62) read the tensor pipe's busiest SM at 1.16x the mean at d64
// 512 and 1k (cuDNN: 1.03x), the least busy at 0.74x and 0.37x.
//
// Rotating each round by r * rotate slots keeps the same G indices in a round (the same K/V in
// flight) but gives CTA b query block (b + r * (G + rotate)) mod nb (before wrapping at G), which
// visits every query block once per nb rounds when G + rotate and nb are coprime.
#pragma once

#include <numeric>

#include "sm90/ws/int_divider.hpp"

namespace hopattn::sm90::ws {

// The smallest rotate >= 0 that makes G + rotate coprime with nb (0 when G and nb already are, so
// that a launch whose rounds do not alias keeps the plain order). Host only (the launch). At most a
// few steps: among any nb consecutive integers some are coprime with nb, the first usually within 2.
inline int round_rotation(int grid, int num_m_blocks) {
  if (grid < 1 || num_m_blocks < 2) return 0;
  int rotate = 0;
  while (std::gcd(grid + rotate, num_m_blocks) != 1) ++rotate;
  return rotate;
}

// The work index of CTA b's item r among g CTAs: round r's indices r * g .. r * g + g - 1, with CTA
// b taking slot (b + r * rotate) mod g. A permutation of each round, so every index is dealt once
// and a CTA's indices still increase (each lies in its own round). g_div divides by g; b + r * rotate
// stays below 2^30: TileOrder::set_rotation leaves rotate at 0 for a launch where it would not.
HOPATTN_HOST_DEVICE inline int rotated_round_index(int r, int g, int b, int rotate, const IntDivider& g_div) {
  int slot;
  g_div.divmod(b + r * rotate, slot);
  return r * g + slot;
}

}  // namespace hopattn::sm90::ws
