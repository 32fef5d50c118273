// The host heuristics pick among kernels that exist: the d128 non-causal key tile must be one the
// dispatch instantiates (128, 160, or 0 for the default 176), and the tuning override must win.
#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <string>
#include <utility>

#include "api/bwd_heuristics.hpp"
#include "api/fp8_heuristics.hpp"
#include "api/heuristics.hpp"
#include "api/varlen_heuristics.hpp"
#include "sm90/bwd/launch_order.hpp"

namespace hopattn::heuristics {
namespace {

TEST(Heuristics, D128KeyTileIsAnInstantiatedOne) {
  for (int64_t sk : std::initializer_list<int64_t>{1, 17, 512, 1024, 1025, 2048, 4096, 4097, 16384, int64_t(1) << 30}) {
    const int n = d128_noncausal_key_tile(sk);
    EXPECT_TRUE(n == 0 || n == 128 || n == 160) << "seqlen_k " << sk << " -> " << n;
  }
  // Monotone: more keys never pick a smaller tile (0 stands for the largest, 176).
  auto rank = [](int n) { return n == 0 ? 176 : n; };
  for (int64_t sk = 1; sk < 20000; sk += 97) EXPECT_LE(rank(d128_noncausal_key_tile(sk)), rank(d128_noncausal_key_tile(sk + 97)));
}

TEST(Heuristics, D128KeyTileOverrideWins) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.d128_key_tile = 176;
  EXPECT_EQ(d128_noncausal_key_tile(512), 0);
  t.d128_key_tile = 160;
  EXPECT_EQ(d128_noncausal_key_tile(1 << 20), 160);
  t.d128_key_tile = 128;
  EXPECT_EQ(d128_noncausal_key_tile(8192), 128);
  t.d128_key_tile = 100;  // not a tile: ignored
  EXPECT_EQ(d128_noncausal_key_tile(8192), 0);
  EXPECT_EQ(d128_noncausal_key_tile(2048), 160);
  t = saved;
}

// The pair count against a brute-force count over every (row, key block) of the tiling.
TEST(Heuristics, CausalTilePairsMatchBruteForce) {
  auto brute = [](int64_t sq, int64_t sk, int bm, int bn) {
    const int64_t shift = bm % 128 != 0 ? (bm - sq % bm) % bm / 64 * 64 : 0;
    int64_t pairs = 0;
    for (int64_t first = -shift; first < sq; first += bm) {
      int64_t blocks = 0;  // key blocks holding a key that some real row of the tile sees
      for (int64_t n = 0; n * bn < sk; ++n)
        for (int64_t r = first < 0 ? 0 : first; r < first + bm && r < sq; ++r)
          if (n * bn <= r + sk - sq) { ++blocks; break; }
      pairs += bm * blocks * bn;
    }
    return pairs;
  };
  for (int64_t sq : {1, 17, 127, 128, 192, 255, 384, 512, 640, 768, 1000, 1024})
    for (int64_t sk : {sq, sq / 2, 2 * sq + 5, int64_t(4096)})
      for (auto [bm, bn] : std::initializer_list<std::pair<int, int>>{{128, 128}, {192, 128}, {128, 80}, {128, 64}})
        EXPECT_EQ(causal_tile_pairs(sq, sk, bm, bn), brute(sq, sk, bm, bn)) << sq << " x " << sk << ", " << bm << " x " << bn;
  // 512 square: 192-row tiles (64 padding rows first) 8 blocks, 128-row tiles 1 + 2 + 3 + 4.
  EXPECT_EQ(causal_tile_pairs(512, 512, 192, 128), 8 * 192 * 128);
  EXPECT_EQ(causal_tile_pairs(512, 512, 128, 128), 10 * 128 * 128);
  // 80-key blocks against 128-row tiles at 512: 2 + 4 + 5 + 7 blocks; 64-key: 2 + 4 + 6 + 8.
  EXPECT_EQ(causal_tile_pairs(512, 512, 128, 80), 18 * 128 * 80);
  EXPECT_EQ(causal_tile_pairs(512, 512, 128, 64), 20 * 128 * 64);
  EXPECT_EQ(causal_tile_pairs(0, 512, 128, 128), 0);
  EXPECT_EQ(causal_tile_pairs(512, 0, 192, 128), 0);
}

TEST(Heuristics, D256CausalKeyTileByPairRatioAndOverride) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.d256_key_tile = -1;
  EXPECT_EQ(d256_causal_key_tile(512, 512), 64);    // 1.125x the pairs with 80 keys (measured +4.2% with 64)
  EXPECT_EQ(d256_causal_key_tile(1024, 1024), 64);  // 1.059x (+2.7%)
  EXPECT_EQ(d256_causal_key_tile(2048, 2048), 80);  // 1.029x (-2.7% with 64)
  EXPECT_EQ(d256_causal_key_tile(512, 2048), 80);   // long rows of keys: 1.013x
  EXPECT_EQ(d256_causal_key_tile(17, 0), 80);       // no keys
  for (int64_t s = 1025; s < 20000; s += 131) EXPECT_EQ(d256_causal_key_tile(s, s), 80) << s;
  t.d256_key_tile = 64;
  EXPECT_EQ(d256_causal_key_tile(16384, 16384), 64);
  t.d256_key_tile = 80;
  EXPECT_EQ(d256_causal_key_tile(512, 512), 80);
  t.d256_key_tile = 100;  // not a tile: ignored
  EXPECT_EQ(d256_causal_key_tile(512, 512), 64);
  t = saved;
}

