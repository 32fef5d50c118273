// The FP8 forward pass on the GPU.
//  - forward_fp8 against the fp64 CUDA reference run on the *dequantised* inputs. Descales are
//    powers of two, so q_e4m3 * descale is exact in bf16 and the reference sees exactly what the
//    kernel multiplies: the only errors left are P rounded to e4m3 before P V and O rounded to
//    16 bits. A wrong descale index, V^T permutation or mask shows as an O(1) error.
//  - attention_fp8 (rotate + quantise + attention from bf16/fp16) against the fp64 reference on
//    the original inputs: the quantisation error comes on top, so the bound is looser.
// Outputs are NaN-poisoned before each run; lse is checked too (it uses the unrounded P).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../common/fp8_test_util.hpp"
#include "../common/test_util.hpp"
#include "api/heuristics.hpp"
#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"
#include "reference/fp8_host.hpp"

namespace hopattn::test {
namespace {

namespace f8 = hopattn::reference::fp8;

struct Fp8Case {
  DType out_dtype;
  int head_dim;
  bool causal;
  int64_t seqlen_q, seqlen_k, heads_q, heads_kv, batch;
  int descale_mode;  // 0: per 128-row block, 1: per head, 2: none (all 1)
};

std::string case_name(const Fp8Case& c) {
  static const char* kModes[] = {"block", "head", "none"};
  return std::string(dtype_name(c.out_dtype)) + "_d" + std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") +
         "_b" + std::to_string(c.batch) + "_h" + std::to_string(c.heads_q) + "x" + std::to_string(c.heads_kv) + "_q" +
         std::to_string(c.seqlen_q) + "_k" + std::to_string(c.seqlen_k) + "_" + kModes[c.descale_mode];
}

std::vector<Fp8Case> make_cases() {
  std::vector<Fp8Case> cases;
  const int64_t seqlens[][2] = {{1, 1}, {17, 17}, {127, 255}, {255, 127}, {1000, 1000}, {300, 4097}};
  const int64_t heads[][2] = {{4, 4}, {4, 1}};
  for (int d : {64, 128, 256})
    for (bool causal : {false, true})
      for (const auto& sl : seqlens)
        for (const auto& h : heads) cases.push_back({DType::kBF16, d, causal, sl[0], sl[1], h[0], h[1], 2, 0});
  for (int d : {64, 128, 256}) {
    cases.push_back({DType::kFP16, d, true, 333, 333, 4, 2, 2, 0});
    cases.push_back({DType::kBF16, d, false, 333, 700, 4, 2, 1, 1});
    cases.push_back({DType::kBF16, d, true, 700, 333, 2, 2, 1, 2});
  }
  // From 8k keys at d128, per-head and absent K descales take the 224-key tile
  // (heuristics::fp8_key_tile); 128-row blocks keep the 128-key one.
  for (int mode : {0, 1, 2})
    for (bool causal : {false, true}) cases.push_back({DType::kBF16, 128, causal, 300, 8200, 2, 1, 1, mode});
  // An even count of 128-row blocks: the shapes CTA pairs take (2 blocks, 128- and 224-key tiles at
  // d128 by the descale mode; d256), so the clustered kernels are in reach of HOPATTN_FP8_CLUSTER=1.
  for (int mode : {0, 1}) cases.push_back({DType::kBF16, 128, false, 256, 8200, 2, 1, 1, mode});
  cases.push_back({DType::kFP16, 256, false, 256, 4500, 2, 2, 1, 0});
  return cases;
}

int64_t blocks(int64_t rows) { return (rows + kFp8BlockRows - 1) / kFp8BlockRows; }

// Random e4m3 values in [-2, 2) (never all zero) and their exact float values.
void random_e4m3(size_t n, std::mt19937_64& gen, std::vector<uint8_t>* codes, std::vector<float>* values) {
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  codes->resize(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*codes)[i] = f8::float_to_e4m3(dist(gen));
    (*values)[i] = f8::e4m3_to_float((*codes)[i]);
  }
}

// Powers of two in [1/4, 4]: value * descale stays exact in bf16 (3 mantissa bits of e4m3 fit in 7).
std::vector<float> random_descales(size_t n, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> e(-2, 2);
  std::vector<float> out(n);
  for (float& x : out) x = std::ldexp(1.f, e(gen));
  return out;
}

class Fp8ForwardVsReference : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8ForwardVsReference, MatchesFp64ReferenceOnDequantisedInputs) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const Fp8Case c = GetParam();
  if (find_fp8_kernel(c.out_dtype, c.head_dim) == nullptr) GTEST_SKIP() << "not built: " << build_instantiations();
  const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int64_t nq = b * sq * hq * d, nk = b * sk * hkv * d, nlse = b * hq * sq;
  const int64_t nbq = c.descale_mode == 0 ? blocks(sq) : 1, nbk = c.descale_mode == 0 ? blocks(sk) : 1;
  std::mt19937_64 gen(std::hash<std::string>{}(case_name(c)));

  std::vector<uint8_t> q8, k8, v8;
  std::vector<float> qf, kf, vf;
  random_e4m3(size_t(nq), gen, &q8, &qf);
  random_e4m3(size_t(nk), gen, &k8, &kf);
  random_e4m3(size_t(nk), gen, &v8, &vf);
  std::vector<float> qd = random_descales(size_t(b * hq * nbq), gen);
  std::vector<float> kd = random_descales(size_t(b * hkv * nbk), gen);
  std::vector<float> vd = random_descales(size_t(b * hkv), gen);
  if (c.descale_mode == 2) std::fill(vd.begin(), vd.end(), 1.f);

  // The dequantised tensors the reference sees: value * descale of its (batch, head, block).
  auto dequantise = [&](std::vector<float> x, int64_t s, int64_t h, const std::vector<float>& ds, int64_t nb) {
    if (c.descale_mode == 2) return x;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t si = 0; si < s; ++si)
        for (int64_t hi = 0; hi < h; ++hi) {
          const float scale = ds[size_t((bi * h + hi) * nb + (nb == 1 ? 0 : si / kFp8BlockRows))];
          for (int64_t di = 0; di < d; ++di) x[size_t(((bi * s + si) * h + hi) * d + di)] *= scale;
        }
    return x;
  };
  const std::vector<float> q_ref = dequantise(qf, sq, hq, qd, nbq);
  const std::vector<float> k_ref = dequantise(kf, sk, hkv, kd, nbk);
  const std::vector<float> v_ref = dequantise(vf, sk, hkv, vd, 1);

  DeviceBuffer q_dev(q8), k_dev(k8), v_dev(v8);
  DeviceBuffer qd_dev(qd.size() * 4), kd_dev(kd.size() * 4), vd_dev(vd.size() * 4);
  qd_dev.upload(qd);
  kd_dev.upload(kd);
  vd_dev.upload(vd);
  const DType ot = c.out_dtype;
  DeviceBuffer out_dev(size_t(nq) * 2), lse_dev(size_t(nlse) * 4);
  out_dev.fill(0xFF);
  lse_dev.fill(0xFF);

  Fp8ForwardArgs a;
  a.q = make_tensor(q_dev.get(), DType::kE4M3, b, sq, hq, d);
  a.k = make_tensor(k_dev.get(), DType::kE4M3, b, sk, hkv, d);
  a.v = make_tensor(v_dev.get(), DType::kE4M3, b, sk, hkv, d);
  if (c.descale_mode != 2) {
    a.q_descale = make_tensor(qd_dev.get(), DType::kFP32, b, hq, nbq);
    a.k_descale = make_tensor(kd_dev.get(), DType::kFP32, b, hkv, nbk);
    a.v_descale = make_tensor(vd_dev.get(), DType::kFP32, b, hkv, 1);
    a.v_descale.ndim = 2;
  }
  a.out = make_tensor(out_dev.get(), ot, b, sq, hq, d);
  a.lse = make_tensor(lse_dev.get(), DType::kFP32, b, hq, sq);
  a.causal = c.causal;
  const size_t ws_bytes = forward_fp8_workspace_size(a);
  ASSERT_GT(ws_bytes, 0u) << case_name(c);
  DeviceBuffer ws(ws_bytes);
  ws.fill(0xFF);  // the V^T padding must be written by the pre-pass, not inherited
  const Result r = forward_fp8(a, ws.get(), ws_bytes);
  ASSERT_TRUE(r.ok()) << case_name(c) << ": " << r.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());

  // Reference: the CUDA fp64 kernel on the dequantised values, stored exactly in bf16.
  const std::vector<uint8_t> qb = encode(q_ref, DType::kBF16), kb = encode(k_ref, DType::kBF16),
                             vb = encode(v_ref, DType::kBF16);
  DeviceBuffer qr(qb), kr(kb), vr(vb), out_ref(size_t(nq) * 2), lse_ref(size_t(nlse) * 4);
  ForwardArgs ra;
  ra.q = make_tensor(qr.get(), DType::kBF16, b, sq, hq, d);
  ra.k = make_tensor(kr.get(), DType::kBF16, b, sk, hkv, d);
  ra.v = make_tensor(vr.get(), DType::kBF16, b, sk, hkv, d);
  ra.out = make_tensor(out_ref.get(), ot, b, sq, hq, d);
  ra.out.dtype = DType::kBF16;
  ra.lse = make_tensor(lse_ref.get(), DType::kFP32, b, hq, sq);
  ra.causal = c.causal;
  const Result rr = forward_reference_cuda(ra);
  ASSERT_TRUE(rr.ok()) << rr.message;

  std::vector<uint8_t> got_b = out_dev.download(), ref_b = out_ref.download();
  const std::vector<float> got = decode(got_b.data(), size_t(nq), ot), ref = decode(ref_b.data(), size_t(nq), DType::kBF16);
  std::vector<float> lse_got(static_cast<size_t>(nlse)), lse_want(static_cast<size_t>(nlse));
  lse_dev.download(lse_got.data(), lse_got.size() * 4);
  lse_ref.download(lse_want.data(), lse_want.size() * 4);

  const double out_err = rel_l2_error(got, ref);  // +inf on any NaN (an unwritten element)
  // P in e4m3 has a relative rounding error up to 2^-4 per element, which averages over the keys
  // of a row; 16-bit output rounding adds 2^-9. lse uses the unrounded P: only the accumulation.
  // Descales up to 4 on q and k scale the scores up to 16x: the softmax is then peaky and P's
  // rounding averages over fewer keys. Measured worst: 2.58e-2 (d128 full, 300 x 8200, per head),
  // with the 128-key tile and the 224-key one alike.
  EXPECT_LE(out_err, 3e-2) << case_name(c);
  EXPECT_LE(lse_excess(lse_got, lse_want, 2e-3, 2e-3), 1.0)
      << case_name(c) << ": lse max |err| " << max_abs_error(lse_got, lse_want);
  RecordProperty("out_rel_l2", std::to_string(out_err));
}

