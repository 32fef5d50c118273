// Online softmax over the rows of a WGMMA score fragment, in base 2: p = 2^(s*scale*log2e - m'),
// one FFMA + one MUFU.EX2 per score. Row max and sum stay in registers; the four threads of a quad
// that share a row combine their maxima by shuffles, sums only once at the end.
#pragma once

#include <cute/tensor.hpp>

#include <cmath>
#include <utility>

#include "sm90/ws/fixed_max.hpp"
#include "sm90/ws/reciprocal.hpp"

namespace hopattn::sm90::ws {

// exp2f without -ftz adds denormal range handling around MUFU.EX2; the results feed a 16-bit
// P and an fp32 sum, where denormals do not matter, so use the bare instruction.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Softcapping: x -> out * tanh(x * in), with in = scale / softcap and out = softcap / scale, so that
// the softmax's scale afterwards yields softcap * tanh(scale * x / softcap). tanh as
// 1 - 2 / (1 + e^(2y)) from ex2.approx (relative error 2^-22) rather than tanh.approx.f32 (2^-11):
// an absolute error of 5e-4 in tanh is 0.025 in a score at softcap 50, 2.5% in its probability.
// `in2` = 2 * log2(e) * in. Saturates correctly: e = inf gives 1, e = 0 gives -1.
struct Softcap {
  float in2, out;
  __device__ __forceinline__ float operator()(float x) const {
    const float e = fast_exp2(x * in2);
    return out * (1.f - __fdividef(2.f, 1.f + e));
  }
  // The same as out - 2 out / (1 + e): one FFMA after the reciprocal instead of an FFMA and an FMUL.
  // The forward d64/d128 kernels' form; the d256 forward read 1.2% slower with it and the d64
  // backward 0.6% (session 47, H100), so they keep operator().
  __device__ __forceinline__ float one_ffma(float x) const {
    return from_reciprocal(__fdividef(1.f, 1.f + fast_exp2(x * in2)));
  }
  // The same value with the reciprocal on the FMA pipe instead of MUFU.RCP, for a share of the scores
  // (FwdWsConfig::kSoftcapRcpOnFmaOf5). The cap costs two MUFU operations per score beside the
  // softmax's ex2, and moving some reciprocals to the FMA pipe trades MUFU time for issue slots.
  // 1 / d by reciprocal_on_fma (relative error 7.6e-8 for d = 1 + e in [1, 2^64]): tanh within
  // 2.1e-7 of the MUFU form's 1.8e-7 (tests/cpu/test_softcap_reciprocal.cpp). The input is clamped
  // at 64 so that d stays in that range; min.NaN keeps a NaN score NaN.
  __device__ __forceinline__ float on_fma(float x) const {
    float z;
    asm("min.NaN.f32 %0, %1, 0f42800000;" : "=f"(z) : "f"(x * in2));  // min(x * in2, 64)
    return from_reciprocal(reciprocal_on_fma(1.f + fast_exp2(z)));
  }
  // out * tanh(y) = out - 2 out r from r = 1 / (1 + e^(2y)): one FFMA.
  __device__ __forceinline__ float from_reciprocal(float r) const { return fmaf(r, -2.f * out, out); }
  // The forward's score form (kSoftcapRecipScore): -1 / (1 + e) instead of out * tanh. The capped
  // score is softcap * tanh(y) = softcap - 2 softcap r with r = 1 / (1 + e^(2y)), an increasing
  // affine function of -r, so the softmax can run on -r with scale 2 softcap (and lse gets + softcap
  // back in finalize): the cap's last FFMA per score disappears into the softmax's own.
  __device__ __forceinline__ float neg_recip(float x) const {
    return __fdividef(1.f, -1.f - fast_exp2(x * in2));  // the sign in the FADD: no negation after the rcp
  }
  __device__ __forceinline__ float neg_recip_on_fma(float x) const {  // on_fma's reciprocal, negated
    float z;
    asm("min.NaN.f32 %0, %1, 0f42800000;" : "=f"(z) : "f"(x * in2));
    return reciprocal_on_fma<true>(1.f + fast_exp2(z));  // negated in the last FFMA's operands
  }
  // The parameters for a softcap and softmax scale; {0, 0} (unused) when softcap is 0.
  static Softcap make(float softcap, float scale) {
    if (!(softcap > 0.f)) return {0.f, 0.f};
    return {2.f * 1.4426950408889634f * scale / softcap, softcap / scale};
  }
};

// Threads 4k..4k+3 of a warp hold the same accumulator rows (WGMMA C layout).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Row reductions over one thread's scores of row r, as kChains independent chains: a thread holds
// kBlockN/4 scores per row (44 at N=176), and one dependent FMNMX/FADD chain over them would stall
// on each ~4-cycle latency with only two consumer warps per scheduler to hide it.
template <class Scores>
constexpr int reduction_chains() {
  constexpr int kCols = decltype(cute::size<1>(std::declval<Scores&>()))::value;
  return kCols % 4 == 0 ? 4 : (kCols % 2 == 0 ? 2 : 1);
}

// max(init, s(r, :)) over this thread's columns (not yet over the quad).
template <class Scores>
__device__ __forceinline__ float thread_row_max(const Scores& s_rc, int r, float init) {
  constexpr int kCols = decltype(cute::size<1>(s_rc))::value, kChains = reduction_chains<Scores>();
  float mc[kChains];
  CUTE_UNROLL
  for (int i = 0; i < kChains; ++i) mc[i] = init;
  CUTE_UNROLL
  for (int c = 0; c < kCols; ++c) mc[c % kChains] = fmaxf(mc[c % kChains], s_rc(r, c));
  float m = mc[0];
  CUTE_UNROLL
  for (int i = 1; i < kChains; ++i) m = fmaxf(m, mc[i]);
  return m;
}

// s(r, :) = exp2(s * mul - offset) in place (one FFMA + one EX2 each); returns this thread's sum.
template <class Scores>
__device__ __forceinline__ float exp2_row_and_sum(Scores& s_rc, int r, float mul, float offset) {
  constexpr int kCols = decltype(cute::size<1>(s_rc))::value, kChains = reduction_chains<Scores>();
  float sc[kChains] = {};
  CUTE_UNROLL
  for (int c = 0; c < kCols; ++c) {
    const float p = fast_exp2(fmaf(s_rc(r, c), mul, -offset));
    s_rc(r, c) = p;
    sc[c % kChains] += p;
  }
  float sum = sc[0];
  CUTE_UNROLL
  for (int i = 1; i < kChains; ++i) sum += sc[i];
  return sum;
}

// kRows: accumulator rows held by one thread (2 per 64-row warpgroup tile).
// kFixedMax (FwdWsConfig::kSoftcapFixedMax, ws/fixed_max.hpp): the scores are bounded above by 0,
// so p = exp2(s * scale_log2 + bias) needs no running max; row_max holds the constant
// -bias / scale_log2 that makes finalize's lse right, and O is never rescaled.
template <int kRows, bool kFixedMax = false>
struct OnlineSoftmax {
  float row_max[kRows];  // running max of raw (unscaled) scores; -inf until a key is seen
  float row_sum[kRows];  // this thread's partial sum of p, relative to row_max
  // kFixedMax: O's normaliser, the row sums of the 16-bit P that the P V GEMM multiplies, one per
  // row. Without a running max every p is rounded to 16 bits for P V (with one, the row's largest
  // is exp2(0) = 1, exact), so normalising by the fp32 sum left O = v (1 + d), |d| <= 2^-9, on a
  // row that sees one key, and the backward's dq, exactly 0 there, came out at ~1e-4 of |dout|
  // (session 49). The mainloop sums the rounded P on the tensor cores (FwdMainloop's
  // kNormOnTc) and adds it here; the lse keeps the fp32 sum.
  float norm_sum[kFixedMax ? kRows : 1] = {};
  float scale_log2;      // softmax scale * log2(e)

