// The softcap forward without a running max (sm90/ws/fixed_max.hpp): which caps may take it, and
// the softmax it runs, modelled on the host in the kernel's float arithmetic (ex2 flushing results
// below 2^-126 to zero, as ex2.approx.ftz does), against a double-precision softmax of the capped
// scores. The GPU side (test_softcap.py's very-negative rows, the Softcap gtests) runs the kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "sm90/ws/fixed_max.hpp"

namespace hopattn::test {
namespace {

using sm90::ws::fixed_max_bias;
using sm90::ws::kFixedMaxMostBias;
using sm90::ws::recip_score_scale_log2;
using sm90::ws::softcap_fixed_max_fits;

TEST(SoftcapFixedMax, CapsUpTo54p7Fit) {
  for (float cap : {0.5f, 1.f, 10.f, 30.f, 50.f, 54.7f}) EXPECT_TRUE(softcap_fixed_max_fits(cap)) << cap;
  for (float cap : {54.8f, 60.f, 100.f, 1e30f, std::numeric_limits<float>::infinity()})
    EXPECT_FALSE(softcap_fixed_max_fits(cap)) << cap;
  for (float cap : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN()}) EXPECT_FALSE(softcap_fixed_max_fits(cap)) << cap;
}

TEST(SoftcapFixedMax, EveryFittingCapKeepsTheSmallestPNormalAndTheBiasBounded) {
  // Walk the caps up to the first that does not fit: below it, the smallest p (a score of -1, i.e.
  // a capped score of -softcap) is 2^(bias - scale_log2) >= 2^-124 and the bias at most 34.
  float cap = 0.25f, last_fit = 0.f;
  for (; cap < 80.f; cap = std::nextafter(cap, 100.f) + cap * 1e-4f) {
    if (!softcap_fixed_max_fits(cap)) break;
    last_fit = cap;
    const float sl2 = recip_score_scale_log2(cap), bias = fixed_max_bias(sl2);
    ASSERT_GE(bias - sl2, -124.f) << cap;
    ASSERT_LE(bias, kFixedMaxMostBias) << cap;
    ASSERT_GE(bias, 0.f) << cap;
  }
  EXPECT_GT(last_fit, 54.7f);
  EXPECT_LT(last_fit, 54.8f);
  EXPECT_FALSE(softcap_fixed_max_fits(cap));
}

// One row through the fixed-max softmax as the kernel computes it: scores -r = -1 / (1 + e^(2y)),
// p = ex2(-r * scale_log2 + bias), P = bf16(p) as the P V GEMM reads it, O = bf16(acc / norm) as
// the epilogue stores it with norm = the sum of P (the mainloop's kNormOnTc, on the tensor cores;
// tc_norm = false models the fp32 sum of p that normalised O before), and
// lse = (-bias / scale_log2) * (2 softcap) + log(fp32 sum of p) + softcap.
struct RowResult {
  double lse, out;  // out: the row's softmax-weighted mean of v, rounded to bf16 as stored
};
float ex2_ftz(float x) {
  const float p = std::exp2(x);
  return p < std::ldexp(1.f, -126) ? 0.f : p;
}
float round_bf16(float x) {  // round to nearest even, as cvt.rn.bf16x2.f32
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}
RowResult fixed_max_row(const std::vector<float>& y, const std::vector<float>& v, float softcap, bool tc_norm = true) {
  const float sl2 = recip_score_scale_log2(softcap), bias = fixed_max_bias(sl2), row_max = -bias / sl2;
  float sum = 0.f, sum16 = 0.f, acc = 0.f;
  for (size_t i = 0; i < y.size(); ++i) {
    const float neg_r = -1.f / (1.f + std::exp2(y[i] * 2.f * 1.4426950408889634f));
    const float p = ex2_ftz(std::fma(neg_r, sl2, bias)), p16 = round_bf16(p);
    sum += p;
    sum16 += p16;
    acc += p16 * round_bf16(v[i]);
  }
  if (!(sum > 0.f)) return {-INFINITY, 0.0};
  const float norm = tc_norm ? sum16 : sum;
  return {double(row_max) * (2.0 * softcap) + std::log(double(sum)) + softcap, double(round_bf16(acc * (1.f / norm)))};
}
RowResult reference_row(const std::vector<float>& y, const std::vector<float>& v, double softcap) {
  double m = -INFINITY;
  for (float yi : y) m = std::fmax(m, softcap * std::tanh(double(yi)));
  double sum = 0, acc = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double p = std::exp(softcap * std::tanh(double(y[i])) - m);
    sum += p;
    acc += p * v[i];
  }
  return {m + std::log(sum), acc / sum};
}

