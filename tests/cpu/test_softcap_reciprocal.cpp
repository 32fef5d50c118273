// The softcap forward's reciprocal on the FMA pipe (sm90/ws/reciprocal.hpp), run on the host: its
// relative error over the range the kernel feeds it (d = 1 + e^(2y) in [1, 2^64]), and the tanh the
// kernel builds from it (1 - 2 / d) against std::tanh, as accurate as the MUFU form's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sm90/ws/reciprocal.hpp"

namespace hopattn::test {
namespace {

using sm90::ws::reciprocal_on_fma;

TEST(SoftcapReciprocal, RelativeErrorBelow1e7OverTheKernelsRange) {
  double worst = 0, worst_d = 0;
  auto check = [&](float d) {
    const double err = std::abs(double(reciprocal_on_fma(d)) * double(d) - 1.0);
    if (err > worst) worst = err, worst_d = d;
  };
  for (int i = 0; i <= 200000; ++i) check(1.f + float(i) / 200000.f);  // one binade densely
  for (int i = 0; i <= 400000; ++i) check(std::exp2(64.f * float(i) / 400000.f));  // every binade
  // 7.6e-8 measured (a float's own rounding is up to 6e-8); a dropped step or another seed constant
  // gives 6.6e-6 or more.
  EXPECT_LT(worst, 1e-7) << "at d = " << worst_d;
}

TEST(SoftcapReciprocal, TanhAsAccurateAsTheMufuForm) {
  // The kernel's tanh(y) = 1 - 2 / (1 + e), e = 2^(2 y log2 e) clamped at 2^64 (Softcap::on_fma),
  // with the exponential taken exactly here: only the reciprocal's error remains.
  double worst = 0;
  for (int i = -400000; i <= 400000; ++i) {
    const double y = 20.0 * i / 400000.0;
    const float z = std::fmin(float(2.0 * y * 1.4426950408889634), 64.f);
    const float d = 1.f + std::exp2(z);
    const float t = std::fmaf(-2.f, reciprocal_on_fma(d), 1.f);
    worst = std::fmax(worst, std::abs(double(t) - std::tanh(y)));
  }
  EXPECT_LT(worst, 3e-7);  // 2.1e-7; the MUFU.RCP form's 1.8e-7
}

TEST(SoftcapReciprocal, NegatedFormIsTheExactNegation) {
  // The recip-score form (Softcap::neg_recip_on_fma) takes the sign in the last FFMA's operands;
  // round-to-nearest is symmetric, so that is -reciprocal_on_fma(d) bit for bit.
  for (int i = 0; i <= 100000; ++i) {
    const float d = std::exp2(64.f * float(i) / 100000.f);
    const float neg = sm90::ws::reciprocal_on_fma<true>(d), pos = reciprocal_on_fma(d);
    ASSERT_EQ(std::signbit(neg), !std::signbit(pos)) << "d = " << d;
    ASSERT_EQ(neg, -pos) << "d = " << d;
  }
}

TEST(SoftcapReciprocal, NanStaysNan) {
  EXPECT_TRUE(std::isnan(reciprocal_on_fma(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace hopattn::test
