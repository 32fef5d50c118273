// The causal order in L2-sized sections (sm90/ws/l2_section.hpp): every (pair, query block) is
// dealt exactly once, sections hold consecutive pairs with each one's blocks longest first, and
// the rule sizes sections by the K/V bytes that fit in the budget.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sm90/ws/int_divider.hpp"
#include "sm90/ws/l2_section.hpp"

namespace hopattn::sm90::ws {
namespace {

void expect_sectioned_permutation(int nb, int pairs, int section) {
  SCOPED_TRACE("nb " + std::to_string(nb) + " pairs " + std::to_string(pairs) + " section " + std::to_string(section));
  std::vector<int> seen(static_cast<size_t>(nb * pairs), 0);
  std::vector<int> last_block(static_cast<size_t>(pairs), nb);  // each pair's blocks descend
  for (int i = 0; i < nb * pairs; ++i) {
    const SectionTile t = sectioned_causal_tile(i, section, nb, pairs);
    ASSERT_GE(t.pair, 0);
    ASSERT_LT(t.pair, pairs);
    ASSERT_GE(t.m_block, 0);
    ASSERT_LT(t.m_block, nb);
    EXPECT_EQ(t.pair / section, i / (section * nb)) << "index " << i << " left its section";
    EXPECT_LT(t.m_block, last_block[static_cast<size_t>(t.pair)]);
    last_block[static_cast<size_t>(t.pair)] = t.m_block;
    ++seen[static_cast<size_t>(t.pair * nb + t.m_block)];
  }
  for (int x : seen) EXPECT_EQ(x, 1);
}

TEST(L2Section, EveryTileOnceInItsSection) {
  for (int nb : {1, 2, 3, 6, 11, 22, 86})
    for (int pairs : {1, 7, 32, 128})
      for (int section : {1, 5, 24, 31, 127, 128}) expect_sectioned_permutation(nb, pairs, section);
}

TEST(L2Section, PrecomputedDividersGiveTheSameOrder) {
  for (int nb : {1, 3, 11, 22, 86})
    for (int pairs : {1, 7, 32, 128, 1000})
      for (int section : {1, 5, 24, 31, 127, 128}) {
        const SectionDividers dv(section, nb, pairs);
        for (int i = 0; i < nb * pairs; ++i) {
          const SectionTile a = sectioned_causal_tile(i, section, nb, pairs), b = sectioned_causal_tile(i, dv, nb, pairs);
          ASSERT_EQ(a.pair, b.pair) << "nb " << nb << " pairs " << pairs << " section " << section << " index " << i;
          ASSERT_EQ(a.m_block, b.m_block) << "nb " << nb << " pairs " << pairs << " section " << section << " index " << i;
        }
      }
}

TEST(IntDivider, MatchesDivisionOverTheIndexRange) {
  // Every divisor the scheduler can see (extents up to a quarter of the int range), against
  // dividends at the edges and spread over [0, 2^31).
  std::vector<int> divisors;
  for (int d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int e = 12; e < 31; ++e)
    for (int off : {-1, 0, 1, 3}) divisors.push_back((1 << e) + off);
  divisors.push_back(0x7fffffff);
  uint32_t x = 12345u;
  for (int d : divisors) {
    const IntDivider dv(d);
    std::vector<int> ns = {0, 1, d - 1, d, 0x7fffffff, 0x7ffffffe, 0x3fffffff};
    if (d < 0x7fffffff) ns.push_back(d + 1);
    for (int k = 0; k < 64; ++k) {
      x = x * 1664525u + 1013904223u;
      ns.push_back(int(x >> 1));
      ns.push_back(int((x >> 1) % 100000u));
    }
    for (int n : ns) {
      if (n < 0) continue;
      int r;
      const int q = dv.divmod(n, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
  }
  EXPECT_EQ(IntDivider(0).d, 1) << "a zero extent divides by 1, never by 0";
}

TEST(L2Section, FirstSectionDealsItsPairsLongestFirst) {
  // 22 query blocks, 128 pairs in sections of 24: the first round of 132 CTAs takes block 21 of
  // pairs 0-23, then block 20 of pairs 0-23, ...: at most 24 pairs' K/V in flight.
  for (int i = 0; i < 132; ++i) {
    const SectionTile t = sectioned_causal_tile(i, 24, 22, 128);
    EXPECT_EQ(t.pair, i % 24);
    EXPECT_EQ(t.m_block, 21 - i / 24);
  }
  // The last section holds the 8 pairs left (5 x 24 = 120).
  const SectionTile t = sectioned_causal_tile(120 * 22, 24, 22, 128);
  EXPECT_EQ(t.pair, 120);
  EXPECT_EQ(t.m_block, 21);
  EXPECT_EQ(sectioned_causal_tile(120 * 22 + 8, 24, 22, 128).m_block, 20);
}

TEST(L2Section, ForcedSizesOutsideOneToPairsMeanNoSections) {
  EXPECT_EQ(effective_section(24, 128), 24);
  EXPECT_EQ(effective_section(127, 128), 127);
  EXPECT_EQ(effective_section(128, 128), 0);          // one section: the plain order
  EXPECT_EQ(effective_section(1 << 30, 128), 0);      // would overflow section * nb
  EXPECT_EQ(effective_section(0, 128), 0);
  EXPECT_EQ(effective_section(-3, 128), 0);
}

TEST(L2Section, RuleFitsTheBudget) {
  constexpr int64_t kBudget = int64_t(24) << 20;
  // d64 bf16 4k: 1 MB of K/V per pair, 128 pairs -> 24 pairs a section.
  EXPECT_EQ(causal_l2_section(4096, 64, 2, 32, 32, 4, kBudget), 24);
  // 16k: 4 MB per pair -> 6.
  EXPECT_EQ(causal_l2_section(16384, 64, 2, 32, 32, 1, kBudget), 6);
  // Everything fits already: 16 x 1 MB. At 512, 1024 pairs x 128 KB do not: 192 a section.
  EXPECT_EQ(causal_l2_section(4096, 64, 2, 16, 16, 1, kBudget), 0);
  EXPECT_EQ(causal_l2_section(512, 64, 2, 32, 32, 32, kBudget), 192);
  // GQA 32:8: four query heads share one K/V, and a section keeps whole groups.
  EXPECT_EQ(causal_l2_section(16384, 64, 2, 32, 8, 4, kBudget), 24);
  EXPECT_EQ(causal_l2_section(65536, 128, 2, 32, 8, 4, kBudget), 4);  // 32 MB per KV head: one group
  EXPECT_EQ(causal_l2_section(2048, 64, 2, 32, 32, 1, kBudget), 0);  // 32 x 0.5 MB fit
  // One GQA group (4:1) over the budget: a section would hold every pair, so none.
  EXPECT_EQ(causal_l2_section(65536, 128, 2, 4, 1, 1, kBudget), 0);
}

}  // namespace
}  // namespace hopattn::sm90::ws