TEST(SoftcapFixedMax, HostModelMatchesTheSoftmaxOfTheCappedScores) {
  std::mt19937 rng(48);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float cap : {1.f, 30.f, 50.f, 54.7f}) {
    for (float spread : {0.05f, 1.f, 4.f}) {
      // y = score / softcap; spread 4 saturates most scores at +-softcap, 0.05 keeps them linear.
      std::vector<float> y(4096), v(4096);
      for (size_t i = 0; i < y.size(); ++i) y[i] = spread * normal(rng), v[i] = normal(rng);
      const RowResult got = fixed_max_row(y, v, cap), want = reference_row(y, v, cap);
      EXPECT_NEAR(got.lse, want.lse, 1e-4 * std::fmax(1.0, std::abs(want.lse))) << "cap " << cap << " spread " << spread;
      // O is stored in bf16: its rounding (2^-9 of |out|) on top of the softmax's error.
      EXPECT_NEAR(got.out, want.out, 2e-4 + std::abs(want.out) * 0x1p-8) << "cap " << cap << " spread " << spread;
    }
  }
}

TEST(SoftcapFixedMax, RowOfOnlyMostNegativeScoresIsNotEmpty) {
  // Every score at -softcap (y -> -inf): the smallest p. At the limit cap it must stay nonzero, so
  // the row keeps lse = -softcap + log(keys) rather than turning into an empty row.
  for (float cap : {30.f, 50.f, 54.7f}) {
    const std::vector<float> y(1000, -40.f), v(1000, 0.5f);
    const RowResult got = fixed_max_row(y, v, cap);
    EXPECT_NEAR(got.lse, -cap + std::log(1000.0), 1e-3) << cap;
    EXPECT_NEAR(got.out, 0.5, 1e-6) << cap;
  }
}

TEST(SoftcapFixedMax, RowWithOneKeyGivesItsValueExactly) {
  // A row that sees one key (the first row of a causal sequence; a short sequence's rows in a
  // window): the softmax is 1 and O = v, and the backward's D = rowsum(dO O) equals dP, so dq is 0.
  // That holds only if O is normalised by the sum of the same 16-bit P the P V GEMM multiplies:
  // by the fp32 sum, O = v bf16(p) / p, up to 2^-9 off, which the stored bf16 O keeps for some v.
  std::mt19937 rng(49);
  std::normal_distribution<float> normal(0.f, 1.f);
  int fp32_norm_off = 0;
  for (float cap : {1.f, 30.f, 54.7f}) {
    for (int i = 0; i < 2000; ++i) {
      const std::vector<float> y{3.f * normal(rng)}, v{round_bf16(4.f * normal(rng))};
      const RowResult got = fixed_max_row(y, v, cap);
      ASSERT_EQ(got.out, double(v[0])) << "cap " << cap << " y " << y[0] << " v " << v[0];
      fp32_norm_off += fixed_max_row(y, v, cap, false).out != double(v[0]);
    }
  }
  EXPECT_GT(fp32_norm_off, 0);  // the fp32 normaliser's deviation (641 of 6000), which this test exists to catch
}

}  // namespace
}  // namespace hopattn::test