INSTANTIATE_TEST_SUITE_P(Sm90Fp8, Fp8ForwardVsReference, ::testing::ValuesIn(make_cases()),
                         [](const ::testing::TestParamInfo<Fp8Case>& info) { return case_name(info.param); });

// ---- attention_fp8: bf16/fp16 in, quantised inside -------------------------------------------------

struct E2eCase {
  DType dtype;
  int head_dim;
  bool causal, incoherent, block_quant;
  int64_t seqlen_q, seqlen_k, heads_q, heads_kv, batch;
  bool rotate_v = false;  // V rotated too, O rotated back in the kernel
  bool quantize_v = true;  // false: V and P stay 16-bit (Fp8AttentionArgs::quantize_v)
};

std::string e2e_name(const E2eCase& c) {
  return std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") +
         (c.incoherent ? "_rot" : "_norot") + (c.rotate_v ? "v" : "") + (c.block_quant ? "_block" : "_head") +
         (c.quantize_v ? "" : "_pv16") + "_b" +
         std::to_string(c.batch) +
         "_h" + std::to_string(c.heads_q) + "x" + std::to_string(c.heads_kv) + "_q" + std::to_string(c.seqlen_q) + "_k" +
         std::to_string(c.seqlen_k);
}

std::vector<E2eCase> make_e2e_cases() {
  std::vector<E2eCase> cases;
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      cases.push_back({DType::kBF16, d, causal, true, true, 1000, 1000, 4, 2, 2});
      cases.push_back({DType::kBF16, d, causal, true, true, 17, 300, 4, 4, 1});
      cases.push_back({DType::kFP16, d, causal, false, true, 255, 127, 4, 1, 1});
      cases.push_back({DType::kBF16, d, causal, true, false, 300, 300, 2, 2, 2});
      cases.push_back({DType::kBF16, d, causal, true, true, 1000, 1000, 4, 2, 2, true});
      cases.push_back({DType::kFP16, d, causal, true, true, 17, 300, 4, 4, 1, true});
      // 16-bit V and P: d256 takes 64-key tiles there, so 1000 keys end mid-tile at both widths.
      cases.push_back({DType::kBF16, d, causal, true, true, 1000, 1000, 4, 2, 2, false, false});
      cases.push_back({DType::kFP16, d, causal, true, true, 17, 300, 4, 4, 1, false, false});
      cases.push_back({DType::kFP16, d, causal, false, true, 255, 127, 4, 1, 1, false, false});
      cases.push_back({DType::kBF16, d, causal, true, false, 300, 65, 2, 2, 2, false, false});
    }
  return cases;
}