  __device__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = kFixedMax ? -fixed_max_bias(scale_log2_) / scale_log2_ : -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Turns scores s into p = exp2(s*scale_log2 - max*scale_log2) in place, updates the running
  // max and sum, and returns in factor[] what the O rows must be multiplied by (1 when the max
  // did not move). Does not touch O, so that the PV GEMM of the previous block may still be in
  // flight (the overlapped schedule rescales O only after waiting for it).
  template <class Scores>
  __device__ __forceinline__ void update(Scores& s_rc, float (&factor)[kRows]) {
    using namespace cute;
    static_assert(decltype(size<0>(s_rc))::value == kRows);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      if constexpr (kFixedMax) {  // p = exp2(s * scale_log2 + bias): no max, O never rescaled
        factor[r] = 1.f;
        row_sum[r] += exp2_row_and_sum(s_rc, r, scale_log2, row_max[r] * scale_log2);  // -bias, as lse sees it
      } else {
        const float m = quad_max(thread_row_max(s_rc, r, row_max[r]));
        // A row that has seen no key yet keeps max -inf: use 0 as the exponent offset so that
        // exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN, and leave O's factor at 1.
        const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
        factor[r] = m == -INFINITY ? 1.f : fast_exp2((row_max[r] - m) * scale_log2);
        row_max[r] = m;
        row_sum[r] = row_sum[r] * factor[r] + exp2_row_and_sum(s_rc, r, scale_log2, m_scaled);
      }
    }
  }

