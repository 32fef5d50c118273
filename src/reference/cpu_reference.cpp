// The CPU reference: softmax(scale * q k^T) v per query row in double precision, two passes (max,
// then sum) so it is stable for any score range. Slow and obviously right; every other backend is
// judged against it (directly, or through the CUDA reference that is itself checked against it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

double load_element(const void* base, int64_t index, DType t) {
  const auto* bytes = static_cast<const uint8_t*>(base);
  if (t == DType::kFP32) {
    float f;
    std::memcpy(&f, bytes + index * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes + index * 2, 2);
  if (t == DType::kBF16) {  // bf16 is the upper half of an fp32
    const uint32_t x = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -24);  // subnormal / zero
  if (exponent == 31) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(static_cast<double>(mantissa | 0x400), exponent - 25);
}

// Rounds x to a binary format with `precision` significand bits (implicit bit included), smallest
// normal exponent `min_exp` (value 2^min_exp) and largest finite value `max_finite`, in one step
// from double so there is no double rounding through fp32. Ties go to even (std::nearbyint).
double round_to_format(double x, int precision, int min_exp, double max_finite) {
  if (!std::isfinite(x) || x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e with 0.5 <= |m| < 1, so the leading bit has weight 2^(e-1)
  const int quantum_exp = std::max(e - 1, min_exp) - (precision - 1);  // subnormals share min_exp's ulp
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum_exp)), quantum_exp);
  if (std::fabs(r) > max_finite) return std::copysign(HUGE_VAL, x);
  return r;
}

void store_element(void* base, int64_t index, DType t, double x) {
  auto* bytes = static_cast<uint8_t*>(base);
  if (t == DType::kFP32) {
    const float f = static_cast<float>(x);  // the C++ conversion rounds to nearest even
    std::memcpy(bytes + index * 4, &f, 4);
    return;
  }
  uint16_t h;
  if (t == DType::kBF16) {
    // Rounded to bf16's 8 significant bits, the value is exact in fp32; bf16 is its top half.
    const float f = static_cast<float>(round_to_format(x, 8, -126, 0x1.fep127));
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    h = static_cast<uint16_t>(bits >> 16);
    if (std::isnan(x)) h = 0x7fc0;
  } else {
    const double r = round_to_format(x, 11, -14, 65504.0);
    const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
    const double a = std::fabs(r);
    if (std::isnan(r)) {
      h = 0x7e00;
    } else if (std::isinf(a)) {
      h = sign | 0x7c00;
    } else if (a < 0x1p-14) {  // subnormal: a multiple of 2^-24
      h = sign | static_cast<uint16_t>(std::ldexp(a, 24));
    } else {
      int e;
      const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
      const auto mantissa = static_cast<uint16_t>(std::ldexp(m, 11) - 1024);
      h = sign | static_cast<uint16_t>((e - 1 + 15) << 10) | mantissa;
    }
  }
  std::memcpy(bytes + index * 2, &h, 2);
}

// K and V of one (batch, kv head) as dense (seqlen_k, head_dim) doubles.
void load_kv_head(const AttnProblem& p, int64_t b, int64_t kv_head, std::vector<double>& k, std::vector<double>& v) {
  const int64_t sk = p.seqlen_k, d = p.head_dim;
  k.assign(static_cast<size_t>(sk * d), 0.0);
  v.assign(static_cast<size_t>(sk * d), 0.0);
  for (int64_t j = 0; j < sk; ++j) {
    const int64_t k_row = b * p.k_stride[0] + j * p.k_stride[1] + kv_head * p.k_stride[2];
    const int64_t v_row = b * p.v_stride[0] + j * p.v_stride[1] + kv_head * p.v_stride[2];
    for (int64_t c = 0; c < d; ++c) {
      k[j * d + c] = load_element(p.k, k_row + c, p.dtype);
      v[j * d + c] = load_element(p.v, v_row + c, p.dtype);
    }
  }
}

// Scores scale * q . k_j (softcapped when softcap > 0) of one query row over its visible keys
// [kr.begin, kr.end) into s; returns their max.
double row_scores(const std::vector<double>& q, const std::vector<double>& k, KeyRange kr, int64_t d,
                  double scale, double softcap, std::vector<double>& s) {
  double max_score = -HUGE_VAL;
  for (int64_t j = kr.begin; j < kr.end; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += q[c] * k[j * d + c];
    s[j] = capped_score(scale * dot, softcap);
    max_score = std::max(max_score, s[j]);
  }
  return max_score;
}