// attention_fp8 on random inputs against the CUDA reference on the same 16-bit inputs; the
// relative L2 error of out goes to *err when given.
void check_attention_fp8(const E2eCase& c, double* err = nullptr) {
  const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int64_t nq = b * sq * hq * d, nk = b * sk * hkv * d, nlse = b * hq * sq;
  const uint64_t seed = std::hash<std::string>{}(e2e_name(c));
  const std::vector<uint8_t> qh = encode(random_values(size_t(nq), seed, c.dtype, -2.f, 2.f), c.dtype);
  const std::vector<uint8_t> kh = encode(random_values(size_t(nk), seed + 1, c.dtype, -1.f, 1.f), c.dtype);
  const std::vector<uint8_t> vh = encode(random_values(size_t(nk), seed + 2, c.dtype, -1.f, 1.f), c.dtype);
  DeviceBuffer q(qh), k(kh), v(vh), out(size_t(nq) * 2), lse(size_t(nlse) * 4), out_ref(size_t(nq) * 2),
      lse_ref(size_t(nlse) * 4);
  out.fill(0xFF);
  lse.fill(0xFF);
  Fp8AttentionArgs a;
  a.q = make_tensor(q.get(), c.dtype, b, sq, hq, d);
  a.k = make_tensor(k.get(), c.dtype, b, sk, hkv, d);
  a.v = make_tensor(v.get(), c.dtype, b, sk, hkv, d);
  a.out = make_tensor(out.get(), c.dtype, b, sq, hq, d);
  a.lse = make_tensor(lse.get(), DType::kFP32, b, hq, sq);
  a.causal = c.causal;
  a.incoherent = c.incoherent;
  a.block_quant = c.block_quant;
  a.rotate_v = c.rotate_v;
  a.quantize_v = c.quantize_v;
  a.seed = 7;
  const size_t ws_bytes = attention_fp8_workspace_size(a);
  DeviceBuffer ws(ws_bytes);
  ws.fill(0xFF);
  const Result r = attention_fp8(a, ws.get(), ws_bytes);
  ASSERT_TRUE(r.ok()) << e2e_name(c) << ": " << r.message;

  ForwardArgs ra;
  ra.q = a.q;
  ra.k = a.k;
  ra.v = a.v;
  ra.out = make_tensor(out_ref.get(), c.dtype, b, sq, hq, d);
  ra.lse = make_tensor(lse_ref.get(), DType::kFP32, b, hq, sq);
  ra.causal = c.causal;
  ASSERT_TRUE(forward_reference_cuda(ra).ok());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> gb = out.download(), rb = out_ref.download();
  const double out_err = rel_l2_error(decode(gb.data(), size_t(nq), c.dtype), decode(rb.data(), size_t(nq), c.dtype));
  std::vector<float> lg(static_cast<size_t>(nlse)), lr(static_cast<size_t>(nlse));
  lse.download(lg.data(), lg.size() * 4);
  lse_ref.download(lr.data(), lr.size() * 4);
  // e4m3 keeps 3 mantissa bits: each of q, k, v, p carries up to 2^-4 relative rounding error.
  // lse: the scores' quantisation error (about 3% of a score of ~1) gives up to 0.06 nats at 1000
  // keys on the H200; the bound leaves room.
  EXPECT_LE(out_err, 6e-2) << e2e_name(c);
  EXPECT_LE(lse_excess(lg, lr, 0.1, 5e-3), 1.0) << e2e_name(c) << ": lse max |err| " << max_abs_error(lg, lr);
  ::testing::Test::RecordProperty("out_rel_l2", std::to_string(out_err));
  if (err != nullptr) *err = out_err;
}

