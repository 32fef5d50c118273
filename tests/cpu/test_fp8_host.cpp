// The host reference of the FP8 pre-passes (reference/fp8_host.hpp) and the V^T layout contract
// (sm90/fp8/layout.hpp): e4m3 encode/decode, the rotation's signs and orthogonality, and the dense
// quantize/V^T mirrors the GPU tests compare against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "reference/fp8_host.hpp"
#include "sm90/fp8/layout.hpp"

namespace hopattn::test {
namespace {

namespace f8 = hopattn::reference::fp8;
using sm90::fp8::kQuantBlock;

bool is_nan_code(int c) { return (c & 0x7F) == 0x7F; }

TEST(Fp8Host, E4M3RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float f = f8::e4m3_to_float(static_cast<uint8_t>(c));
    if (is_nan_code(c)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(f8::float_to_e4m3(f), 0x7F) << c;
    } else {
      EXPECT_EQ(f8::float_to_e4m3(f), c) << c << " -> " << f;
      EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << c;
    }
  }
  // Strictly increasing over the positive codes, and the known landmarks.
  for (int c = 1; c < 0x7F; ++c) EXPECT_LT(f8::e4m3_to_float(c - 1), f8::e4m3_to_float(c)) << c;
  EXPECT_EQ(f8::e4m3_to_float(0x7E), 448.f);
  EXPECT_EQ(f8::e4m3_to_float(0xFE), -448.f);
  EXPECT_EQ(f8::e4m3_to_float(0x38), 1.f);
  EXPECT_EQ(f8::e4m3_to_float(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(f8::e4m3_to_float(0x07), 7 * std::ldexp(1.f, -9));
  EXPECT_EQ(f8::e4m3_to_float(0x08), std::ldexp(1.f, -6));  // smallest normal
}

TEST(Fp8Host, E4M3RoundsToNearestEvenAndSaturates) {
  const float sub = std::ldexp(1.f, -9);
  struct Case {
    float x;
    uint8_t code;
  } cases[] = {
      {1.0625f, 0x38},      // halfway 1 | 1.125: to the even mantissa (1.0)
      {1.1875f, 0x3A},      // halfway 1.125 | 1.25: to 1.25
      {1.0625001f, 0x39},   // just past halfway
      {-1.0625f, 0xB8},
      {0.5f * sub, 0x00},   // halfway 0 | 2^-9: to zero
      {0.5001f * sub, 0x01},
      {1.5f * sub, 0x02},   // halfway 1 | 2 (x 2^-9): to 2
      {2.5f * sub, 0x02},   // halfway 2 | 3: to 2
      {7.5f * sub, 0x08},   // halfway between the largest subnormal and the smallest normal
      {-0.f, 0x80},
      {0.f, 0x00},
      {15.5f, 0x58},        // halfway 15 (0x57, mantissa 7) | 16 (0x58, mantissa 0): to 16
      {432.f, 0x7E},        // halfway 416 | 448: to 448 (mantissa 6, even)
      {448.f, 0x7E},
      {449.f, 0x7E},        // saturation
      {464.f, 0x7E},        // would round to 480 (not finite in e4m3fn): satfinite keeps 448
      {1e9f, 0x7E},
      {-1e9f, 0xFE},
      {std::numeric_limits<float>::infinity(), 0x7E},
      {-std::numeric_limits<float>::infinity(), 0xFE},
      {std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {1e-30f, 0x00},
      {-1e-30f, 0x80},
  };
  for (const Case& c : cases) EXPECT_EQ(f8::float_to_e4m3(c.x), c.code) << "x=" << c.x;
}

// Against brute force: the nearest of the 254 finite codes, ties to the even code.
TEST(Fp8Host, E4M3MatchesBruteForceNearest) {
  std::vector<std::pair<double, int>> table;
  for (int c = 0; c < 256; ++c)
    if (!is_nan_code(c)) table.push_back({f8::e4m3_to_float(static_cast<uint8_t>(c)), c});
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> expo(-12, 9.5), unit(0, 1);
  for (int n = 0; n < 200000; ++n) {
    float x = static_cast<float>(std::exp2(expo(gen)));
    if (unit(gen) < 0.5) x = -x;
    if (n % 7 == 0) x = static_cast<float>(f8::e4m3_to_float(static_cast<uint8_t>(gen() & 0x7E)) * (unit(gen) < 0.5 ? 1 : -1));
    const double a = std::min<double>(std::fabs(x), 448.0) * (std::signbit(x) ? -1 : 1);
    int best = -1;
    double best_err = INFINITY;
    for (const auto& [v, c] : table) {
      if ((c & 0x80) != (std::signbit(x) ? 0x80 : 0)) continue;  // same sign (covers +-0)
      const double err = std::fabs(a - v);
      if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
    }
    ASSERT_EQ(f8::float_to_e4m3(x), best) << "x=" << x;
  }
}

// Computed with python/hopattn/fp8_reference.py on 2026-12-01:
//   python3 -c "from hopattn.fp8_reference import rotation_signs; print(rotation_signs(16, seed))"
TEST(Fp8Host, RotationSignsMatchTheNumpyModel) {
  struct Case {
    uint32_t seed;
    int signs[16];
  } cases[] = {
      {0, {-1, -1, -1, 1, 1, 1, -1, 1, -1, -1, 1, 1, -1, -1, 1, -1}},
      {1, {-1, 1, -1, -1, 1, 1, 1, 1, -1, 1, 1, 1, -1, 1, 1, 1}},
      {12345, {-1, 1, -1, 1, -1, 1, -1, 1, 1, 1, -1, 1, -1, 1, 1, 1}},
      {0xDEADBEEFu, {-1, 1, -1, -1, 1, -1, -1, 1, -1, 1, 1, -1, 1, 1, 1, -1}},
  };
  for (const Case& c : cases) {
    const std::vector<float> s = f8::rotation_signs(16, c.seed);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(s[i], static_cast<float>(c.signs[i])) << "seed " << c.seed << " i " << i;
    // A prefix of a longer vector is the same vector (sign i depends on i alone).
    const std::vector<float> s256 = f8::rotation_signs(256, c.seed);
    EXPECT_TRUE(std::equal(s.begin(), s.end(), s256.begin()));
  }
  // splitmix64's published first output for state 0 (x += golden gamma, then the mix).
  EXPECT_EQ(f8::splitmix64(0), 0xE220A8397B1DCDAFull);
}

// x @ M by the definition: M_ij = s_i * (-1)^popcount(i & j) / sqrt(d).
std::vector<double> rotate_by_matrix(const std::vector<double>& x, int64_t nrows, int d, uint32_t seed) {
  const std::vector<float> s = f8::rotation_signs(d, seed);
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < nrows; ++r)
    for (int j = 0; j < d; ++j) {
      double acc = 0;
      for (int i = 0; i < d; ++i) acc += x[r * d + i] * s[i] * (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0);
      y[r * d + j] = acc / std::sqrt(static_cast<double>(d));
    }
  return y;
}

TEST(Fp8Host, RotationIsTheDefinedOrthogonalMatrix) {
  std::mt19937_64 gen(7);
  std::normal_distribution<double> normal;
  for (int d : {8, 64, 128, 256}) {
    const int64_t nq = 37, nk = 29;
    std::vector<double> q(nq * d), k(nk * d);
    for (double& v : q) v = normal(gen);
    for (double& v : k) v = normal(gen);
    std::vector<double> qr = q, kr = k;
    f8::rotate_rows(qr, nq, d, 99);
    f8::rotate_rows(kr, nk, d, 99);
    // The FWHT equals the matrix product.
    const std::vector<double> qm = rotate_by_matrix(q, nq, d, 99);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(qr[i], qm[i], 1e-12) << "d" << d;
    // (Q M)(K M)^T = Q K^T.
    double err = 0, ref = 0;
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        double s = 0, sr = 0;
        for (int t = 0; t < d; ++t) s += q[i * d + t] * k[j * d + t], sr += qr[i * d + t] * kr[j * d + t];
        err = std::max(err, std::fabs(s - sr));
        ref = std::max(ref, std::fabs(s));
      }
    EXPECT_LE(err / ref, 1e-12) << "d" << d;
    // M M^T = I: the rows of M are the rotated unit vectors.
    std::vector<double> m(static_cast<size_t>(d) * d, 0.0);
    for (int i = 0; i < d; ++i) m[i * d + i] = 1.0;
    f8::rotate_rows(m, d, d, 5);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) {
        double dot = 0;
        for (int t = 0; t < d; ++t) dot += m[i * d + t] * m[j * d + t];
        ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-12) << "d" << d << " (" << i << "," << j << ")";
      }
  }
  std::vector<double> bad(12);
  EXPECT_THROW(f8::rotate_rows(bad, 1, 12, 0), std::invalid_argument);
}

