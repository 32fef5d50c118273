// Tests of the CPU reference (hopattn::forward_cpu) against a separately written naive formula that
// materialises the whole score matrix. Every other backend is judged by this reference, so here it
// is held to exact rounding: each output element must be within half an ulp of the fp64 result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn::test {
namespace {

struct Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
};

// Dense (batch, seq, heads, head_dim) values, already exact in the test's dtype.
struct Inputs {
  std::vector<float> q, k, v;
};

struct Expected {
  std::vector<double> out;  // dense (batch, seqlen_q, heads_q, head_dim)
  std::vector<double> lse;  // (batch, heads_q, seqlen_q)
};

Inputs random_inputs(const Shape& s, DType t, uint64_t seed, float range = 1.f) {
  Inputs in;
  in.q = random_values(size_t(s.batch * s.seqlen_q * s.heads_q * s.head_dim), seed * 3 + 0, t, -range, range);
  in.k = random_values(size_t(s.batch * s.seqlen_k * s.heads_kv * s.head_dim), seed * 3 + 1, t, -range, range);
  in.v = random_values(size_t(s.batch * s.seqlen_k * s.heads_kv * s.head_dim), seed * 3 + 2, t, -1.f, 1.f);
  return in;
}

// softmax(scale * Q K^T + mask) V for each (batch, head) with the full score matrix materialised.
Expected naive_attention(const Shape& s, const Inputs& in, bool causal, double scale, Window w = {}, double softcap = 0) {
  const int64_t sq = s.seqlen_q, sk = s.seqlen_k, d = s.head_dim;
  Expected e;
  e.out.assign(size_t(s.batch * sq * s.heads_q * d), 0.0);
  e.lse.assign(size_t(s.batch * s.heads_q * sq), -INFINITY);
  auto at = [&](const std::vector<float>& x, int64_t seq, int64_t heads, int64_t b, int64_t i, int64_t h, int64_t c) {
    return static_cast<double>(x[size_t(((b * seq + i) * heads + h) * d + c)]);
  };
  std::vector<double> scores(size_t(sq * sk));
  std::vector<bool> allowed(size_t(sq * sk));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / (s.heads_q / s.heads_kv);
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += at(in.q, sq, s.heads_q, b, i, h, c) * at(in.k, sk, s.heads_kv, b, j, hk, c);
          scores[size_t(i * sk + j)] = softcap > 0 ? softcap * std::tanh(scale * dot / softcap) : scale * dot;
          const int64_t diag = i + sk - sq;  // bottom-right aligned
          allowed[size_t(i * sk + j)] = (!causal || j <= diag) && (w.left < 0 || j >= diag - w.left) &&
                                        (w.right < 0 || j <= diag + w.right);
        }
      for (int64_t i = 0; i < sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j)
          if (allowed[size_t(i * sk + j)]) mx = std::max(mx, scores[size_t(i * sk + j)]);
        if (mx == -INFINITY) continue;  // no visible key: out stays 0, lse stays -inf
        double denom = 0;
        for (int64_t j = 0; j < sk; ++j)
          if (allowed[size_t(i * sk + j)]) denom += std::exp(scores[size_t(i * sk + j)] - mx);
        for (int64_t c = 0; c < d; ++c) {
          double num = 0;
          for (int64_t j = 0; j < sk; ++j)
            if (allowed[size_t(i * sk + j)])
              num += std::exp(scores[size_t(i * sk + j)] - mx) * at(in.v, sk, s.heads_kv, b, j, hk, c);
          e.out[size_t(((b * sq + i) * s.heads_q + h) * d + c)] = num / denom;
        }
        e.lse[size_t((b * s.heads_q + h) * sq + i)] = mx + std::log(denom);
      }
    }
  }
  return e;
}

// Each element must be the fp64 value correctly rounded: |got - want| <= ulp/2. The small slack
// absorbs the two fp64 summation orders (~1e-16) that may straddle a rounding tie.
void expect_rounded(const std::vector<float>& got, const std::vector<double>& want, DType t, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      if (got[i] != want[i] && ++bad <= 5) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
      continue;
    }
    const double tol = 0.5 * dtype_ulp(t, want[i]) * (1 + 1e-6) + 1e-13;
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (tol " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": elements off by more than half an ulp";
}