class Fp8AttentionVsReference : public ::testing::TestWithParam<E2eCase> {};

TEST_P(Fp8AttentionVsReference, MatchesFp64ReferenceWithinQuantisationError) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const E2eCase c = GetParam();
  if (find_fp8_kernel(c.dtype, c.head_dim) == nullptr) GTEST_SKIP() << "not built";
  check_attention_fp8(c);
}

// The head dims whose FP8 kernels (for out dtype t) this build has.
std::vector<int> built_fp8_head_dims(DType t) {
  std::vector<int> dims;
  for (int d : {64, 128, 256})
    if (find_fp8_kernel(t, d) != nullptr) dims.push_back(d);
  return dims;
}

// quantize_v = false removes V's and P's e4m3 rounding, so on the same inputs its error must be
// clearly below the all-e4m3 kernel's: uniform inputs leave about a third of the squared error to
// V (so ~0.8x expected); 0.9 catches a kernel that quietly still rounds V or P to e4m3.
TEST(Sm90Fp8Pv16, MoreAccurateThanE4m3V) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::vector<int> dims = built_fp8_head_dims(DType::kBF16);
  if (dims.empty()) GTEST_SKIP() << "no bf16 FP8 kernel built";
  for (int d : dims) {
    for (bool causal : {false, true}) {
      double e8 = 0, e16 = 0;
      check_attention_fp8({DType::kBF16, d, causal, true, true, 1000, 1000, 4, 2, 2, false, true}, &e8);
      check_attention_fp8({DType::kBF16, d, causal, true, true, 1000, 1000, 4, 2, 2, false, false}, &e16);
      EXPECT_LT(e16, 0.9 * e8) << "d" << d << (causal ? " causal" : " full") << ": 16-bit V " << e16 << ", e4m3 V " << e8;
    }
  }
}