TEST(Fp8Host, VtKeyPositionIsThePermutationOfTheRegisterLayout) {
  std::set<int> seen;
  for (int k = 0; k < 16; ++k) {
    const int p = sm90::fp8::vt_key_position(k);
    ASSERT_GE(p, 0);
    ASSERT_LT(p, 16);
    seen.insert(p);
  }
  EXPECT_EQ(seen.size(), 16u);
  // Thread t of a quad packs accumulator columns {2t, 2t+1, 8+2t, 9+2t} as A positions 4t..4t+3:
  // position 4t+i holds key 8*(i/2) + 2t + (i%2).
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(sm90::fp8::vt_key_position(8 * (i / 2) + 2 * t + (i % 2)), 4 * t + i);
  // vt_column permutes within each group of 16 and so is a bijection of [0, padded).
  for (int64_t n : {1, 16, 17, 127, 128, 129, 300}) {
    const int64_t padded = sm90::fp8::vt_padded_seqlen(n);
    EXPECT_EQ(padded % kQuantBlock, 0);
    EXPECT_GE(padded, n);
    EXPECT_LT(padded - n, kQuantBlock);
    std::vector<int> hit(static_cast<size_t>(padded), 0);
    for (int64_t s = 0; s < padded; ++s) {
      const int64_t c = sm90::fp8::vt_column(s);
      ASSERT_EQ(c / 16, s / 16);
      ++hit[static_cast<size_t>(c)];
    }
    EXPECT_TRUE(std::all_of(hit.begin(), hit.end(), [](int h) { return h == 1; }));
  }
}

