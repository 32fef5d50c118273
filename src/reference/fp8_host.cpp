// Host reference of the FP8 pre-passes: e4m3 rounding by exact arithmetic (no lookup of the
// device's converter), the rotation in double, and dense mirrors of quantize_rows and make_vt.
#include "reference/fp8_host.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "sm90/fp8/layout.hpp"

namespace hopattn::reference::fp8 {

float e4m3_to_float(uint8_t code) {
  const int exp = (code >> 3) & 0xF, mant = code & 0x7;
  const bool neg = (code & 0x80) != 0;
  if (exp == 0xF && mant == 0x7) return NAN;
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)                   // subnormal
                             : std::ldexp(1.f + static_cast<float>(mant) / 8.f, exp - 7);  // bias 7
  return neg ? -mag : mag;
}

uint8_t float_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::min(std::fabs(static_cast<double>(x)), 448.0);  // satfinite (inf too)
  // Spacing of e4m3 values around a: 2^(e-3) for normals (e >= -6), 2^-9 for subnormals.
  const int e = a > 0 ? std::ilogb(a) : -6;
  const double quantum = std::ldexp(1.0, std::max(e, -6) - 3);
  const double r = std::min(std::nearbyint(a / quantum) * quantum, 448.0);  // ties to even
  if (r == 0) return sign;
  const int re = std::ilogb(r);  // rounding may have carried into the next binade
  if (re < -6) return sign | static_cast<uint8_t>(r / std::ldexp(1.0, -9));  // subnormal: mantissa only
  const int mant = static_cast<int>(r / std::ldexp(1.0, re - 3)) - 8;
  return sign | static_cast<uint8_t>(((re + 7) << 3) | mant);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<float> rotation_signs(int d, uint32_t seed) {
  std::vector<float> s(static_cast<size_t>(std::max(d, 0)));
  for (int i = 0; i < d; ++i)
    s[i] = (splitmix64((static_cast<uint64_t>(seed) << 32) + static_cast<uint64_t>(i)) >> 63) ? -1.f : 1.f;
  return s;
}

void rotate_rows(std::vector<double>& rows, int64_t nrows, int d, uint32_t seed) {
  if (d < 1 || (d & (d - 1)) != 0) throw std::invalid_argument("rotate_rows: d must be a power of two");
  if (static_cast<int64_t>(rows.size()) < nrows * d) throw std::invalid_argument("rotate_rows: rows too short");
  const std::vector<float> signs = rotation_signs(d, seed);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t r = 0; r < nrows; ++r) {
    double* x = rows.data() + r * d;
    for (int i = 0; i < d; ++i) x[i] *= signs[i];
    // Stage h pairs (i, i + h), bit h of i clear: (a, b) -> (a + b, a - b). H is symmetric, so this
    // is (x * s) @ H with H_ij = (-1)^popcount(i & j).
    for (int h = 1; h < d; h <<= 1)
      for (int i = 0; i < d; ++i)
        if ((i & h) == 0) {
          const double a = x[i], b = x[i + h];
          x[i] = a + b;
          x[i + h] = a - b;
        }
    for (int i = 0; i < d; ++i) x[i] *= inv_sqrt_d;
  }
}

float quant_scale(float amax) { return amax > 0.f ? std::min(kE4M3Max / amax, FLT_MAX) : 0.f; }
float quant_descale(float amax) { return amax > 0.f ? amax / kE4M3Max : 1.f; }

namespace {

uint8_t quantize_value(float x, float amax) { return amax > 0.f ? float_to_e4m3(x * quant_scale(amax)) : 0; }

void check_shape(size_t n, int64_t batch, int64_t seqlen, int64_t heads, int64_t head_dim, const char* who) {
  if (batch < 0 || seqlen < 0 || heads < 0 || head_dim < 0 ||
      n != static_cast<size_t>(batch * seqlen * heads * head_dim))
    throw std::invalid_argument(std::string(who) + ": input size does not match the shape");
}

}  // namespace

