// Rotated rounds of the fixed-length non-causal round-robin (sm90/ws/round_rotation.hpp): every
// work index is dealt once and each CTA's indices increase, and a model of 132 CTAs over d64's
// 192-row tiles, whose last query block costs less, shows what the rotation is for: the plain order
// puts 1.16x the mean work on the busiest CTA at 512 and 1k keys (what ncu read on an H100), the
// rotated one 1.03x.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "sm90/ws/round_rotation.hpp"

namespace hopattn::sm90::ws {
namespace {

// Every index of [0, n) from the CTAs of a grid g, each CTA's in its order; rounds past the last
// index end a CTA as the kernel's valid() does.
std::vector<std::vector<int>> deal(int g, int n, int rotate) {
  const IntDivider g_div(g);
  std::vector<std::vector<int>> per_cta(static_cast<size_t>(g));
  for (int b = 0; b < g; ++b)
    for (int r = 0;; ++r) {
      const int idx = rotated_round_index(r, g, b, rotate, g_div);
      if (idx >= n) break;
      per_cta[static_cast<size_t>(b)].push_back(idx);
    }
  return per_cta;
}

TEST(RoundRotation, RotationMakesGridAndQueryBlocksCoprime) {
  EXPECT_EQ(round_rotation(132, 3), 1);   // d64 512 keys
  EXPECT_EQ(round_rotation(132, 6), 1);   // 1k
  EXPECT_EQ(round_rotation(132, 11), 1);  // 2k
  EXPECT_EQ(round_rotation(132, 22), 1);  // 4k
  EXPECT_EQ(round_rotation(132, 43), 0);  // 8k: no alias, the plain order stays
  EXPECT_EQ(round_rotation(132, 1), 0);
  EXPECT_EQ(round_rotation(1, 6), 0);
  for (int g : {1, 2, 7, 66, 78, 114, 132})
    for (int nb = 1; nb <= 90; ++nb) {
      const int rot = round_rotation(g, nb);
      ASSERT_GE(rot, 0);
      ASSERT_LT(rot, std::max(nb, 1));
      if (nb > 1) {
        EXPECT_EQ(std::gcd(g + rot, nb), 1) << "g " << g << " nb " << nb;
        for (int s = 0; s < rot; ++s) EXPECT_NE(std::gcd(g + s, nb), 1) << "not the smallest, g " << g << " nb " << nb;
      }
    }
}

TEST(RoundRotation, EveryIndexOnceAndIncreasingPerCta) {
  for (int g : {1, 5, 132})
    for (int n : {1, 4, 131, 132, 133, 1000, 3072})
      for (int rotate : {0, 1, 2, 5}) {
        SCOPED_TRACE("g " + std::to_string(g) + " n " + std::to_string(n) + " rotate " + std::to_string(rotate));
        std::vector<int> seen(static_cast<size_t>(n), 0);
        for (const auto& seq : deal(g, n, rotate)) {
          for (size_t i = 0; i < seq.size(); ++i) {
            ++seen[static_cast<size_t>(seq[i])];
            if (i > 0) EXPECT_LT(seq[i - 1], seq[i]);
            // item i of a CTA lies in round i (the kernel's valid() relies on it)
            EXPECT_EQ(seq[i] / g, static_cast<int>(i));
          }
        }
        for (int x : seen) EXPECT_EQ(x, 1);
      }
}

// The busiest CTA's work over the mean, for pairs * nb tiles whose last query block costs
// last_cost (a full tile 1).
double busiest_over_mean(int g, int nb, int pairs, double last_cost, int rotate) {
  std::vector<double> load(static_cast<size_t>(g), 0.0);
  const auto per_cta = deal(g, pairs * nb, rotate);
  for (int b = 0; b < g; ++b)
    for (int idx : per_cta[static_cast<size_t>(b)]) load[static_cast<size_t>(b)] += idx % nb == nb - 1 ? last_cost : 1.0;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / g;
  return *std::max_element(load.begin(), load.end()) / mean;
}

TEST(RoundRotation, SpreadsTheCheapLastQueryBlock) {
  struct Case {
    int seqlen, nb, pairs;
    double last_cost;  // active warpgroups of the last 192-row tile, of 3
  };
  // d64, 16k tokens x 32 heads (bench/compare.py's grid): batch * heads pairs.
  for (const Case c : {Case{512, 3, 1024, 2.0 / 3}, Case{1024, 6, 512, 1.0 / 3}, Case{2048, 11, 256, 2.0 / 3},
                       Case{4096, 22, 128, 1.0 / 3}}) {
    SCOPED_TRACE("seqlen " + std::to_string(c.seqlen));
    const double plain = busiest_over_mean(132, c.nb, c.pairs, c.last_cost, 0);
    const double rotated = busiest_over_mean(132, c.nb, c.pairs, c.last_cost, round_rotation(132, c.nb));
    EXPECT_GT(plain, 1.05);
    EXPECT_LT(rotated, 1.035);
  }
}

}  // namespace
}  // namespace hopattn::sm90::ws