// With quantize_v = false the kernel reads the caller's V in place (TMA on its strides) where the
// e4m3 path copies it: V as the second half of a packed kv buffer (row stride 2 * heads * d), its
// batch stride padded by 3 rows, against the reference on the same view. The other half is
// poison (NaN), so a read outside the view shows.
TEST(Sm90Fp8Pv16, StridedVIsReadInPlace) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::vector<int> dims = built_fp8_head_dims(DType::kBF16);
  if (dims.empty()) GTEST_SKIP() << "no bf16 FP8 kernel built";
  for (int d : dims) {
    const int64_t b = 2, sq = 200, sk = 333, hq = 4, hkv = 2, row = 2 * hkv * d, batch_stride = (sk + 3) * row;
    const int64_t nq = b * sq * hq * d, nkv = b * batch_stride;
    std::vector<float> kv_values = random_values(size_t(nkv), 11 + d, DType::kBF16, -1.f, 1.f);
    for (int64_t i = 0; i < nkv; ++i)
      if ((i % row) < hkv * d || (i % batch_stride) >= sk * row) kv_values[size_t(i)] = NAN;  // k half, pad rows
    DeviceBuffer q(encode(random_values(size_t(nq), 12 + d, DType::kBF16, -2.f, 2.f), DType::kBF16));
    DeviceBuffer k(encode(random_values(size_t(b * sk * hkv * d), 13 + d, DType::kBF16, -1.f, 1.f), DType::kBF16));
    DeviceBuffer kv(encode(kv_values, DType::kBF16)), out(size_t(nq) * 2), out_ref(size_t(nq) * 2);
    out.fill(0xFF);
    Fp8AttentionArgs a;
    a.q = make_tensor(q.get(), DType::kBF16, b, sq, hq, d);
    a.k = make_tensor(k.get(), DType::kBF16, b, sk, hkv, d);
    a.v = make_tensor(static_cast<uint16_t*>(kv.get()) + hkv * d, DType::kBF16, b, sk, hkv, d);
    a.v.strides[0] = batch_stride;
    a.v.strides[1] = row;
    a.out = make_tensor(out.get(), DType::kBF16, b, sq, hq, d);
    a.quantize_v = false;
    DeviceBuffer ws(attention_fp8_workspace_size(a));
    const Result r = attention_fp8(a, ws.get(), ws.bytes());
    ASSERT_TRUE(r.ok()) << "d" << d << ": " << r.message;
    ForwardArgs ra;
    ra.q = a.q;
    ra.k = a.k;
    ra.v = a.v;
    ra.out = make_tensor(out_ref.get(), DType::kBF16, b, sq, hq, d);
    ASSERT_TRUE(forward_reference_cuda(ra).ok());
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> gb = out.download(), rb = out_ref.download();
    const double err = rel_l2_error(decode(gb.data(), size_t(nq), DType::kBF16), decode(rb.data(), size_t(nq), DType::kBF16));
    EXPECT_LE(err, 6e-2) << "d" << d;  // rel_l2_error is infinite on a NaN: a poisoned read fails here
  }
}