// Both CTA-pair rules (16-bit and FP8) under their knob: forced on, only the shape conditions apply
// (d128 / d256, an even count of 128-row query blocks); forced off, nothing pairs.
template <typename Rule>
void expect_forced_pairs(Rule rule, int& knob) {
  knob = 1;
  EXPECT_TRUE(rule(128, 8, 1024));
  EXPECT_TRUE(rule(256, 2, 100));
  EXPECT_FALSE(rule(128, 31, 4096));
  EXPECT_FALSE(rule(64, 32, 4096));
  knob = 0;
  EXPECT_FALSE(rule(128, 32, 4096));
  EXPECT_FALSE(rule(256, 128, 16384));
}

TEST(Heuristics, Fp8ClusterForLongKeysAtD256AndForcedAtD128) {
  Fp8Tuning& t = fp8_tuning();
  const Fp8Tuning saved = t;
  t.cluster = -1;  // the rule: d256 from 4k keys (session 70, H100: +1.7% at 4k, +1.9% at 16k)
  EXPECT_TRUE(fp8_cluster(256, 32, 4096));
  EXPECT_TRUE(fp8_cluster(256, 128, 16384));
  EXPECT_FALSE(fp8_cluster(256, 32, 4095));
  EXPECT_FALSE(fp8_cluster(256, 16, 2048));
  EXPECT_FALSE(fp8_cluster(256, 33, 4224));   // an odd count leaves a CTA of the last pair without a tile
  EXPECT_FALSE(fp8_cluster(256, 0, 4096));
  EXPECT_FALSE(fp8_cluster(128, 32, 4096));   // +0.9%, inside the spread: not on by default
  EXPECT_FALSE(fp8_cluster(128, 128, 16384));
  EXPECT_FALSE(fp8_cluster(64, 32, 16384));   // no clustered d64 instantiation
  expect_forced_pairs(fp8_cluster, t.cluster);
  t.cluster = 1;
  EXPECT_FALSE(fp8_cluster(256, 2, 0));  // no keys: the unclustered kernel's empty-row path
  t = saved;
}

TEST(Heuristics, FwdClusterForLongKeysAndEvenQueryBlocksAtD128AndD256) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.cluster = -1;  // the rule: both from 4k keys (d128 session 54, H100; d256 session 67, H200)
  EXPECT_TRUE(fwd_cluster(128, 32, 4096));
  EXPECT_TRUE(fwd_cluster(128, 2, 16384));
  EXPECT_FALSE(fwd_cluster(128, 8, 1024));    // -2.5% at 1k
  EXPECT_FALSE(fwd_cluster(128, 16, 2048));   // level
  EXPECT_FALSE(fwd_cluster(128, 8, 4095));
  EXPECT_TRUE(fwd_cluster(256, 128, 16384));
  EXPECT_TRUE(fwd_cluster(256, 64, 8192));    // H200 +4.2% (H100 -0.7%: level)
  EXPECT_TRUE(fwd_cluster(256, 32, 4096));    // H200 +2.8% (H100 +0.5%)
  EXPECT_FALSE(fwd_cluster(256, 16, 2048));   // H100 -0.8%
  EXPECT_FALSE(fwd_cluster(256, 32, 4095));
  EXPECT_FALSE(fwd_cluster(128, 33, 4097));   // an odd count leaves a CTA of the last pair without a tile
  EXPECT_FALSE(fwd_cluster(128, 0, 4096));
  EXPECT_FALSE(fwd_cluster(64, 32, 16384));   // d64's 192-row kernel has no clustered instantiation
  expect_forced_pairs(fwd_cluster, t.cluster);
  t = saved;
}

