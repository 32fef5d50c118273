// The softcap forward without a running max (FwdWsConfig::kSoftcapFixedMax, OnlineSoftmax's
// kFixedMax): when the softmax itself runs on the capped scores' recip form -r in [-1, 0]
// (kSoftcapRecipScore, scale 2 softcap), every score is bounded above by 0, so a row's running max
// can be replaced by a constant and p = exp2(-r * scale_log2 + bias) needs no max, no max shuffles
// and no rescale of O. Host and device: the launcher decides with the same float arithmetic the
// kernel's parameters are built with (FwdMainloop::make_params), and the CPU tests pin the limit.
#pragma once

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90::ws {

// The exponent multiplier of the recip-score softmax, scale 2 softcap in log2 units, computed as
// make_params computes it.
HOPATTN_HOST_DEVICE inline float recip_score_scale_log2(float softcap) { return (2.f * softcap) * 1.4426950408889634f; }

// p = 2^(-r * scale_log2 + bias) lies in [2^(bias - scale_log2), 2^bias]. ex2.approx.ftz flushes
// results below 2^-126 to zero, which would turn a row whose every score sits near -softcap into
// an "empty" row (sum 0, O = 0, lse = -inf), so the bias lifts the smallest p to 2^-124 (two
// binades clear of the flush, so that no rounding of the exponent's FFMA or of ex2 reaches it).
// It is no larger than that: every power of two of bias multiplies O's fp32 accumulator, bounded
// by keys * 2^bias * max|v|.
inline constexpr float kFixedMaxSmallestPLog2 = -124.f;
HOPATTN_HOST_DEVICE inline float fixed_max_bias(float scale_log2) {
  return scale_log2 + kFixedMaxSmallestPLog2 > 0.f ? scale_log2 + kFixedMaxSmallestPLog2 : 0.f;
}

// The most bias the fixed-max kernels accept: with 2^34 the accumulator's bound keys * 2^34 * max|v|
// stays below fp32's 3.4e38 for |v| < 1.9e28 / keys, far beyond any 16-bit V in practice, and the
// limit (scale_log2 <= 158) covers softcap <= 54.7, Gemma 2's 50 and 30 among them.
inline constexpr float kFixedMaxMostBias = 34.f;

// Whether a softcap may run the fixed-max kernels; larger caps (and NaN) take the running-max ones.
HOPATTN_HOST_DEVICE inline bool softcap_fixed_max_fits(float softcap) {
  return softcap > 0.f && fixed_max_bias(recip_score_scale_log2(softcap)) <= kFixedMaxMostBias;
}

}  // namespace hopattn::sm90::ws