std::vector<float> random_floats(size_t n, uint64_t seed, float range = 2.f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = u(gen) * (i % 97 == 3 ? 20.f : 1.f);  // a few outliers
  return v;
}

// Blocks of 128 rows, of 224 (the wide key tile's K), and one per head.
TEST(Fp8Host, QuantizeRowsReferenceMapsEachBlockMaxTo448) {
  const int64_t b = 2, s = 500, h = 3, d = 64;
  const std::vector<float> x = random_floats(static_cast<size_t>(b * s * h * d), 1);
  for (int64_t asked : {int64_t{0}, int64_t{224}, int64_t{-1}}) {
    const bool block = asked >= 0;
    const f8::QuantizedRows q = f8::quantize_rows_reference(x, b, s, h, d, false, block, 0, block ? asked : 0);
    const int64_t rows = !block ? s : asked > 0 ? asked : kQuantBlock, nb = (s + rows - 1) / rows;
    ASSERT_EQ(nb, !block ? 1 : asked > 0 ? 3 : 4);
    ASSERT_EQ(q.nblocks, nb);
    ASSERT_EQ(q.descale.size(), static_cast<size_t>(b * h * nb));
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t blk = 0; blk < nb; ++blk) {
          float amax = 0;
          int code_max = 0;
          for (int64_t si = blk * rows; si < std::min(s, (blk + 1) * rows); ++si)
            for (int64_t i = 0; i < d; ++i) {
              const size_t at = static_cast<size_t>(((bi * s + si) * h + hi) * d + i);
              amax = std::max(amax, std::fabs(x[at]));
              code_max = std::max(code_max, q.codes[at] & 0x7F);
              // Dequantised within half an e4m3 ulp: relative 2^-4, or half the subnormal step 2^-9.
              const double descale = q.descale[(bi * h + hi) * nb + blk];
              const double deq = f8::e4m3_to_float(q.codes[at]) * descale;
              ASSERT_LE(std::fabs(deq - x[at]), std::max(std::fabs(x[at]) / 16.0, std::ldexp(descale, -10)) * 1.0001);
            }
          EXPECT_EQ(q.descale[(bi * h + hi) * nb + blk], amax / 448.f);
          EXPECT_EQ(code_max, 0x7E);
        }
  }
  // An all-zero tensor: descale 1, codes +0.
  std::vector<float> z(static_cast<size_t>(s * d), 0.f);
  z[5] = -0.f;
  const f8::QuantizedRows qz = f8::quantize_rows_reference(z, 1, s, 1, d, true, true, 3);
  EXPECT_TRUE(std::all_of(qz.codes.begin(), qz.codes.end(), [](uint8_t c) { return c == 0; }));
  EXPECT_TRUE(std::all_of(qz.descale.begin(), qz.descale.end(), [](float v) { return v == 1.f; }));
}

