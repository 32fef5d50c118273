// The CPU backward reference (issue 5 groundwork) against central finite differences of
// L = sum(dout * out) through the CPU forward reference, on small fp32 problems: GQA (dK/dV summed
// over a group), causal with seqlen_q > seqlen_k (rows that see no key), and non-causal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

struct Shape {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal;
  int64_t window_left = -1, window_right = -1;  // normalised (causal: right 0)
  float softcap = 0.f;
};

void set_contiguous(int64_t (&stride)[3], int64_t s, int64_t h, int64_t d) {
  stride[0] = s * h * d;
  stride[1] = h * d;
  stride[2] = d;
}

// Contiguous fp32 problem over q, k, v (out left for the caller).
AttnProblem make_problem(const Shape& sh, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v) {
  AttnProblem p;
  p.batch = sh.b, p.seqlen_q = sh.sq, p.seqlen_k = sh.sk, p.heads_q = sh.hq, p.heads_kv = sh.hkv, p.head_dim = sh.d;
  p.dtype = DType::kFP32;
  p.causal = sh.causal;
  p.window_left = sh.window_left;
  p.window_right = sh.causal ? 0 : sh.window_right;
  p.softcap = sh.softcap;
  p.scale = 0.7f;
  p.q = q.data(), p.k = k.data(), p.v = v.data();
  set_contiguous(p.q_stride, sh.sq, sh.hq, sh.d);
  set_contiguous(p.o_stride, sh.sq, sh.hq, sh.d);
  set_contiguous(p.k_stride, sh.sk, sh.hkv, sh.d);
  set_contiguous(p.v_stride, sh.sk, sh.hkv, sh.d);
  return p;
}

double loss(const Shape& sh, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
            const std::vector<float>& dout) {
  std::vector<float> out(q.size());
  AttnProblem p = make_problem(sh, q, k, v);
  p.out = out.data();
  forward_cpu(p);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += double(out[i]) * dout[i];
  return l;
}

class BackwardReference : public ::testing::TestWithParam<Shape> {};

TEST_P(BackwardReference, MatchesFiniteDifferences) {
  const Shape sh = GetParam();
  std::mt19937 rng(42);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto randn = [&](int64_t count) {
    std::vector<float> x(static_cast<size_t>(count));
    for (float& e : x) e = n01(rng);
    return x;
  };
  std::vector<float> q = randn(sh.b * sh.sq * sh.hq * sh.d), k = randn(sh.b * sh.sk * sh.hkv * sh.d),
                     v = randn(sh.b * sh.sk * sh.hkv * sh.d), dout = randn(sh.b * sh.sq * sh.hq * sh.d);
  std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);

  AttnBackwardProblem bp;
  bp.fwd = make_problem(sh, q, k, v);
  bp.dout = dout.data(), bp.dq = dq.data(), bp.dk = dk.data(), bp.dv = dv.data();
  set_contiguous(bp.do_stride, sh.sq, sh.hq, sh.d);
  set_contiguous(bp.dq_stride, sh.sq, sh.hq, sh.d);
  set_contiguous(bp.dk_stride, sh.sk, sh.hkv, sh.d);
  set_contiguous(bp.dv_stride, sh.sk, sh.hkv, sh.d);
  backward_cpu(bp);

  // Central differences, every element of q, k and v.
  constexpr float kStep = 1e-2f;
  auto check = [&](std::vector<float>& x, const std::vector<float>& grad, const char* name) {
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      x[i] = saved + kStep;
      const double up = loss(sh, q, k, v, dout);
      x[i] = saved - kStep;
      const double down = loss(sh, q, k, v, dout);
      x[i] = saved;
      const double fd = (up - down) / (2.0 * kStep);
      ASSERT_TRUE(std::isfinite(grad[i])) << name << "[" << i << "] not written";
      worst = std::max(worst, std::fabs(fd - grad[i]) / (1.0 + std::fabs(fd)));
    }
    EXPECT_LT(worst, 2e-3) << name;
  };
  check(q, dq, "dq");
  check(k, dk, "dk");
  check(v, dv, "dv");

  // Rows that see no key (causal, seqlen_q > seqlen_k) get dq = 0 exactly.
  if (sh.causal && sh.sq > sh.sk) {
    for (int64_t c = 0; c < sh.d; ++c) EXPECT_EQ(dq[static_cast<size_t>(c)], 0.f);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackwardReference,
                         ::testing::Values(Shape{2, 5, 7, 4, 2, 8, false}, Shape{1, 6, 6, 2, 2, 8, true},
                                           Shape{2, 9, 4, 4, 1, 8, true}, Shape{1, 3, 11, 3, 1, 16, true},
                                           // Sliding windows: both sides, left only with causal, right only.
                                           Shape{1, 9, 12, 2, 1, 8, false, 2, 1}, Shape{2, 8, 8, 2, 2, 8, true, 3, 0},
                                           Shape{1, 10, 6, 2, 1, 8, false, -1, 0},
                                           // Softcap (scale 0.7 on inputs of a few units: the cap bends the scores).
                                           Shape{1, 7, 9, 2, 1, 8, false, -1, -1, 1.5f}, Shape{2, 8, 8, 2, 2, 8, true, 4, 0, 0.8f}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           const Shape& s = info.param;
                           std::string w;
                           if (s.window_left >= 0 || s.window_right >= 0)
                             w = "_w" + std::to_string(s.window_left + 1) + "_" + std::to_string(s.window_right + 1);
                           if (s.softcap > 0) w += "_softcap";
                           return "q" + std::to_string(s.sq) + "_k" + std::to_string(s.sk) + "_h" +
                                  std::to_string(s.hq) + "x" + std::to_string(s.hkv) + (s.causal ? "_causal" : "_full") + w;
                         });

}  // namespace
}  // namespace hopattn::reference