QuantizedRows quantize_rows_reference(const std::vector<float>& in, int64_t batch, int64_t seqlen, int64_t heads,
                                      int64_t head_dim, bool rotate, bool block_quant, uint32_t seed,
                                      int64_t block_rows) {
  check_shape(in.size(), batch, seqlen, heads, head_dim, "quantize_rows_reference");
  const int64_t d = head_dim, nrows = batch * seqlen * heads;
  // The values the device quantises, in fp32.
  std::vector<float> val(in);
  if (rotate) {
    std::vector<double> rows(in.begin(), in.end());
    rotate_rows(rows, nrows, static_cast<int>(d), seed);
    for (size_t i = 0; i < rows.size(); ++i) val[i] = static_cast<float>(rows[i]);
  }
  QuantizedRows q;
  const int64_t rows_per_block = block_rows > 0 ? block_rows : sm90::fp8::kQuantBlock;
  const int64_t block = block_quant ? rows_per_block : std::max<int64_t>(seqlen, 1);
  q.nblocks = block_quant ? (seqlen + block - 1) / block : 1;
  q.codes.assign(val.size(), 0);
  q.descale.assign(static_cast<size_t>(batch * heads * q.nblocks), 1.f);
  const auto at = [&](int64_t b, int64_t s, int64_t h) { return ((b * seqlen + s) * heads + h) * d; };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t blk = 0; blk < q.nblocks; ++blk) {
        const int64_t s0 = blk * block, s1 = std::min(seqlen, s0 + block);
        float amax = 0.f;
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(val[at(b, s, h) + i]));
        q.descale[(b * heads + h) * q.nblocks + blk] = quant_descale(amax);
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t i = 0; i < d; ++i) q.codes[at(b, s, h) + i] = quantize_value(val[at(b, s, h) + i], amax);
      }
  return q;
}

namespace {

// Scatters per-(b, s, h, i) codes into the V^T layout.
template <typename Code>
std::vector<uint8_t> scatter_vt(int64_t batch, int64_t seqlen, int64_t heads, int64_t d, Code code) {
  const int64_t padded = sm90::fp8::vt_padded_seqlen(seqlen);
  std::vector<uint8_t> vt(static_cast<size_t>(batch * heads * d * padded), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seqlen; ++s)
        for (int64_t i = 0; i < d; ++i)
          vt[static_cast<size_t>(((b * heads + h) * d + i) * padded + sm90::fp8::vt_column(s))] = code(b, s, h, i);
  return vt;
}

}  // namespace

VtReference make_vt_reference(const std::vector<float>& in, int64_t batch, int64_t seqlen, int64_t heads,
                              int64_t head_dim) {
  check_shape(in.size(), batch, seqlen, heads, head_dim, "make_vt_reference");
  const int64_t d = head_dim;
  const auto at = [&](int64_t b, int64_t s, int64_t h, int64_t i) { return ((b * seqlen + s) * heads + h) * d + i; };
  std::vector<float> amax(static_cast<size_t>(batch * heads), 0.f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seqlen; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d; ++i) amax[b * heads + h] = std::max(amax[b * heads + h], std::fabs(in[at(b, s, h, i)]));
  VtReference r;
  r.vt = scatter_vt(batch, seqlen, heads, d, [&](int64_t b, int64_t s, int64_t h, int64_t i) {
    return quantize_value(in[at(b, s, h, i)], amax[b * heads + h]);
  });
  r.descale.resize(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) r.descale[i] = quant_descale(amax[i]);
  return r;
}

VtReference make_vt_reference_e4m3(const std::vector<uint8_t>& in, int64_t batch, int64_t seqlen, int64_t heads,
                                   int64_t head_dim) {
  check_shape(in.size(), batch, seqlen, heads, head_dim, "make_vt_reference_e4m3");
  const int64_t d = head_dim;
  VtReference r;
  r.vt = scatter_vt(batch, seqlen, heads, d, [&](int64_t b, int64_t s, int64_t h, int64_t i) {
    return in[static_cast<size_t>(((b * seqlen + s) * heads + h) * d + i)];
  });
  return r;
}

}  // namespace hopattn::reference::fp8