TEST(Heuristics, D64CausalQueryTileByPairRatioAndOverride) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.d64_query_tile = -1;
  EXPECT_EQ(d64_causal_query_tile(512, 512), 128);    // 1.20x the pairs in 192-row tiles (measured +8.8%)
  EXPECT_EQ(d64_causal_query_tile(1024, 1024), 192);  // 1.12x (measured -5.5% with 128)
  EXPECT_EQ(d64_causal_query_tile(576, 576), 192);    // three whole 192-row tiles
  EXPECT_EQ(d64_causal_query_tile(512, 4096), 192);   // long rows of keys: 1.13x
  EXPECT_EQ(d64_causal_query_tile(17, 0), 192);       // no keys
  EXPECT_EQ(d64_causal_query_tile(int64_t(1) << 20, int64_t(1) << 20), 192);
  for (int64_t s = 1025; s < 20000; s += 131) EXPECT_EQ(d64_causal_query_tile(s, s), 192) << s;
  t.d64_query_tile = 128;
  EXPECT_EQ(d64_causal_query_tile(16384, 16384), 128);
  t.d64_query_tile = 192;
  EXPECT_EQ(d64_causal_query_tile(512, 512), 192);
  t.d64_query_tile = 100;  // not a tile: ignored
  EXPECT_EQ(d64_causal_query_tile(512, 512), 128);
  t = saved;
}

TEST(Heuristics, SnakeOverrideWins) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.snake = 0;
  EXPECT_FALSE(causal_snake_order(1 << 20));
  t.snake = 1;
  EXPECT_TRUE(causal_snake_order(1));
  t.snake = -1;
  EXPECT_FALSE(causal_snake_order(512));
  EXPECT_TRUE(causal_snake_order(16384));
  t = saved;
}

// Folded causal order: on for 128-row tiles (d128, d256), off for d64's 192-row tiles, unless forced.
TEST(Heuristics, FoldOrderByTileRowsAndOverride) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.fold = -1;
  EXPECT_TRUE(causal_fold_order(128));
  EXPECT_FALSE(causal_fold_order(192));
  t.fold = 0;
  EXPECT_FALSE(causal_fold_order(128));
  t.fold = 1;
  EXPECT_TRUE(causal_fold_order(192));
  t = saved;
}

// The balanced order for packed causal batches is on by default (measured on the H200, session 23);
// the override wins.
TEST(Heuristics, VarlenBalancedOrderOnByDefaultAndOverride) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.varlen_balance = -1;
  EXPECT_TRUE(varlen_balanced_order());
  t.varlen_balance = 0;
  EXPECT_FALSE(varlen_balanced_order());
  t.varlen_balance = 1;
  EXPECT_TRUE(varlen_balanced_order());
  t = saved;
}

// The dynamic order for packed FP8 batches is on by default; the override wins.
TEST(Heuristics, VarlenDynamicOrderOnByDefaultAndOverride) {
  int& forced = varlen_dynamic_override();
  const int saved = forced;
  forced = -1;
  EXPECT_TRUE(varlen_dynamic_order());
  forced = 0;
  EXPECT_FALSE(varlen_dynamic_order());
  forced = 1;
  EXPECT_TRUE(varlen_dynamic_order());
  forced = saved;
}

// attention_fp8's wide key tile: d128 fixed length from 8k keys (measured, perf-notes); either
// override wins there, and nothing gives it to other head dims or packed batches.
TEST(Heuristics, Fp8WideKeyTileFromEightKKeysAtD128FixedLengthOnly) {
  FwdTuning& t = fwd_tuning();
  const FwdTuning saved = t;
  t.fp8_key_tile = -1;
  EXPECT_EQ(fp8_key_tile(128, 4096, false), 0);
  EXPECT_EQ(fp8_key_tile(128, 8191, false), 0);
  EXPECT_EQ(fp8_key_tile(128, 8192, false), 224);
  EXPECT_EQ(fp8_key_tile(128, 1 << 17, false), 224);
  EXPECT_EQ(fp8_key_tile(128, 16384, true), 0);
  EXPECT_EQ(fp8_key_tile(64, 16384, false), 0);
  EXPECT_EQ(fp8_key_tile(256, 16384, false), 0);
  t.fp8_key_tile = 224;
  EXPECT_EQ(fp8_key_tile(128, 17, false), 224);
  EXPECT_EQ(fp8_key_tile(128, 17, true), 0);
  EXPECT_EQ(fp8_key_tile(64, 17, false), 0);
  t.fp8_key_tile = 128;
  EXPECT_EQ(fp8_key_tile(128, 16384, false), 0);
  t = saved;
}