// The wide key tile (224 keys, K quantised in 224-row blocks; heuristics::fp8_key_tile), forced at
// small sizes: d128, causal and not, key counts that are not multiples of 224 (and one below a
// tile), GQA, per-head scales, fp16. Then chosen by the heuristic at 8200 keys. Packed batches and
// other head dims never take it (covered above).
TEST(Sm90Fp8WideKeyTile, AttentionMatchesReferenceWithinQuantisationError) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  heuristics::FwdTuning& tuning = heuristics::fwd_tuning();
  const heuristics::FwdTuning saved = tuning;
  bool ran = false;
  for (DType t : {DType::kBF16, DType::kFP16}) {
    if (find_fp8_kernel(t, 128) == nullptr) continue;
    ran = true;
    tuning.fp8_key_tile = 224;
    ASSERT_EQ(heuristics::fp8_key_tile(128, 300, false), 224);
    for (bool causal : {false, true}) {
      check_attention_fp8({t, 128, causal, true, true, 1000, 1000, 4, 2, 2});
      check_attention_fp8({t, 128, causal, true, true, 17, 300, 4, 4, 1});
      check_attention_fp8({t, 128, causal, true, true, 500, 200, 4, 1, 1});
      check_attention_fp8({t, 128, causal, true, false, 448, 448, 2, 2, 2});
      check_attention_fp8({t, 128, causal, true, false, 300, 300, 2, 2, 1});
      check_attention_fp8({t, 128, causal, false, true, 255, 672, 4, 2, 1});
    }
    tuning.fp8_key_tile = -1;
    ASSERT_EQ(heuristics::fp8_key_tile(128, 8200, false), 224);
    for (bool causal : {false, true}) check_attention_fp8({t, 128, causal, true, true, 300, 8200, 2, 1, 1});
    tuning = saved;
  }
  tuning = saved;
  if (!ran) GTEST_SKIP() << "no d128 FP8 kernel built";
}

INSTANTIATE_TEST_SUITE_P(Sm90Fp8, Fp8AttentionVsReference, ::testing::ValuesIn(make_e2e_cases()),
                         [](const ::testing::TestParamInfo<E2eCase>& info) { return e2e_name(info.param); });

// ---- errors that need a device (validation alone is covered by tests/cpu/test_fp8_api.cpp) --------