// One (batch, kv head): converts that head's K and V to double once, then runs every query head of
// the GQA group against them. The lse of row (b, h, i) is p.lse[(b * heads_q + h) * lse_head_stride + i]:
// lse_head_stride is seqlen_q for the (batch, heads_q, seqlen_q) layout, total_q for varlen's.
void attend_kv_head(const AttnProblem& p, int64_t b, int64_t kv_head, int64_t lse_head_stride) {
  const int64_t sk = p.seqlen_k, d = p.head_dim;
  std::vector<double> k, v;
  load_kv_head(p, b, kv_head, k, v);
  const double scale = p.scale;
  std::vector<double> q(static_cast<size_t>(d)), o(static_cast<size_t>(d)), s(static_cast<size_t>(sk));
  for (int64_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      // Bottom-right aligned window (causal: keys j <= i + sk - sq): a contiguous range of keys.
      const KeyRange kr = visible_keys(i, p.seqlen_q, sk, p.window_left, p.window_right);
      const int64_t q_row = b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2];
      const int64_t o_row = b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2];
      float* lse = p.lse ? p.lse + (b * p.heads_q + h) * lse_head_stride + i : nullptr;
      if (kr.end <= kr.begin) {  // no key: define the row as 0 with lse -inf rather than 0/0
        for (int64_t c = 0; c < d; ++c) store_element(p.out, o_row + c, p.dtype, 0.0);
        if (lse) *lse = -std::numeric_limits<float>::infinity();
        continue;
      }
      for (int64_t c = 0; c < d; ++c) q[c] = load_element(p.q, q_row + c, p.dtype);
      const double max_score = row_scores(q, k, kr, d, scale, p.softcap, s);
      double sum = 0;
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = kr.begin; j < kr.end; ++j) {
        const double w = std::exp(s[j] - max_score);  // <= 1, and 1 at the max: sum >= 1
        sum += w;
        for (int64_t c = 0; c < d; ++c) o[c] += w * v[j * d + c];
      }
      for (int64_t c = 0; c < d; ++c) store_element(p.out, o_row + c, p.dtype, o[c] / sum);
      if (lse) *lse = static_cast<float>(max_score + std::log(sum));
    }
  }
}

// Backward for one (batch, kv head): the query heads of its GQA group run in turn, so dK and dV of
// this kv head are summed without sharing across threads.
void backward_kv_head(const AttnBackwardProblem& bp, int64_t b, int64_t kv_head) {
  const AttnProblem& p = bp.fwd;
  const int64_t sk = p.seqlen_k, d = p.head_dim;
  std::vector<double> dk(static_cast<size_t>(sk * d), 0.0), dv(static_cast<size_t>(sk * d), 0.0);
  std::vector<double> k, v;
  load_kv_head(p, b, kv_head, k, v);
  const double scale = p.scale;
  std::vector<double> q(static_cast<size_t>(d)), dout(static_cast<size_t>(d)), o(static_cast<size_t>(d)),
      dq(static_cast<size_t>(d)), prob(static_cast<size_t>(sk)), dcap(static_cast<size_t>(sk), 1.0);
  for (int64_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      const KeyRange kr = visible_keys(i, p.seqlen_q, sk, p.window_left, p.window_right);
      const int64_t q_row = b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2];
      const int64_t do_row = b * bp.do_stride[0] + i * bp.do_stride[1] + h * bp.do_stride[2];
      const int64_t dq_row = b * bp.dq_stride[0] + i * bp.dq_stride[1] + h * bp.dq_stride[2];
      std::fill(dq.begin(), dq.end(), 0.0);
      if (kr.end > kr.begin) {
        for (int64_t c = 0; c < d; ++c) {
          q[c] = load_element(p.q, q_row + c, p.dtype);
          dout[c] = load_element(bp.dout, do_row + c, p.dtype);
        }
        const double max_score = row_scores(q, k, kr, d, scale, p.softcap, prob);
        // Softcap: d(c tanh(x / c)) / dx = 1 - tanh^2 = 1 - (score / c)^2, x = scale * q.k.
        if (p.softcap > 0)
          for (int64_t j = kr.begin; j < kr.end; ++j) dcap[j] = 1.0 - (prob[j] / p.softcap) * (prob[j] / p.softcap);
        double sum = 0;
        for (int64_t j = kr.begin; j < kr.end; ++j) sum += (prob[j] = std::exp(prob[j] - max_score));
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = kr.begin; j < kr.end; ++j) {
          prob[j] /= sum;
          for (int64_t c = 0; c < d; ++c) o[c] += prob[j] * v[j * d + c];
        }
        double delta = 0;  // D_i = dout_i . out_i
        for (int64_t c = 0; c < d; ++c) delta += dout[c] * o[c];
        for (int64_t j = kr.begin; j < kr.end; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < d; ++c) dp += dout[c] * v[j * d + c];
          const double ds = prob[j] * (dp - delta) * dcap[j];
          for (int64_t c = 0; c < d; ++c) {
            dv[j * d + c] += prob[j] * dout[c];
            dq[c] += scale * ds * k[j * d + c];
            dk[j * d + c] += scale * ds * q[c];
          }
        }
      }
      for (int64_t c = 0; c < d; ++c) store_element(bp.dq, dq_row + c, bp.grad_dtype, dq[c]);
    }
  }
  for (int64_t j = 0; j < sk; ++j) {
    const int64_t dk_row = b * bp.dk_stride[0] + j * bp.dk_stride[1] + kv_head * bp.dk_stride[2];
    const int64_t dv_row = b * bp.dv_stride[0] + j * bp.dv_stride[1] + kv_head * bp.dv_stride[2];
    for (int64_t c = 0; c < d; ++c) {
      store_element(bp.dk, dk_row + c, bp.grad_dtype, dk[j * d + c]);
      store_element(bp.dv, dv_row + c, bp.grad_dtype, dv[j * d + c]);
    }
  }
}