// Backward switches: the causal key blocks of one head side by side (+33% at d128 causal 2k against
// longest-first across heads, backward v3) and the first dQ writer storing (v11) default on; the
// programmatic launch (v12, no gain measured) defaults off. Each override wins.
TEST(Heuristics, BackwardSwitchesDefaultOnAndOverride) {
  BwdTuning& t = bwd_tuning();
  const BwdTuning saved = t;
  struct Switch {
    int BwdTuning::*field;
    bool (*value)();
    const char* name;
    bool default_on;
  };
  for (const Switch& s : {Switch{&BwdTuning::key_blocks_inner, bwd_causal_key_blocks_inner, "key_blocks_inner", true},
                          Switch{&BwdTuning::dq_first_store, bwd_dq_first_store, "dq_first_store", true},
                          Switch{&BwdTuning::pdl, bwd_programmatic_launch, "pdl", false}}) {
    t.*s.field = -1;
    EXPECT_EQ(s.value(), s.default_on) << s.name;
    t.*s.field = 0;
    EXPECT_FALSE(s.value()) << s.name;
    t.*s.field = 1;
    EXPECT_TRUE(s.value()) << s.name;
    t = saved;
  }
}

// Causal backward launch sections: as many heads as fit in the 40 MiB budget, rounded down to a
// power of two, all of them when they fit, at least one; both overrides win.
TEST(Heuristics, BackwardCausalSectionsFitTheL2Budget) {
  BwdTuning& t = bwd_tuning();
  const BwdTuning saved = t;
  t = BwdTuning{};
  const long long d128 = 128 * 8;  // bytes per query row at d128: Q and dO in bf16, dQ in fp32
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 128), 16);       // 2 MiB a head: 20 fit -> 16
  EXPECT_EQ(bwd_causal_section_heads(16384 * d128, 16), 2);        // 16 MiB: 2
  EXPECT_EQ(bwd_causal_section_heads(16384 * 2 * d128, 8), 1);     // 32 MiB: 1
  EXPECT_EQ(bwd_causal_section_heads(4 * 16384 * 2 * d128, 8), 1); // bigger than the budget: still 1
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 6), 6);          // all fit: one section
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 20), 20);
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 21), 16);
  EXPECT_EQ(bwd_causal_section_heads(0, 7), 7);
  t.section_heads = 3;
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 128), 3);
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 2), 2);
  t.key_blocks_inner = 0;  // longest first across every head, whatever the section override
  EXPECT_EQ(bwd_causal_section_heads(2048 * d128, 128), 128);
  t = saved;
}

// The launch order visits every (key block, head) once; section 1 is the key blocks of one head side
// by side, section = heads is key block 0 of every head first; inside a section the key block never
// decreases and the sections follow each other.
TEST(Heuristics, BackwardLaunchOrderIsAPermutationBySection) {
  using sm90::bwd::bwd_launch_unit;
  for (int n_blocks : {1, 2, 5, 16}) {
    for (int heads : {1, 3, 6, 8, 13}) {
      for (int section : {1, 2, 4, 5, 6, 8, 13}) {
        if (section > heads) continue;
        std::set<std::pair<int, int>> seen;
        int prev_section = 0, prev_n = 0;
        for (int idx = 0; idx < n_blocks * heads; ++idx) {
          const auto u = bwd_launch_unit(idx, n_blocks, heads, section);
          const std::string at = "n_blocks " + std::to_string(n_blocks) + " heads " + std::to_string(heads) +
                                 " section " + std::to_string(section) + " idx " + std::to_string(idx);
          ASSERT_TRUE(u.n_block >= 0 && u.n_block < n_blocks && u.head_batch >= 0 && u.head_batch < heads) << at;
          EXPECT_TRUE(seen.insert({u.n_block, u.head_batch}).second) << at << ": visited twice";
          const int sec = u.head_batch / section;
          EXPECT_GE(sec, prev_section) << at;
          if (sec == prev_section) EXPECT_GE(u.n_block, prev_n) << at;
          prev_section = sec;
          prev_n = u.n_block;
          if (section == 1) EXPECT_TRUE(u.n_block == idx % n_blocks && u.head_batch == idx / n_blocks) << at;
          if (section == heads) EXPECT_TRUE(u.n_block == idx / heads && u.head_batch == idx % heads) << at;
        }
        EXPECT_EQ(int(seen.size()), n_blocks * heads);
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::heuristics