struct CaseResult {
  std::vector<float> out;  // dense, decoded
  std::vector<float> lse;
  Result result;
};

// Runs forward_cpu on contiguous tensors holding `in`; out is poisoned (NaN) beforehand.
CaseResult run_contiguous(const Shape& s, DType t, const Inputs& in, bool causal, std::optional<float> scale,
                          bool with_lse = true, Window window = {}, float softcap = 0.f) {
  std::vector<uint8_t> q = encode(in.q, t), k = encode(in.k, t), v = encode(in.v, t);
  std::vector<uint8_t> out(size_t(s.batch * s.seqlen_q * s.heads_q * s.head_dim) * dtype_size(t));
  poison(out);
  std::vector<float> lse(size_t(s.batch * s.heads_q * s.seqlen_q), std::numeric_limits<float>::quiet_NaN());
  ForwardArgs a;
  a.q = make_tensor(q.data(), t, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  a.k = make_tensor(k.data(), t, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
  a.v = make_tensor(v.data(), t, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
  a.out = make_tensor(out.data(), t, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  if (with_lse) a.lse = make_tensor(lse.data(), DType::kFP32, s.batch, s.heads_q, s.seqlen_q);
  a.causal = causal;
  a.softmax_scale = scale;
  a.window = window;
  a.softcap = softcap;
  CaseResult r;
  r.result = forward_cpu(a);
  r.out = decode(out.data(), out.size() / dtype_size(t), t);
  r.lse = lse;
  return r;
}

void check_case(const Shape& s, DType t, bool causal, uint64_t seed, std::optional<float> scale = std::nullopt,
                float input_range = 1.f, Window window = {}, float softcap = 0.f) {
  SCOPED_TRACE(::testing::Message() << "b=" << s.batch << " sq=" << s.seqlen_q << " sk=" << s.seqlen_k
                                    << " hq=" << s.heads_q << " hkv=" << s.heads_kv << " d=" << s.head_dim
                                    << " dtype=" << dtype_name(t) << " causal=" << causal << " window=("
                                    << window.left << ", " << window.right << ") softcap=" << softcap);
  const Inputs in = random_inputs(s, t, seed, input_range);
  const CaseResult r = run_contiguous(s, t, in, causal, scale, true, window, softcap);
  ASSERT_TRUE(r.result.ok()) << r.result.message;
  // The library resolves the default scale in fp32; use the same value.
  const double used_scale = scale ? *scale : static_cast<float>(1.0 / std::sqrt(double(s.head_dim)));
  const Expected e = naive_attention(s, in, causal, used_scale, window, softcap);
  expect_rounded(r.out, e.out, t, "out");
  expect_rounded(r.lse, e.lse, DType::kFP32, "lse");
}

// ---- shapes, dtypes, head dims --------------------------------------------------------------------

struct DTypeHeadDim {
  DType dtype;
  int64_t head_dim;
};

class ReferenceDTypeHeadDim : public ::testing::TestWithParam<DTypeHeadDim> {};

TEST_P(ReferenceDTypeHeadDim, NonSquareNonCausal) {
  check_case({2, 19, 33, 3, 3, GetParam().head_dim}, GetParam().dtype, false, 100 + GetParam().head_dim);
}
TEST_P(ReferenceDTypeHeadDim, CausalShorterQueries) {
  check_case({1, 13, 40, 2, 1, GetParam().head_dim}, GetParam().dtype, true, 200 + GetParam().head_dim);
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceDTypeHeadDim,
                         ::testing::Values(DTypeHeadDim{DType::kBF16, 64}, DTypeHeadDim{DType::kBF16, 96},
                                           DTypeHeadDim{DType::kBF16, 128}, DTypeHeadDim{DType::kFP16, 64},
                                           DTypeHeadDim{DType::kFP16, 96}, DTypeHeadDim{DType::kFP16, 128},
                                           DTypeHeadDim{DType::kFP32, 64}, DTypeHeadDim{DType::kFP32, 96},
                                           DTypeHeadDim{DType::kFP32, 128}),
                         [](const ::testing::TestParamInfo<DTypeHeadDim>& p) {
                           return std::string(dtype_name(p.param.dtype)) + "_d" + std::to_string(p.param.head_dim);
                         });

// Sliding windows against the naive masked formula: each side alone, both, the diagonal only,
// causal with a left bound, sq != sk either way (rows with no key: 0 and -inf), wider than the sequence.
TEST(Reference, SlidingWindows) {
  const struct { Shape s; bool causal; Window w; } cases[] = {
      {{2, 23, 23, 2, 1, 32}, false, {0, 0}},   {{1, 23, 31, 2, 2, 32}, false, {4, -1}},
      {{1, 31, 17, 2, 1, 32}, false, {-1, 3}},  {{2, 20, 29, 4, 2, 16}, false, {5, 2}},
      {{1, 29, 20, 2, 2, 16}, true, {3, -1}},   {{1, 29, 12, 2, 1, 16}, true, {2, 0}},
      {{1, 9, 9, 1, 1, 8}, false, {100, 100}},  {{1, 12, 5, 1, 1, 8}, false, {0, 1}},
  };
  uint64_t seed = 50;
  for (const auto& c : cases) check_case(c.s, DType::kBF16, c.causal, seed++, std::nullopt, 1.f, c.w);
}

// Softcapping against the naive formula, scores large enough that the cap bends them (inputs in
// [-4, 4], head_dim 64: |scale q.k| up to ~100 against caps of 2 and 30), with causal and a window.
TEST(Reference, Softcap) {
  check_case({2, 19, 27, 2, 1, 64}, DType::kFP32, false, 70, std::nullopt, 4.f, {}, 30.f);
  check_case({1, 23, 23, 2, 2, 64}, DType::kBF16, true, 71, std::nullopt, 4.f, {}, 2.f);
  check_case({1, 23, 31, 2, 1, 64}, DType::kFP16, false, 72, 0.5f, 4.f, {5, 3}, 30.f);
}

TEST(Reference, SingleElement) { check_case({1, 1, 1, 1, 1, 64}, DType::kBF16, false, 1); }
TEST(Reference, TinyHeadDim) { check_case({2, 5, 7, 2, 2, 1}, DType::kFP32, false, 2); }
TEST(Reference, CausalSquare) { check_case({2, 31, 31, 2, 2, 64}, DType::kFP16, true, 3); }
TEST(Reference, GroupedQueryAttention) { check_case({2, 9, 21, 8, 2, 64}, DType::kBF16, true, 4); }
TEST(Reference, MultiQueryAttention) { check_case({1, 11, 17, 8, 1, 64}, DType::kFP16, false, 5); }
TEST(Reference, CustomScale) { check_case({1, 8, 24, 2, 2, 64}, DType::kFP32, false, 6, 0.3f); }
// Scores in the hundreds: a softmax without the max subtraction would overflow exp().
TEST(Reference, LargeScoresStayFinite) { check_case({1, 8, 50, 2, 1, 64}, DType::kFP32, true, 7, 40.f, 2.f); }

// out = sum_j softmax_j v_j worked by hand: d = 1, q = 1, k = (0, 1), v = (0, 1), scale 1.
TEST(Reference, HandComputedExample) {
  const Shape s{1, 1, 2, 1, 1, 1};
  const Inputs in{{1.f}, {0.f, 1.f}, {0.f, 1.f}};
  const CaseResult r = run_contiguous(s, DType::kFP32, in, false, 1.f);
  ASSERT_TRUE(r.result.ok()) << r.result.message;
  const double e = std::exp(1.0);
  EXPECT_FLOAT_EQ(r.out[0], static_cast<float>(e / (1 + e)));
  EXPECT_FLOAT_EQ(r.lse[0], static_cast<float>(std::log(1 + e)));
}

// ---- causal masking and rows with no key ---------------------------------------------------------

// sq > sk: with bottom-right alignment the first sq - sk rows see no key at all.
TEST(Reference, CausalLongerQueriesMasksLeadingRows) {
  const Shape s{2, 23, 9, 4, 2, 64};
  for (DType t : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    SCOPED_TRACE(dtype_name(t));
    check_case(s, t, true, 8);
    const CaseResult r = run_contiguous(s, t, random_inputs(s, t, 9), true, std::nullopt);
    ASSERT_TRUE(r.result.ok()) << r.result.message;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t i = 0; i < s.seqlen_q; ++i) {
          const float lse = r.lse[size_t((b * s.heads_q + h) * s.seqlen_q + i)];
          const bool masked = i < s.seqlen_q - s.seqlen_k;
          EXPECT_FALSE(std::isnan(lse));
          if (masked) {
            EXPECT_EQ(lse, -INFINITY) << "row " << i;
          } else {
            EXPECT_TRUE(std::isfinite(lse)) << "row " << i;
          }
          for (int64_t c = 0; c < s.head_dim; ++c) {
            const float o = r.out[size_t(((b * s.seqlen_q + i) * s.heads_q + h) * s.head_dim + c)];
            EXPECT_FALSE(std::isnan(o));
            if (masked) {
              EXPECT_EQ(o, 0.f);
            }
          }
        }
  }
}

// Query i sees exactly keys 0..i + sk - sq: moving a value into a key past that must not change
// row i, while moving it into the last visible key must.
TEST(Reference, CausalBoundaryIsExact) {
  const Shape s{1, 4, 6, 1, 1, 8};
  Inputs in = random_inputs(s, DType::kFP32, 10);
  const CaseResult base = run_contiguous(s, DType::kFP32, in, true, std::nullopt);
  const int64_t i = 1, last_visible = i + s.seqlen_k - s.seqlen_q;  // = 3
  Inputs hidden = in;
  for (int64_t c = 0; c < s.head_dim; ++c) hidden.v[size_t((last_visible + 1) * s.head_dim + c)] += 100.f;
  const CaseResult r_hidden = run_contiguous(s, DType::kFP32, hidden, true, std::nullopt);
  Inputs seen = in;
  for (int64_t c = 0; c < s.head_dim; ++c) seen.v[size_t(last_visible * s.head_dim + c)] += 100.f;
  const CaseResult r_seen = run_contiguous(s, DType::kFP32, seen, true, std::nullopt);
  for (int64_t c = 0; c < s.head_dim; ++c) {
    EXPECT_EQ(r_hidden.out[size_t(i * s.head_dim + c)], base.out[size_t(i * s.head_dim + c)]);
    EXPECT_NE(r_seen.out[size_t(i * s.head_dim + c)], base.out[size_t(i * s.head_dim + c)]);
  }
}

TEST(Reference, NoKeysGivesZeroAndMinusInf) {
  const Shape s{2, 5, 0, 4, 2, 64};
  for (bool causal : {false, true}) {
    const CaseResult r = run_contiguous(s, DType::kBF16, random_inputs(s, DType::kBF16, 11), causal, std::nullopt);
    ASSERT_TRUE(r.result.ok()) << r.result.message;
    for (float o : r.out) EXPECT_EQ(o, 0.f);
    for (float l : r.lse) EXPECT_EQ(l, -INFINITY);
  }
}

TEST(Reference, WorksWithoutLse) {
  const Shape s{1, 7, 12, 2, 2, 64};
  const Inputs in = random_inputs(s, DType::kFP16, 12);
  const CaseResult r = run_contiguous(s, DType::kFP16, in, true, std::nullopt, /*with_lse=*/false);
  ASSERT_TRUE(r.result.ok()) << r.result.message;
  for (float l : r.lse) EXPECT_TRUE(std::isnan(l));  // untouched
  expect_rounded(r.out, naive_attention(s, in, true, static_cast<float>(1 / std::sqrt(64.0))).out, DType::kFP16, "out");
}

// batch == 0 (or seqlen_q == 0): a no-op that must not touch out or lse.
TEST(Reference, EmptyProblemIsNoOp) {
  for (const Shape& s : {Shape{0, 4, 4, 2, 2, 64}, Shape{2, 0, 4, 2, 2, 64}}) {
    std::vector<uint8_t> q(64), k(4 * 2 * 64 * 2 * 2), v(k.size()), out(256);
    poison(out);
    std::vector<float> lse(8, 7.f);
    ForwardArgs a;
    a.q = make_tensor(q.data(), DType::kBF16, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
    a.k = make_tensor(k.data(), DType::kBF16, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
    a.v = make_tensor(v.data(), DType::kBF16, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
    a.out = make_tensor(out.data(), DType::kBF16, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
    a.lse = make_tensor(lse.data(), DType::kFP32, s.batch, s.heads_q, s.seqlen_q);
    const Result r = forward_cpu(a);
    ASSERT_TRUE(r.ok()) << r.message;
    for (uint8_t byte : out) ASSERT_EQ(byte, 0xFF);
    for (float l : lse) ASSERT_EQ(l, 7.f);
  }
}

// ---- strided views --------------------------------------------------------------------------------

// q, k, v as views into one packed (batch, seq, 3, heads, head_dim) buffer; out head-major
// (batch, heads, seq, head_dim) with 8 padding elements per row that must stay untouched.
TEST(Reference, StridedViews) {
  const Shape s{2, 13, 13, 3, 3, 64};
  const DType t = DType::kBF16;
  const Inputs in = random_inputs(s, t, 13);
  const int64_t b = s.batch, n = s.seqlen_q, h = s.heads_q, d = s.head_dim;
  std::vector<float> packed(size_t(b * n * 3 * h * d));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t c = 0; c < d; ++c) {
          const size_t dense = size_t(((bi * n + i) * h + hi) * d + c);
          const size_t base = size_t((((bi * n + i) * 3) * h + hi) * d + c);
          packed[base] = in.q[dense];
          packed[base + size_t(h * d)] = in.k[dense];
          packed[base + size_t(2 * h * d)] = in.v[dense];
        }
  std::vector<uint8_t> qkv = encode(packed, t);
  const int64_t row_pad = d + 8;
  std::vector<uint8_t> out(size_t(b * h * n * row_pad) * 2);
  poison(out);
  std::vector<float> lse(size_t(b * h * n));

  auto view = [&](int which) {
    TensorRef r = make_tensor(qkv.data() + size_t(which * h * d) * 2, t, b, n, h, d);
    r.strides[0] = n * 3 * h * d;
    r.strides[1] = 3 * h * d;
    r.strides[2] = d;
    return r;
  };
  ForwardArgs a;
  a.q = view(0);
  a.k = view(1);
  a.v = view(2);
  a.out = make_tensor(out.data(), t, b, n, h, d);
  a.out.strides[0] = h * n * row_pad;
  a.out.strides[1] = row_pad;
  a.out.strides[2] = n * row_pad;
  a.lse = make_tensor(lse.data(), DType::kFP32, b, h, n);
  a.causal = true;
  const Result r = forward_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;

  const std::vector<float> all = decode(out.data(), out.size() / 2, t);
  std::vector<float> got(size_t(b * n * h * d));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < n; ++i) {
        const size_t row = size_t(((bi * h + hi) * n + i) * row_pad);
        for (int64_t c = 0; c < d; ++c) got[size_t(((bi * n + i) * h + hi) * d + c)] = all[row + size_t(c)];
        for (int64_t c = d; c < row_pad; ++c) EXPECT_TRUE(std::isnan(all[row + size_t(c)])) << "padding written";
      }
  const Expected e = naive_attention(s, in, true, static_cast<float>(1 / std::sqrt(double(d))));
  expect_rounded(got, e.out, t, "out");
  expect_rounded(lse, e.lse, DType::kFP32, "lse");
}

// Leading strides of zero broadcast one K/V head row to every batch; the CPU backend needs no
// alignment, so a q view starting one element into its buffer works too.
TEST(Reference, BroadcastAndUnalignedViews) {
  const Shape s{3, 6, 10, 2, 1, 64};
  const DType t = DType::kFP16;
  Inputs in = random_inputs(s, t, 14);
  // Make K/V identical across the batch, as the zero batch stride will present them.
  const size_t per_batch = size_t(s.seqlen_k * s.heads_kv * s.head_dim);
  for (int64_t bi = 1; bi < s.batch; ++bi)
    for (size_t e = 0; e < per_batch; ++e) {
      in.k[bi * per_batch + e] = in.k[e];
      in.v[bi * per_batch + e] = in.v[e];
    }
  std::vector<float> q_shifted(in.q.size() + 1, 0.f);
  std::copy(in.q.begin(), in.q.end(), q_shifted.begin() + 1);
  std::vector<uint8_t> q = encode(q_shifted, t), k = encode(in.k, t), v = encode(in.v, t);
  std::vector<uint8_t> out(in.q.size() * 2);
  ForwardArgs a;
  a.q = make_tensor(q.data() + 2, t, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  a.k = make_tensor(k.data(), t, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
  a.v = make_tensor(v.data(), t, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
  a.k.strides[0] = 0;
  a.v.strides[0] = 0;
  a.out = make_tensor(out.data(), t, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  const Result r = forward_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;
  const Expected e = naive_attention(s, in, false, static_cast<float>(1 / std::sqrt(64.0)));
  expect_rounded(decode(out.data(), in.q.size(), t), e.out, t, "out");
}

// ---- the C ABI ------------------------------------------------------------------------------------

TEST(Reference, ThroughCAbi) {
  const Shape s{2, 10, 14, 4, 2, 64};
  const DType t = DType::kBF16;
  const Inputs in = random_inputs(s, t, 15);
  std::vector<uint8_t> q = encode(in.q, t), k = encode(in.k, t), v = encode(in.v, t);
  std::vector<uint8_t> out(in.q.size() * 2);
  poison(out);
  std::vector<float> lse(size_t(s.batch * s.heads_q * s.seqlen_q));
  auto c_tensor = [](void* data, int32_t dtype, std::initializer_list<int64_t> sizes) {
    hopattn_tensor c{};
    c.data = data;
    c.dtype = dtype;
    c.ndim = static_cast<int32_t>(sizes.size());
    int i = 0;
    for (int64_t sz : sizes) c.sizes[i++] = sz;
    int64_t stride = 1;
    for (int j = c.ndim - 1; j >= 0; --j) {
      c.strides[j] = stride;
      stride *= c.sizes[j];
    }
    return c;
  };
  hopattn_fwd_args a{};
  a.q = c_tensor(q.data(), HOPATTN_BF16, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
  a.k = c_tensor(k.data(), HOPATTN_BF16, {s.batch, s.seqlen_k, s.heads_kv, s.head_dim});
  a.v = c_tensor(v.data(), HOPATTN_BF16, {s.batch, s.seqlen_k, s.heads_kv, s.head_dim});
  a.out = c_tensor(out.data(), HOPATTN_BF16, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
  a.lse = c_tensor(lse.data(), HOPATTN_FP32, {s.batch, s.heads_q, s.seqlen_q});
  a.causal = 1;
  a.has_softmax_scale = 1;
  a.softmax_scale = 0.2f;
  ASSERT_EQ(hopattn_forward_cpu(&a), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");
  const Expected e = naive_attention(s, in, true, 0.2f);
  expect_rounded(decode(out.data(), in.q.size(), t), e.out, t, "out");
  expect_rounded(lse, e.lse, DType::kFP32, "lse");
}

// ---- the test helpers themselves ------------------------------------------------------------------

TEST(TestUtil, RoundToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(65504.f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.f), 0x7c00);                  // tie past the max: inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.f, -25)), 0x0000);      // tie to even (zero)
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.f, -24));
  EXPECT_TRUE(std::isnan(bf16_to_float(0xFFFF)) && std::isnan(fp16_to_float(0xFFFF)));
  EXPECT_DOUBLE_EQ(rel_l2_error({1.f, 2.f}, {1.f, 2.f}), 0.0);
  EXPECT_NEAR(rel_l2_error({3.f, 4.f}, {0.f, 8.f}), 5.0 / 8.0, 1e-12);
}

}  // namespace
}  // namespace hopattn::test