// The accuracy the GPU orthogonality test leans on: dequantised rotated Q times dequantised rotated
// K^T against Q K^T, relative L2 over the scores. e4m3 keeps 3 mantissa bits (relative rounding
// error up to 2^-4 per value); on these inputs (uniform, 1% outliers x20) the scores land at 3.7%.
TEST(Fp8Host, RotatedQuantisedScoresApproximateQKt) {
  const int64_t sq = 200, sk = 300, d = 128;
  const std::vector<float> q = random_floats(static_cast<size_t>(sq * d), 11), k = random_floats(static_cast<size_t>(sk * d), 12);
  const auto deq = [&](const std::vector<float>& x, int64_t n, uint32_t seed) {
    const f8::QuantizedRows r = f8::quantize_rows_reference(x, 1, n, 1, d, true, true, seed);
    std::vector<double> v(x.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = f8::e4m3_to_float(r.codes[i]) * double(r.descale[i / static_cast<size_t>(d) / kQuantBlock]);
    return v;
  };
  const std::vector<double> qd = deq(q, sq, 4), kd = deq(k, sk, 4), kd_other = deq(k, sk, 5);
  double err = 0, err_other = 0, ref = 0;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j) {
      double s = 0, s8 = 0, s8o = 0;
      for (int64_t t = 0; t < d; ++t) {
        s += double(q[i * d + t]) * k[j * d + t];
        s8 += qd[i * d + t] * kd[j * d + t];
        s8o += qd[i * d + t] * kd_other[j * d + t];
      }
      err += (s8 - s) * (s8 - s);
      err_other += (s8o - s) * (s8o - s);
      ref += s * s;
    }
  std::printf("rotated e4m3 scores: rel L2 %.4f, with K's seed changed %.4f\n", std::sqrt(err / ref), std::sqrt(err_other / ref));
  EXPECT_LE(std::sqrt(err / ref), 0.05);
  EXPECT_GE(std::sqrt(err_other / ref), 0.5);  // Q and K rotated by different M: garbage
}

TEST(Fp8Host, MakeVtReferencePlacesKeysByVtColumn) {
  const int64_t b = 2, s = 37, h = 3, d = 16, padded = 128;
  std::vector<uint8_t> in(static_cast<size_t>(b * s * h * d));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 % 251);
  const f8::VtReference r = f8::make_vt_reference_e4m3(in, b, s, h, d);
  ASSERT_EQ(r.vt.size(), static_cast<size_t>(b * h * d * padded));
  EXPECT_TRUE(r.descale.empty());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < d; ++i)
        for (int64_t col = 0; col < padded; ++col) {
          // Invert vt_column by search: the key whose column is `col`.
          int64_t key = -1;
          for (int64_t t = col / 16 * 16; t < col / 16 * 16 + 16; ++t)
            if (sm90::fp8::vt_column(t) == col) key = t;
          const uint8_t want = key < s ? in[static_cast<size_t>(((bi * s + key) * h + hi) * d + i)] : 0;
          ASSERT_EQ(r.vt[static_cast<size_t>(((bi * h + hi) * d + i) * padded + col)], want);
        }
  // 16-bit input: one scale per (batch, head) over all keys.
  const std::vector<float> x = random_floats(static_cast<size_t>(b * s * h * d), 3);
  const f8::VtReference q = f8::make_vt_reference(x, b, s, h, d);
  ASSERT_EQ(q.descale.size(), static_cast<size_t>(b * h));
  const f8::QuantizedRows rows = f8::quantize_rows_reference(x, b, s, h, d, false, false, 0);
  EXPECT_EQ(q.descale, rows.descale);  // per-head quantisation of the same values
  const f8::VtReference moved = f8::make_vt_reference_e4m3(rows.codes, b, s, h, d);
  EXPECT_EQ(q.vt, moved.vt);
}

}  // namespace
}  // namespace hopattn::test