// Runs fn(batch, kv_head) over every pair on up to 64 threads; pairs write disjoint outputs.
template <class Fn>
void for_each_kv_head(int64_t batch, int64_t heads_kv, Fn fn) {
  const int64_t items = batch * heads_kv;
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(items, 64));
  auto run = [&](int64_t first) {
    for (int64_t item = first; item < items; item += threads) fn(item / heads_kv, item % heads_kv);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (std::thread& t : pool) t.join();
}

}  // namespace

void backward_cpu(const AttnBackwardProblem& p) {
  // heads_q == 0 with heads_kv > 0 runs too: each kv head's group is empty, so dk = dv = 0.
  if (p.fwd.batch == 0 || p.fwd.heads_kv == 0) return;
  for_each_kv_head(p.fwd.batch, p.fwd.heads_kv, [&](int64_t b, int64_t h) { backward_kv_head(p, b, h); });
}

void forward_cpu(const AttnProblem& p) {
  if (p.empty()) return;
  // Work items are (batch, kv head) pairs; they write disjoint rows of out and lse.
  for_each_kv_head(p.batch, p.heads_kv, [&](int64_t b, int64_t h) { attend_kv_head(p, b, h, p.seqlen_q); });
}

void forward_varlen_cpu(const VarlenProblem& p) {
  if (p.empty()) return;
  const int64_t elem = static_cast<int64_t>(dtype_size(p.dtype));
  // Work items are (sequence, kv head) pairs; they write disjoint rows of out and lse. Each runs the
  // fixed-length code on a batch-1 view of its sequence: rows start at cu_seqlens[b], the token
  // stride becomes the seq stride, and the lengths (seqused when given) set the causal alignment.
  for_each_kv_head(p.batch, p.heads_kv, [&](int64_t b, int64_t kv_head) {
    const int64_t start_q = p.cu_seqlens_q[b], len_q = p.cu_seqlens_q[b + 1] - start_q;
    const int64_t start_k = p.cu_seqlens_k[b], len_k = p.cu_seqlens_k[b + 1] - start_k;
    const int64_t used_q = p.seqused_q ? p.seqused_q[b] : len_q;
    const int64_t used_k = p.seqused_k ? p.seqused_k[b] : len_k;
    AttnProblem s;
    s.batch = 1;
    s.seqlen_q = used_q;
    s.seqlen_k = used_k;
    s.heads_q = p.heads_q;
    s.heads_kv = p.heads_kv;
    s.head_dim = p.head_dim;
    s.dtype = p.dtype;
    s.causal = p.causal;
    s.scale = p.scale;
    s.window_left = p.window_left;
    s.window_right = p.window_right;
    s.softcap = p.softcap;
    s.q = static_cast<const uint8_t*>(p.q) + start_q * p.q_stride[0] * elem;
    s.k = static_cast<const uint8_t*>(p.k) + start_k * p.k_stride[0] * elem;
    s.v = static_cast<const uint8_t*>(p.v) + start_k * p.v_stride[0] * elem;
    s.out = static_cast<uint8_t*>(p.out) + start_q * p.o_stride[0] * elem;
    s.lse = p.lse ? p.lse + start_q : nullptr;
    // (token, head) strides become (batch, seq, head) ones; batch 1 never uses its batch stride.
    const auto set_strides = [](int64_t dst[3], const int64_t src[2]) {
      dst[0] = 0;
      dst[1] = src[0];
      dst[2] = src[1];
    };
    set_strides(s.q_stride, p.q_stride);
    set_strides(s.k_stride, p.k_stride);
    set_strides(s.v_stride, p.v_stride);
    set_strides(s.o_stride, p.o_stride);
    attend_kv_head(s, 0, kv_head, p.total_q);
    // Rows of the sequence beyond seqused_q: out = 0, lse = -inf (as rows that see no key).
    for (int64_t h = kv_head * p.group(); h < (kv_head + 1) * p.group(); ++h)
      for (int64_t i = used_q; i < len_q; ++i) {
        const int64_t o_row = (start_q + i) * p.o_stride[0] + h * p.o_stride[1];
        for (int64_t c = 0; c < p.head_dim; ++c) store_element(p.out, o_row + c, p.dtype, 0.0);
        if (p.lse) p.lse[h * p.total_q + start_q + i] = -std::numeric_limits<float>::infinity();
      }
  });
}

}  // namespace hopattn::reference
