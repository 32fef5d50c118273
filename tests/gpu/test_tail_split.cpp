// The forward's tail split on the GPU (sm90/ws/tail_split.hpp): forced piece counts at head dims
// 64 and 128 (d256 does not split), with whole rounds before the split tiles and without, GQA, ragged query and key counts. Each
// split call must write every element (outputs NaN-poisoned, workspace 0xFF-poisoned), agree with
// the unsplit call (forward without a workspace) and with the fp64 reference, and reproduce itself
// bit for bit: the merge sums the pieces in a fixed order whichever finishes last.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "dense_forward_args.hpp"
#include "api/fwd_tail_split.hpp"
#include "api/instantiations.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {
namespace {

struct SplitCase {
  DType dtype;
  int head_dim;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  int pieces;  // forced (HOPATTN_FWD_TAIL_SPLIT's override); -1: the model's
  bool reference;  // also against the fp64 reference (affordable sizes only)
};

std::string name(const SplitCase& c) {
  return std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) + "_b" + std::to_string(c.batch) +
         "_h" + std::to_string(c.heads_q) + "x" + std::to_string(c.heads_kv) + "_q" + std::to_string(c.seqlen_q) +
         "_k" + std::to_string(c.seqlen_k) + "_p" + (c.pieces < 0 ? std::string("model") : std::to_string(c.pieces));
}

// Restores the override on scope exit, so a failing assertion leaves the other tests unforced.
struct ForcedPieces {
  int saved;
  explicit ForcedPieces(int pieces) : saved(heuristics::tail_split_override()) {
    heuristics::tail_split_override() = pieces;
  }
  ~ForcedPieces() { heuristics::tail_split_override() = saved; }
};

std::vector<float> to_float(const std::vector<uint16_t>& h, DType t) { return decode(h.data(), h.size(), t); }

std::vector<float> lse_of(const DeviceBuffer& b, size_t n) {
  std::vector<float> h(n);
  b.download(h.data(), n * 4);
  return h;
}

void run_case(const SplitCase& c) {
  const DType t = c.dtype;
  const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const size_t nq = b * sq * hq * d, nk = b * sk * hkv * d, nlse = b * hq * sq;
  DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), out(nq * 2), lse(nlse * 4);
  const uint64_t seed = std::hash<std::string>{}(name(c));
  q.upload(random_elements(nq, seed, t, -3.f, 3.f));
  k.upload(random_elements(nk, seed + 1, t, -1.f, 1.f));
  v.upload(random_elements(nk, seed + 2, t, -1.f, 1.f));
  ForwardArgs a = dense_forward_args(q, k, v, out, lse, t, b, sq, sk, hq, hkv, d);

  const ForcedPieces forced(c.pieces);
  const std::size_t bytes = forward_workspace_size(a);
  ASSERT_GT(bytes, 0u) << name(c) << ": the case does not split";
  DeviceBuffer ws(bytes);

  // The unsplit call first: what the split must agree with.
  out.fill(0xFF);
  lse.fill(0xFF);
  ASSERT_TRUE(forward(a).ok());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> plain(nq), first(nq), got(nq);
  out.download(plain.data(), nq * 2);
  const std::vector<float> plain_lse = lse_of(lse, nlse);

  std::vector<float> first_lse;
  for (int run = 0; run < 3; ++run) {
    out.fill(0xFF);
    lse.fill(0xFF);
    ws.fill(0xFF);
    const Result r = forward(a, ws.get(), bytes);
    ASSERT_TRUE(r.ok()) << name(c) << ": " << r.message;
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
    out.download(got.data(), nq * 2);
    const std::vector<float> got_lse = lse_of(lse, nlse);
    if (run == 0) {
      first = got;
      first_lse = got_lse;
      const double err = rel_l2_error(to_float(got, t), to_float(plain, t));  // +inf on any NaN
      const double lerr = rel_l2_error(got_lse, plain_lse);
      EXPECT_LE(err, t == DType::kBF16 ? 1e-2 : 3e-3) << name(c) << ": out against the unsplit call";
      EXPECT_LE(lerr, 1e-5) << name(c) << ": lse against the unsplit call";
    } else {
      size_t diff = 0;
      for (size_t i = 0; i < nq; ++i) diff += got[i] != first[i];
      EXPECT_EQ(diff, 0u) << name(c) << ": run " << run << " differs from run 0";
      EXPECT_TRUE(got_lse == first_lse) << name(c) << ": lse of run " << run << " differs from run 0";
    }
  }

  if (c.reference) {
    DeviceBuffer out_ref(nq * 2), lse_ref(nlse * 4);
    ForwardArgs ra = a;
    ra.out = make_tensor(out_ref.get(), t, b, sq, hq, d);
    ra.lse = make_tensor(lse_ref.get(), DType::kFP32, b, hq, sq);
    ASSERT_TRUE(forward_reference_cuda(ra).ok());
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> ref(nq);
    out_ref.download(ref.data(), nq * 2);
    EXPECT_LE(rel_l2_error(to_float(first, t), to_float(ref, t)), t == DType::kBF16 ? 1e-2 : 3e-3)
        << name(c) << ": out against the reference";
    EXPECT_LE(rel_l2_error(first_lse, lse_of(lse_ref, nlse)), 1e-4) << name(c) << ": lse against the reference";
  }
}

