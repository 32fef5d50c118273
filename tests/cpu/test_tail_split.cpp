// The forward's tail split on the host (api/fwd_tail_split.hpp, sm90/ws/tail_split.hpp): the piece
// count's model, which problems it applies to, the workspace it takes, and the workspace form of
// forward (C++ and C ABI) refusing a missing, short or misaligned workspace before any device.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../common/c_abi_util.hpp"
#include "../common/test_util.hpp"
#include "api/device.hpp"
#include "api/fwd_tail_split.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"
#include "sm90/ws/tail_split.hpp"

namespace hopattn::test {
namespace {

using heuristics::tail_split_pieces;

TEST(TailSplitPieces, TheModelCutsOnlyPartialLastRounds) {
  // d128 8k on the paper grid: 2048 tiles = 15 rounds of 132 + 68, 47 key blocks of 176. Three
  // pieces: 204 on 132 SMs, the last round 2 x (16 + 6) = 44 blocks against 48 (docs/perf-notes.md).
  EXPECT_EQ(tail_split_pieces(2048, 132, 47, -1), 3);
  // d128 4k (26 blocks of 160) and 2k (13): 2 x (9 + 6) = 30 against 27; measured 1-2% slower split.
  EXPECT_EQ(tail_split_pieces(2048, 132, 26, -1), 1);
  EXPECT_EQ(tail_split_pieces(2048, 132, 13, -1), 1);
  // d64 4k: 2816 tiles = 21 rounds + 44; 3 x 44 = 132 pieces fill one round exactly.
  EXPECT_EQ(tail_split_pieces(2816, 132, 32, -1), 3);
  // d256: 1024 tiles = 7 rounds + 100. Two pieces put 200 on 132 SMs: a whole tile for 68 of them.
  EXPECT_EQ(tail_split_pieces(1024, 132, 52, -1), 1);
  // Whole rounds: nothing to fill.
  EXPECT_EQ(tail_split_pieces(132 * 20, 132, 64, -1), 1);
  // Fewer tiles than SMs: split-KV for the prefill. 64 tiles of 32 blocks: 2 pieces (128 CTAs).
  EXPECT_EQ(tail_split_pieces(64, 132, 32, -1), 2);
  // d64 1k: 3072 tiles = 23 rounds + 36 of 8 blocks; a piece's overhead eats the gain (measured flat).
  EXPECT_EQ(tail_split_pieces(3072, 132, 8, -1), 1);
  // 8 tiles of 32 blocks: 8 pieces (64 CTAs of 4 blocks each), the most.
  EXPECT_EQ(tail_split_pieces(8, 132, 32, -1), heuristics::kMaxTailPieces);
  // Short keys: 2048 tiles of 4 blocks (d128 at 512 keys). Pieces of 2 blocks and their overheads
  // over 2 rounds cost more than one whole tile.
  EXPECT_EQ(tail_split_pieces(2048, 132, 4, -1), 1);
  // One key block cannot be cut.
  EXPECT_EQ(tail_split_pieces(8, 132, 1, -1), 1);
  EXPECT_EQ(tail_split_pieces(0, 132, 8, -1), 1);
}

TEST(TailSplitPieces, ForcedCountsAreClamped) {
  EXPECT_EQ(tail_split_pieces(2048, 132, 26, 5), 5);
  EXPECT_EQ(tail_split_pieces(2048, 132, 26, 0), 1);
  EXPECT_EQ(tail_split_pieces(2048, 132, 26, 1), 1);
  EXPECT_EQ(tail_split_pieces(2048, 132, 3, 7), 3);  // at most one piece per key block
  EXPECT_EQ(tail_split_pieces(2048, 132, 64, 50), heuristics::kMaxTailPieces);
  EXPECT_EQ(tail_split_pieces(132 * 3, 132, 26, 4), 1);  // no partial round: nothing to split
}

// The scheduler's walk (StaticTileScheduler with kTailSplit): CTA b of `grid` takes work indices
// b, b + grid, ... below num_indices, each mapped by split_work and piece_block_range. Every whole
// tile must come once, every split tile's key blocks once across its pieces, no piece empty; and
// with the model's piece count the busiest CTA (in the model's key blocks) must finish sooner
// than without the split.
struct Walk {
  double busiest = 0;  // the most work a CTA gets: blocks + 1 a whole tile, blocks + 1.5 a piece
};
Walk walk(int tiles, int sms, int key_blocks, int pieces) {
  sm90::ws::TailSplit s;
  const int rest = tiles % sms;
  if (pieces > 1 && rest > 0) {
    s.first = tiles - rest;
    s.tiles = rest;
    s.pieces = pieces;
  }
  const int n = s.num_indices(tiles), grid = n < sms ? n : sms;
  std::vector<int> whole(tiles, 0);
  std::vector<std::vector<int>> covered(tiles, std::vector<int>(key_blocks, 0));
  Walk w;
  for (int b = 0; b < grid; ++b) {
    double work = 0;
    for (int idx = b; idx < n; idx += grid) {
      const sm90::ws::SplitWork sw = sm90::ws::split_work(s, idx);
      EXPECT_GE(sw.tile, 0);
      EXPECT_LT(sw.tile, tiles);
      if (sw.piece < 0) {
        EXPECT_LT(sw.tile, s.first);
        ++whole[sw.tile];
        work += key_blocks + 1.0;
        continue;
      }
      EXPECT_GE(sw.tile, s.first);
      EXPECT_EQ(sw.split_tile, sw.tile - s.first);
      EXPECT_LT(sw.piece, pieces);
      const sm90::ws::BlockRange range = sm90::ws::piece_block_range(s, 0, key_blocks, sw.piece);
      const int pb = range.begin, pe = range.end;
      EXPECT_LT(pb, pe) << "an empty piece: tile " << sw.tile << " piece " << sw.piece;
      for (int k = pb; k < pe; ++k) ++covered[sw.tile][k];
      work += (pe - pb) + 1.5;
    }
    w.busiest = std::max(w.busiest, work);
  }
  for (int t = 0; t < tiles; ++t) {
    if (t < (s.on() ? s.first : tiles)) {
      EXPECT_EQ(whole[t], 1) << "tile " << t;
    } else {
      for (int k = 0; k < key_blocks; ++k) EXPECT_EQ(covered[t][k], 1) << "tile " << t << " block " << k;
    }
  }
  return w;
}

TEST(TailSplitWork, TheRoundRobinCoversEveryTileAndKeyBlockOnce) {
  const int cases[][4] = {
      {2048, 132, 26, 3}, {2816, 132, 32, 3}, {64, 132, 8, 2}, {8, 132, 32, 8}, {1000, 132, 7, 5},
      {300, 132, 13, 4},  {131, 132, 9, 8},   {144, 132, 24, 8}, {192, 132, 33, 8}, {2048, 132, 26, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tiles " << c[0] << " sms " << c[1] << " blocks " << c[2] << " pieces " << c[3]);
    walk(c[0], c[1], c[2], c[3]);
  }
}

TEST(TailSplitWork, TheModelsChoiceShortensTheBusiestCta) {
  const int cases[][3] = {{2048, 132, 47}, {2816, 132, 32}, {2816, 132, 16}, {64, 132, 32}, {8, 132, 32}, {2048, 132, 94}};
  for (const auto& c : cases) {
    const int k = tail_split_pieces(c[0], c[1], c[2], -1);
    ASSERT_GT(k, 1) << c[0] << " tiles";
    const double split = walk(c[0], c[1], c[2], k).busiest, whole = walk(c[0], c[1], c[2], 1).busiest;
    EXPECT_LT(split, whole) << c[0] << " tiles of " << c[2] << " blocks in " << k << " pieces";
  }
}

// A problem the split applies to: bf16, unmasked, fixed-length.
AttnProblem split_problem(int64_t head_dim) {
  AttnProblem p;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 8192;
  p.heads_q = p.heads_kv = 16;
  p.head_dim = head_dim;
  p.dtype = DType::kBF16;
  return p;
}

TEST(TailSplitPlan, AppliesToUnmaskedFixedLengthSixteenBitOnly) {
  // d128: 2 x 16 x 64 = 2048 tiles of 128 rows, 8192 keys in tiles of 176.
  const heuristics::TailSplitPlan plan = heuristics::tail_split_plan(split_problem(128), 132);
  EXPECT_EQ(plan.tiles, 2048);
  EXPECT_EQ(plan.block_m, 128);
  EXPECT_EQ(plan.pieces, 3);
  EXPECT_EQ(plan.split_tiles, 68);
  // 68 tiles x 2 warpgroups of counters (544 bytes, padded to 768), then 68 x 3 slots of
  // 128 x 128 O and 8 warps x 64 lse floats.
  EXPECT_EQ(plan.workspace_bytes, 768u + 68u * 3u * (128u * 128u + 512u) * 4u);
  EXPECT_EQ(plan.workspace_bytes, sm90::ws::tail_split_workspace_bytes(68, 3, 128, 128));
  // d64: 192-row tiles.
  EXPECT_EQ(heuristics::tail_split_plan(split_problem(64), 132).block_m, 192);

  const auto unsplit = [](const char* what, AttnProblem p) {
    const heuristics::TailSplitPlan plan = heuristics::tail_split_plan(p, 132);
    EXPECT_EQ(plan.pieces, 1) << what;
    EXPECT_EQ(plan.workspace_bytes, 0u) << what;
  };
  AttnProblem p = split_problem(128);
  p.causal = true;
  p.window_right = 0;
  unsplit("causal", p);
  p = split_problem(128);
  p.window_left = 256;
  unsplit("window", p);
  p = split_problem(128);
  p.softcap = 30.f;
  unsplit("softcap", p);
  p = split_problem(128);
  p.dtype = DType::kE4M3;
  unsplit("e4m3", p);
  p = split_problem(96);
  unsplit("head_dim 96", p);
  p = split_problem(256);  // FwdWsConfig::kTailSplit: the merge spilled d256's kernel
  p.batch = 1;             // 8 tiles of 52 key blocks, which the model would cut in 8
  p.seqlen_q = 128;
  p.heads_q = p.heads_kv = 8;
  EXPECT_EQ(tail_split_pieces(8, 132, 52, -1), heuristics::kMaxTailPieces);
  unsplit("head_dim 256", p);
  p = split_problem(128);
  static const int32_t fake_index[2] = {0, 0};
  p.seqused_k = fake_index;
  unsplit("seqused_k", p);
  p = split_problem(128);
  p.cu_seqlens_q = p.cu_seqlens_k = fake_index;
  unsplit("varlen", p);
  p = split_problem(128);
  p.seqlen_k = 0;
  unsplit("no keys", p);
  p = split_problem(128);
  p.batch = 33;  // 33 x 16 x 64 = 33792 tiles = 256 rounds of 132
  unsplit("whole rounds", p);
}

TEST(TailSplitPlan, TheOverrideForcesOrForbids) {
  int& forced = heuristics::tail_split_override();
  const int saved = forced;
  forced = 0;
  EXPECT_EQ(heuristics::tail_split_plan(split_problem(128), 132).pieces, 1);
  forced = 5;
  EXPECT_EQ(heuristics::tail_split_plan(split_problem(128), 132).pieces, 5);
  forced = saved;
}

alignas(256) unsigned char g_fake[1024];  // never dereferenced: every call below fails before a launch

// Valid args that split on a 132-SM device (and on none: the size then follows 132 SMs): bf16 or
// fp16 at the build's first head dim, batch 1, 4 heads, 300 queries (3 or 2 tiles a head), 1000
// keys (8 or more key blocks).
ForwardArgs split_args(int64_t head_dim, DType t) {
  ForwardArgs a;
  a.q = make_tensor(g_fake, t, 1, 300, 4, head_dim);
  a.k = make_tensor(g_fake, t, 1, 1000, 4, head_dim);
  a.v = make_tensor(g_fake, t, 1, 1000, 4, head_dim);
  a.out = make_tensor(g_fake, t, 1, 300, 4, head_dim);
  return a;
}

struct Built {
  bool found = false;
  DType dtype = DType::kBF16;
  int64_t head_dim = 0;
};
Built first_forward_kernel() {
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128})
      if (std::string(build_instantiations()).find(std::string("fwd:") + dtype_name(t) + ":" + std::to_string(d)) !=
          std::string::npos)
        return {true, t, d};
  return {};
}

TEST(TailSplitWorkspace, SizeQueryAndRefusals) {
  const Built kern = first_forward_kernel();
  if (!kern.found) GTEST_SKIP() << "no 16-bit forward kernel in this build: " << build_instantiations();
  if (heuristics::tail_split_override() >= 0) GTEST_SKIP() << "HOPATTN_FWD_TAIL_SPLIT is set";
  if (split_planning_sm_count() != 132) GTEST_SKIP() << "the sizes below are a 132-SM device's";
  const ForwardArgs a = split_args(kern.head_dim, kern.dtype);
  const std::size_t bytes = forward_workspace_size(a);
  ASSERT_GT(bytes, 0u);
  AttnProblem p;
  ASSERT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());
  EXPECT_EQ(bytes, heuristics::tail_split_plan(p, 132).workspace_bytes);