TEST(Sm90Fp8Errors, WorkspaceMissingOrTooSmallIsRejected) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const int64_t b = 1, s = 64, h = 2, d = 64;
  if (find_fp8_kernel(DType::kBF16, d) == nullptr) GTEST_SKIP() << "not built";
  DeviceBuffer q(size_t(b * s * h * d) * 2), out(size_t(b * s * h * d) * 2);
  q.fill(0x3C);
  Fp8AttentionArgs a;
  a.q = a.k = a.v = make_tensor(q.get(), DType::kBF16, b, s, h, d);
  a.out = make_tensor(out.get(), DType::kBF16, b, s, h, d);
  const size_t need = attention_fp8_workspace_size(a);
  ASSERT_GT(need, 0u);
  Result r = attention_fp8(a, nullptr, 0);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("workspace is null"), std::string::npos) << r.message;
  DeviceBuffer ws(need);
  r = attention_fp8(a, ws.get(), need - 1);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("workspace_bytes"), std::string::npos) << r.message;
  r = attention_fp8(a, static_cast<uint8_t*>(ws.get()) + 16, need);
  EXPECT_NE(r.message.find("256-byte aligned"), std::string::npos) << r.message;
}

TEST(Sm90Fp8Errors, NoKeysGivesZerosAndMinusInfinity) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const int64_t b = 1, sq = 5, h = 2, d = 128;
  DeviceBuffer q(size_t(b * sq * h * d)), k(16), out(size_t(b * sq * h * d) * 2), lse(size_t(b * h * sq) * 4);
  q.fill(0x38);
  out.fill(0xFF);
  lse.fill(0xFF);
  Fp8ForwardArgs a;
  a.q = make_tensor(q.get(), DType::kE4M3, b, sq, h, d);
  a.k = a.v = make_tensor(k.get(), DType::kE4M3, b, 0, h, d);
  a.out = make_tensor(out.get(), DType::kBF16, b, sq, h, d);
  a.lse = make_tensor(lse.get(), DType::kFP32, b, h, sq);
  EXPECT_EQ(forward_fp8_workspace_size(a), 0u);
  const Result r = forward_fp8(a, nullptr, 0);
  ASSERT_TRUE(r.ok()) << r.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> ob = out.download();
  EXPECT_TRUE(std::all_of(ob.begin(), ob.end(), [](uint8_t x) { return x == 0; }));
  std::vector<float> l(static_cast<size_t>(b * h * sq));
  lse.download(l.data(), l.size() * 4);
  for (float x : l) EXPECT_EQ(x, -INFINITY);
}

// Many persistent rounds, run twice: an intermittent race in the FP8 pipeline shows as a difference.
TEST(Sm90Fp8Repeat, RunsAreBitwiseIdentical) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (int d : {64, 128, 256}) {
    if (find_fp8_kernel(DType::kBF16, d) == nullptr) continue;
    for (bool quantize_v : {true, false})
    for (bool causal : {false, true}) {
      const int64_t b = 2, s = 2048, hq = 16, hkv = 4, n = b * s * hq * d, nk = b * s * hkv * d;
      DeviceBuffer q(encode(random_values(size_t(n), 3 + d, DType::kBF16, -2.f, 2.f), DType::kBF16));
      DeviceBuffer k(encode(random_values(size_t(nk), 4 + d, DType::kBF16, -1.f, 1.f), DType::kBF16));
      DeviceBuffer v(encode(random_values(size_t(nk), 5 + d, DType::kBF16, -1.f, 1.f), DType::kBF16));
      DeviceBuffer out(size_t(n) * 2);
      Fp8AttentionArgs a;
      a.q = make_tensor(q.get(), DType::kBF16, b, s, hq, d);
      a.k = make_tensor(k.get(), DType::kBF16, b, s, hkv, d);
      a.v = make_tensor(v.get(), DType::kBF16, b, s, hkv, d);
      a.out = make_tensor(out.get(), DType::kBF16, b, s, hq, d);
      a.causal = causal;
      a.quantize_v = quantize_v;
      DeviceBuffer ws(attention_fp8_workspace_size(a));
      std::vector<uint8_t> first;
      for (int run = 0; run < 10; ++run) {
        out.fill(0xFF);
        ASSERT_TRUE(attention_fp8(a, ws.get(), ws.bytes()).ok());
        HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
        std::vector<uint8_t> got = out.download();
        if (run == 0) first = got;
        else ASSERT_EQ(got, first) << "d" << d << (causal ? " causal" : "") << (quantize_v ? "" : " pv16") << ": run "
                                   << run << " differs";
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::test