  // O rows *= factor. Skipped by the whole warp when no row of it changed its max, which after
  // the first few key blocks is the common case.
  template <class Acc>
  __device__ __forceinline__ void rescale(Acc& o_rc, const float (&factor)[kRows]) const {
    if constexpr (!kFixedMax) rescale_rows(o_rc, factor);  // kFixedMax: the factor is always 1
  }
  template <class Acc>
  __device__ __forceinline__ static void rescale_rows(Acc& o_rc, const float (&factor)[kRows]) {
    using namespace cute;
    bool changed = false;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) changed |= factor[r] != 1.f;
    if (!__any_sync(0xffffffffu, changed)) return;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= factor[r];
    }
  }

  // Final normalisation: O rows *= 1/sum, and lse (natural log) per row. A row that saw no key
  // (sum 0) gets O = 0 and lse = -inf, never NaN.
  template <class Acc>
  __device__ __forceinline__ void finalize(Acc& o_rc, float softmax_scale, float (&lse)[kRows]) {
    using namespace cute;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = !(sum > 0.f);
      float norm = sum;
      if constexpr (kFixedMax) norm = norm_sum[r];  // the 16-bit P's sum (the mainloop's kNormOnTc)
      const float inv = empty ? 0.f : 1.f / norm;
      lse[r] = empty ? -INFINITY : row_max[r] * softmax_scale + logf(sum);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= inv;
    }
  }
};

// The FP8 kernel's softmax: its scores are q_e4m3 . k_e4m3, and the true score is that times
// q_descale (per query tile) * k_descale (per key block), so the exponent multiplier changes from
// one key block to the next. The running max is therefore kept already scaled (log2 units):
// max(s * c) = max(s) * c for the block's c > 0, so each block still costs one FFMA + EX2 per score.
// The V descale (one per head) multiplies O once, in finalize.
//
// P leaves as 2^kPExponentBias * exp2(s - max), in (0, 256] rather than (0, 1]: e4m3 is normal only
// from 2^-6, and with diffuse attention most probabilities lie below that (a score 4 below its row's
// max gives e^-4 ~ 2^-5.8), where e4m3 keeps fewer mantissa bits (2^-9 steps). Shifted by 2^8 they
// stay normal down to 2^-14 and below the 448 limit. The row sum is taken over the same shifted P,
// so O / sum is unchanged; only lse subtracts the bias. (Simulated at b=1, s=2048, h=4, d=128 on the
// outlier inputs of bench/fp8_accuracy.py: RMSE 8.80e-3 -> 8.57e-3; exact P would give 8.47e-3.)
inline constexpr float kPExponentBias = 8.f;

template <int kRows>
struct BlockScaledSoftmax {
  float row_max[kRows];  // running max of scaled scores (log2 units); -inf until a key is seen
  float row_sum[kRows];
  float q_scale_log2;       // softmax scale * log2(e) * this tile's q descale
  const float* k_descale;   // this (batch, kv head)'s first key-block descale, or null (= 1)
  int64_t k_descale_step;   // elements between key blocks' descales (0: one per head)
  float o_scale;            // v descale

  __device__ BlockScaledSoftmax(float q_scale_log2_, const float* k_descale_, int64_t k_descale_step_, float o_scale_)
      : q_scale_log2(q_scale_log2_), k_descale(k_descale_), k_descale_step(k_descale_step_), o_scale(o_scale_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // The exponent multiplier of key block `quant_block` (a global load: call it before waiting for
  // that block's S GEMM so the latency hides under the GEMM).
  __device__ __forceinline__ float block_scale(int quant_block) const {
    return k_descale == nullptr ? q_scale_log2 : q_scale_log2 * __ldg(k_descale + quant_block * k_descale_step);
  }

  template <class Scores>
  __device__ __forceinline__ void update(Scores& s_rc, float (&factor)[kRows], float c) {
    using namespace cute;
    static_assert(decltype(size<0>(s_rc))::value == kRows);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float m = fmaxf(row_max[r], quad_max(thread_row_max(s_rc, r, -INFINITY)) * c);  // -inf * c = -inf (c > 0)
      factor[r] = m == -INFINITY ? 1.f : fast_exp2(row_max[r] - m);
      const float offset = m == -INFINITY ? 0.f : m - kPExponentBias;
      row_max[r] = m;
      row_sum[r] = row_sum[r] * factor[r] + exp2_row_and_sum(s_rc, r, c, offset);
    }
  }

  template <class Acc>
  __device__ __forceinline__ void rescale(Acc& o_rc, const float (&factor)[kRows]) const {
    OnlineSoftmax<kRows>::rescale_rows(o_rc, factor);
  }

  // O rows *= v_descale / sum; lse = ln 2 * (max - bias + log2 sum) (the sum is of the shifted P).
  // softmax_scale is already folded in.
  template <class Acc>
  __device__ __forceinline__ void finalize(Acc& o_rc, float /*softmax_scale*/, float (&lse)[kRows]) {
    using namespace cute;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = !(sum > 0.f);
      const float mul = empty ? 0.f : o_scale / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] - kPExponentBias + log2f(sum)) * 0.6931471805599453f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= mul;
    }
  }
};

}  // namespace hopattn::sm90::ws