  const std::string needed = std::to_string(bytes) + " bytes are needed (forward_workspace_size)";
  const auto expect_refused = [&](void* ws, std::size_t n, const std::string& fragment) {
    const Result r = forward(a, ws, n);
    EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kInvalidArgument)) << fragment;
    EXPECT_NE(r.message.find(fragment), std::string::npos) << r.message;
  };
  expect_refused(nullptr, 0, "workspace is null but " + needed);
  expect_refused(g_fake, bytes - 1, "workspace_bytes=" + std::to_string(bytes - 1) + " but " + needed);
  expect_refused(g_fake + 16, bytes, "workspace is not 256-byte aligned");

  // Invalid args: size 0, and the call reports the argument, not the workspace.
  ForwardArgs bad = a;
  bad.k.sizes[3] = kern.head_dim / 2;
  EXPECT_EQ(forward_workspace_size(bad), 0u);
  const Result r = forward(bad, nullptr, 0);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kInvalidArgument));
  EXPECT_EQ(r.message.find("workspace"), std::string::npos) << r.message;

  // A problem that does not split needs none, and takes a null one.
  ForwardArgs causal = a;
  causal.causal = true;
  EXPECT_EQ(forward_workspace_size(causal), 0u);
  if (!has_cuda_device()) {
    const Result nd = forward(causal, nullptr, 0);
    EXPECT_EQ(static_cast<int>(nd.status), static_cast<int>(Status::kUnsupportedDevice)) << nd.message;
    const Result nd2 = forward(a, g_fake, bytes);  // a good workspace: then the missing device
    EXPECT_EQ(static_cast<int>(nd2.status), static_cast<int>(Status::kUnsupportedDevice)) << nd2.message;
  }

  // The C ABI: the same size, and the same refusals.
  hopattn_fwd_args c{};
  c.q = to_c(a.q);
  c.k = to_c(a.k);
  c.v = to_c(a.v);
  c.out = to_c(a.out);
  EXPECT_EQ(hopattn_forward_workspace_size(&c), bytes);
  EXPECT_EQ(hopattn_forward_with_workspace(&c, nullptr, 0, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("workspace is null but " + needed), std::string::npos)
      << hopattn_last_error();
  EXPECT_EQ(hopattn_forward_with_workspace(nullptr, g_fake, bytes, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("args is null"), std::string::npos) << hopattn_last_error();
}

}  // namespace
}  // namespace hopattn::test