TEST(ForwardTailSplit, ForcedPiecesMatchTheUnsplitCallAndRepeat) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::vector<SplitCase> cases = {
      // Fewer tiles than SMs: every tile split (no whole round before the pieces).
      {DType::kBF16, 64, 1, 1000, 1000, 8, 2, 2, true},
      {DType::kBF16, 128, 1, 300, 4097, 4, 1, 8, true},
      {DType::kFP16, 128, 1, 17, 2048, 8, 8, 3, true},
      // Whole rounds, then the split tail: 18 x 8 = 144 tiles at d128 (132 + 12), 12 x 16 = 192 at
      // d64 (132 + 60).
      {DType::kBF16, 128, 1, 2200, 1000, 8, 2, 3, false},
      {DType::kBF16, 128, 1, 2200, 1000, 8, 8, 2, false},
      {DType::kBF16, 64, 1, 2200, 1000, 16, 4, 4, false},
      {DType::kFP16, 64, 1, 2200, 333, 16, 1, 2, false},
      // Pieces past the split tiles' count spill over more than one round of CTAs (12 x 8 = 96,
      // 60 x 8 = 480 pieces).
      {DType::kBF16, 64, 1, 2200, 4097, 16, 16, 8, false},
      // The paper grid's d128 8k point, by the model (3 pieces of the last 68 tiles).
      {DType::kBF16, 128, 2, 8192, 8192, 16, 16, -1, false},
  };
  for (const SplitCase& c : cases) {
    if (find_forward_kernel(c.dtype, c.head_dim) == nullptr) continue;
    SCOPED_TRACE(name(c));
    run_case(c);
  }
}

// A workspace reused by the next call (the counters reset on the stream) and a second stream's own.
TEST(ForwardTailSplit, BackToBackCallsOnOneWorkspace) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const DType t = DType::kBF16;
  const int d = 128;
  if (find_forward_kernel(t, d) == nullptr) GTEST_SKIP() << "not built";
  const int64_t b = 1, sq = 500, sk = 3000, h = 8;
  const size_t n = b * sq * h * d, nk = b * sk * h * d;
  DeviceBuffer q(n * 2), k(nk * 2), v(nk * 2), out(n * 2), out2(n * 2);
  q.upload(random_elements(n, 5, t, -3.f, 3.f));
  k.upload(random_elements(nk, 6, t, -1.f, 1.f));
  v.upload(random_elements(nk, 7, t, -1.f, 1.f));
  ForwardArgs a;
  a.q = make_tensor(q.get(), t, b, sq, h, d);
  a.k = make_tensor(k.get(), t, b, sk, h, d);
  a.v = make_tensor(v.get(), t, b, sk, h, d);
  a.out = make_tensor(out.get(), t, b, sq, h, d);
  const std::size_t bytes = forward_workspace_size(a);
  ASSERT_GT(bytes, 0u);
  DeviceBuffer ws(bytes);
  ws.fill(0xFF);
  out.fill(0xFF);
  ASSERT_TRUE(forward(a, ws.get(), bytes).ok());
  std::vector<uint16_t> once(n), again(n);
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  out.download(once.data(), n * 2);
  ForwardArgs a2 = a;
  a2.out = make_tensor(out2.get(), t, b, sq, h, d);
  out2.fill(0xFF);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(forward(a2, ws.get(), bytes).ok());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  out2.download(again.data(), n * 2);
  EXPECT_TRUE(once == again) << "ten calls on one workspace changed the result";
}

}  // namespace
}  // namespace hopattn::test
