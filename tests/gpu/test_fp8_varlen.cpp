// FP8 on packed variable-length batches (attention_fp8_varlen, forward_fp8_varlen) on the GPU.
//  - Against the fixed-length FP8 call on each sequence alone: quantisation blocks start at each
//    sequence's first token and the kernel never mixes sequences, so every row must be bitwise
//    equal to attention_fp8 run on that sequence as a batch of one (same blocks, same scales, same
//    tile arithmetic). A block or V^T column taken from a neighbour shows as a difference.
//  - Against the fp64 CPU varlen reference on the 16-bit inputs, within the quantisation error (the
//    bound of the fixed-length attention_fp8 test), and with seqused, where the per-sequence calls
//    do not apply.
//  - forward_fp8_varlen (e4m3 in, per-sequence block descales) against the fp64 reference on the
//    dequantised values, as the fixed-length forward_fp8 test does.
// Outputs and workspaces are NaN-poisoned before each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common/fp8_test_util.hpp"
#include "../common/test_util.hpp"
#include "../common/varlen_util.hpp"
#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"
#include "reference/fp8_host.hpp"

namespace hopattn::test {
namespace {

namespace f8 = hopattn::reference::fp8;

struct Fp8VarlenCase {
  DType dtype;
  int head_dim;
  bool causal;
  std::vector<int> lens_q, lens_k;
  int64_t heads_q, heads_kv;
  bool block_quant = true, incoherent = true, rotate_v = false;
  int64_t row_pad = 0;  // extra elements per token row (strided q/k/v)
  // Many tiles per CTA: compared with each sequence's own call only (the fp64 CPU reference would
  // take minutes), named by `label` instead of the lengths.
  bool reference = true;
  std::string label;
};

// The first 16-bit element where two outputs differ as values, or -1. +0 and -0 count as equal:
// a row that sees no key is 0, written as +0 by a tile with no key at all (store_empty) and, with
// a rotated V, as +0 or -0 by column (the sign flips of O M^T) by a tile that has keys for other
// rows. The varlen and the fixed-length kernels tile a sequence's rows differently (the fixed
// d64 causal tiles are aligned to the sequence's end), so such a row may be either. Anything else
// must match bit for bit.
int64_t first_difference(const uint8_t* want, const uint8_t* got, int64_t elements) {
  for (int64_t i = 0; i < elements; ++i) {
    uint16_t w, g;
    std::memcpy(&w, want + 2 * i, 2);
    std::memcpy(&g, got + 2 * i, 2);
    if (w != g && ((w | g) & 0x7FFFu) != 0) return i;
  }
  return -1;
}

std::string lens_name(const std::vector<int>& lens) {
  std::string s;
  for (int l : lens) s += "_" + std::to_string(l);
  return s;
}

std::string case_name(const Fp8VarlenCase& c) {
  return std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") +
         (c.incoherent ? "_rot" : "_norot") + (c.rotate_v ? "v" : "") + (c.block_quant ? "_block" : "_head") + "_h" +
         std::to_string(c.heads_q) + "x" + std::to_string(c.heads_kv) + (c.row_pad ? "_strided" : "") +
         (c.label.empty() ? "_q" + lens_name(c.lens_q) + "_k" + lens_name(c.lens_k) : "_" + c.label);
}

std::vector<Fp8VarlenCase> make_cases() {
  // Lengths around the 128-row quantisation block and the key tile, zero-length sequences, one
  // long sequence among short ones, and seqlen_q != seqlen_k per sequence (bottom-right causal).
  const std::vector<int> mixed_q = {17, 0, 300, 1, 128, 1000, 129};
  const std::vector<int> mixed_k = {17, 5, 300, 0, 256, 1000, 500};
  const std::vector<int> same = {127, 255, 1, 640};
  std::vector<Fp8VarlenCase> cases;
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      cases.push_back({DType::kBF16, d, causal, mixed_q, mixed_k, 4, 2});
      cases.push_back({DType::kBF16, d, causal, same, same, 4, 4, true, true, false, 64});
    }
  for (int d : {64, 128, 256}) {
    cases.push_back({DType::kFP16, d, true, mixed_q, mixed_k, 4, 1, false, true, false});
    cases.push_back({DType::kBF16, d, false, same, same, 2, 2, true, false, false});
    cases.push_back({DType::kFP16, d, true, mixed_k, mixed_q, 4, 2, true, true, true});
  }
  // No key row in the whole batch (k and v empty, null): every row gets 0 and lse = -inf.
  cases.push_back({DType::kBF16, 128, false, {5, 0, 130}, {0, 0, 0}, 4, 2});
  // 40 sequences (more than one 32-sequence window of the scheduler's search) and ~900 tiles, ~7 per
  // CTA: the d64 kernels draw them from the workspace's counter (dynamic order), d128 folds them.
  std::vector<int> many;
  for (int i = 0; i < 40; ++i) many.push_back(std::vector<int>{17, 1000, 192, 0, 4097, 385, 1, 2048}[size_t(i % 8)]);
  for (int d : {64, 128})
    for (bool causal : {false, true})
      cases.push_back({DType::kBF16, d, causal, many, many, 4, 2, true, true, false, 0, false, "40seqs_many_tiles"});
  return cases;
}

struct Packed {
  std::vector<int32_t> cu_q, cu_k;
  int64_t total_q = 0, total_k = 0, max_q = 0, max_k = 0, batch = 0;
};

Packed pack(const std::vector<int>& lens_q, const std::vector<int>& lens_k) {
  Packed p;
  p.cu_q = prefix_sums(lens_q);
  p.cu_k = prefix_sums(lens_k);
  p.batch = static_cast<int64_t>(lens_q.size());
  p.total_q = p.cu_q.back();
  p.total_k = p.cu_k.back();
  p.max_q = *std::max_element(lens_q.begin(), lens_q.end());
  p.max_k = *std::max_element(lens_k.begin(), lens_k.end());
  return p;
}

// A (1, len, heads, d) fixed-length view of rows [first, first + len) of a packed tensor.
TensorRef sequence_view(const TensorRef& packed_t, int64_t first, int64_t len) {
  TensorRef t = make_tensor(static_cast<uint8_t*>(packed_t.data) + first * packed_t.strides[0] * dtype_size(packed_t.dtype),
                            packed_t.dtype, 1, len, packed_t.sizes[1], packed_t.sizes[2]);
  t.strides[0] = std::max<int64_t>(len, 1) * packed_t.strides[0];
  t.strides[1] = packed_t.strides[0];
  t.strides[2] = packed_t.strides[1];
  return t;
}

// Host copies of the 16-bit tensors for the CPU reference, with the device tensors' strides.
TensorRef host_view(std::vector<uint8_t>& host, const TensorRef& dev) {
  TensorRef t = dev;
  t.data = host.data();
  return t;
}

// The fp64 CPU varlen reference on host tensors q/k/v (16-bit, packed), with optional seqused:
// out (total_q, heads_q, head_dim) in q's dtype and lse (heads_q, total_q).
struct Reference {
  std::vector<uint8_t> out;
  std::vector<float> lse;
};
Reference varlen_reference(const TensorRef& q, const TensorRef& k, const TensorRef& v, Packed& pk, bool causal,
                           std::vector<int32_t>* used_q = nullptr, std::vector<int32_t>* used_k = nullptr) {
  const int64_t hq = q.sizes[1], d = q.sizes[2];
  Reference r;
  r.out.resize(static_cast<size_t>(pk.total_q * hq * d) * dtype_size(q.dtype));
  r.lse.resize(static_cast<size_t>(hq * pk.total_q));
  VarlenForwardArgs ra;
  ra.q = q;
  ra.k = k;
  ra.v = v;
  ra.out = make_tensor(r.out.data(), q.dtype, pk.total_q, hq, d);
  ra.lse = lse_tensor(r.lse.data(), hq, pk.total_q);
  ra.cu_seqlens_q = index_tensor(pk.cu_q);
  ra.cu_seqlens_k = index_tensor(pk.cu_k);
  if (used_q != nullptr) ra.seqused_q = index_tensor(*used_q);
  if (used_k != nullptr) ra.seqused_k = index_tensor(*used_k);
  ra.max_seqlen_q = pk.max_q;
  ra.max_seqlen_k = pk.max_k;
  ra.causal = causal;
  const Result res = forward_varlen_cpu(ra);
  if (!res.ok()) ADD_FAILURE() << "reference: " << res.message;
  return r;
}

class Fp8VarlenVsFixed : public ::testing::TestWithParam<Fp8VarlenCase> {};

TEST_P(Fp8VarlenVsFixed, EachSequenceMatchesItsOwnFp8CallAndTheReference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const Fp8VarlenCase c = GetParam();
  if (find_fp8_kernel(c.dtype, c.head_dim) == nullptr) GTEST_SKIP() << "not built: " << build_instantiations();
  Packed pk = pack(c.lens_q, c.lens_k);
  const int64_t hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int64_t row_q = hq * d + c.row_pad, row_k = hkv * d + c.row_pad;
  const uint64_t seed = std::hash<std::string>{}(case_name(c));
  const DType t = c.dtype;
  std::vector<uint8_t> qh = encode(random_values(size_t(pk.total_q * row_q), seed, t, -2.f, 2.f), t);
  std::vector<uint8_t> kh = encode(random_values(size_t(pk.total_k * row_k), seed + 1, t, -1.f, 1.f), t);
  std::vector<uint8_t> vh = encode(random_values(size_t(pk.total_k * row_k), seed + 2, t, -1.f, 1.f), t);
  DeviceBuffer q(qh), k(kh), v(vh), cu_q(size_t(pk.batch + 1) * 4), cu_k(size_t(pk.batch + 1) * 4);
  cu_q.upload(pk.cu_q);
  cu_k.upload(pk.cu_k);
  const int64_t nout = pk.total_q * hq * d, nlse = hq * pk.total_q;
  DeviceBuffer out(size_t(nout) * 2 + 2), lse(size_t(nlse) * 4 + 4);
  out.fill(0xFF);
  lse.fill(0xFF);

  Fp8VarlenAttentionArgs a;
  a.q = packed(q.get(), t, pk.total_q, hq, d, row_q);
  a.k = packed(k.get(), t, pk.total_k, hkv, d, row_k);
  a.v = packed(v.get(), t, pk.total_k, hkv, d, row_k);
  a.out = make_tensor(out.get(), t, pk.total_q, hq, d);
  a.lse = lse_tensor(lse.get(), hq, pk.total_q);
  a.cu_seqlens_q = index_tensor(cu_q.get(), pk.batch + 1);
  a.cu_seqlens_k = index_tensor(cu_k.get(), pk.batch + 1);
  a.max_seqlen_q = pk.max_q;
  a.max_seqlen_k = pk.max_k;
  a.causal = c.causal;
  a.incoherent = c.incoherent;
  a.block_quant = c.block_quant;
  a.rotate_v = c.rotate_v;
  a.seed = 11;
  a.check_index_values = true;
  const size_t ws_bytes = attention_fp8_varlen_workspace_size(a);
  ASSERT_GT(ws_bytes, 0u) << case_name(c);
  DeviceBuffer ws(ws_bytes);
  ws.fill(0xFF);
  const Result r = attention_fp8_varlen(a, ws.get(), ws_bytes);
  ASSERT_TRUE(r.ok()) << case_name(c) << ": " << r.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = out.download();
  std::vector<float> lse_got(static_cast<size_t>(nlse) + 1);
  lse.download(lse_got.data(), lse_got.size() * 4);

  // Each sequence as its own fixed-length attention_fp8 call.
  for (int64_t b = 0; b < pk.batch; ++b) {
    const int64_t sq = c.lens_q[size_t(b)], sk = c.lens_k[size_t(b)], oq = pk.cu_q[size_t(b)], ok = pk.cu_k[size_t(b)];
    if (sq == 0) continue;
    DeviceBuffer o1(size_t(sq * hq * d) * 2), l1(size_t(hq * sq) * 4);
    o1.fill(0xFF);
    l1.fill(0xFF);
    Fp8AttentionArgs f;
    f.q = sequence_view(a.q, oq, sq);
    f.k = sequence_view(a.k, ok, sk);
    f.v = sequence_view(a.v, ok, sk);
    f.out = make_tensor(o1.get(), t, 1, sq, hq, d);
    f.lse = make_tensor(l1.get(), DType::kFP32, 1, hq, sq);
    f.causal = c.causal;
    f.incoherent = c.incoherent;
    f.block_quant = c.block_quant;
    f.rotate_v = c.rotate_v;
    f.seed = 11;
    DeviceBuffer ws1(std::max<size_t>(attention_fp8_workspace_size(f), 256));
    ws1.fill(0xFF);
    const Result r1 = attention_fp8(f, ws1.get(), ws1.bytes());
    ASSERT_TRUE(r1.ok()) << case_name(c) << " sequence " << b << ": " << r1.message;
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> want = o1.download();
    const int64_t at = first_difference(want.data(), got.data() + oq * hq * d * 2, sq * hq * d);
    ASSERT_EQ(at, -1) << case_name(c) << ": sequence " << b << " (" << sq << " x " << sk
                      << ") differs from its own attention_fp8 call first at row " << at / (hq * d) << ", head "
                      << at / d % hq << ", column " << at % d;
    std::vector<float> lw(static_cast<size_t>(hq * sq));
    l1.download(lw.data(), lw.size() * 4);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        const float g = lse_got[size_t(h * pk.total_q + oq + i)], w = lw[size_t(h * sq + i)];
        ASSERT_TRUE(g == w || (std::isnan(g) && std::isnan(w)))
            << case_name(c) << ": lse of sequence " << b << " head " << h << " row " << i << ": " << g << " vs " << w;
      }
  }

  // Nothing past the packed rows is written (the buffers hold one poisoned element more).
  EXPECT_EQ(got[size_t(nout) * 2], 0xFF) << case_name(c);
  EXPECT_TRUE(std::isnan(lse_got[size_t(nlse)])) << case_name(c);
  if (!c.reference) return;

  // The fp64 reference on the 16-bit inputs.
  const Reference ref = varlen_reference(host_view(qh, a.q), host_view(kh, a.k), host_view(vh, a.v), pk, c.causal);
  lse_got.resize(static_cast<size_t>(nlse));
  const double out_err = rel_l2_error(decode(got.data(), size_t(nout), t), decode(ref.out.data(), size_t(nout), t));
  EXPECT_LE(out_err, 6e-2) << case_name(c);
  EXPECT_LE(lse_excess(lse_got, ref.lse, 0.1, 5e-3), 1.0) << case_name(c);
  RecordProperty("out_rel_l2", std::to_string(out_err));
}

INSTANTIATE_TEST_SUITE_P(Sm90Fp8Varlen, Fp8VarlenVsFixed, ::testing::ValuesIn(make_cases()),
                         [](const ::testing::TestParamInfo<Fp8VarlenCase>& info) { return case_name(info.param); });

// seqused (a prefix of each sequence), and keys/values past cu_seqlens_k[batch] that are NaN: the FP8
// path reads no row outside the sequences' used prefix, so neither reaches the output.
TEST(Sm90Fp8Varlen, SequsedAndNonFiniteRowsOutsideTheSequences) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (int d : {64, 128, 256}) {
    if (find_fp8_kernel(DType::kBF16, d) == nullptr) continue;
    for (bool causal : {false, true}) {
      const std::vector<int> lens_q = {200, 3, 0, 700}, lens_k = {300, 129, 40, 700};
      std::vector<int32_t> used_q = {150, 3, 0, 650}, used_k = {260, 0, 40, 699};
      Packed pk = pack(lens_q, lens_k);
      const int64_t hq = 4, hkv = 2, tail = 77, total_k = pk.total_k + tail;
      const DType t = DType::kBF16;
      std::vector<uint8_t> qh = encode(random_values(size_t(pk.total_q * hq * d), 5 + d, t, -2.f, 2.f), t);
      std::vector<float> kf = random_values(size_t(total_k * hkv * d), 6 + d, t, -1.f, 1.f);
      std::vector<float> vf = random_values(size_t(total_k * hkv * d), 7 + d, t, -1.f, 1.f);
      for (size_t i = size_t(pk.total_k * hkv * d); i < kf.size(); ++i) kf[i] = vf[i] = NAN;
      std::vector<uint8_t> kh = encode(kf, t), vh = encode(vf, t);
      DeviceBuffer q(qh), k(kh), v(vh), cu_q(pk.cu_q.size() * 4), cu_k(pk.cu_k.size() * 4), uq(16), uk(16);
      cu_q.upload(pk.cu_q);
      cu_k.upload(pk.cu_k);
      uq.upload(used_q);
      uk.upload(used_k);
      const int64_t nout = pk.total_q * hq * d, nlse = hq * pk.total_q;
      DeviceBuffer out(size_t(nout) * 2), lse(size_t(nlse) * 4);
      out.fill(0xFF);
      lse.fill(0xFF);
      Fp8VarlenAttentionArgs a;
      a.q = make_tensor(q.get(), t, pk.total_q, hq, d);
      a.k = make_tensor(k.get(), t, total_k, hkv, d);
      a.v = make_tensor(v.get(), t, total_k, hkv, d);
      a.out = make_tensor(out.get(), t, pk.total_q, hq, d);
      a.lse = lse_tensor(lse.get(), hq, pk.total_q);
      a.cu_seqlens_q = index_tensor(cu_q.get(), pk.batch + 1);
      a.cu_seqlens_k = index_tensor(cu_k.get(), pk.batch + 1);
      a.seqused_q = index_tensor(uq.get(), pk.batch);
      a.seqused_k = index_tensor(uk.get(), pk.batch);
      a.max_seqlen_q = pk.max_q;
      a.max_seqlen_k = pk.max_k;
      a.causal = causal;
      DeviceBuffer ws(attention_fp8_varlen_workspace_size(a));
      ws.fill(0xFF);
      const Result r = attention_fp8_varlen(a, ws.get(), ws.bytes());
      ASSERT_TRUE(r.ok()) << r.message;
      HOPATTN_TEST_CUDA(cudaDeviceSynchronize());

      std::vector<float> lse_got(static_cast<size_t>(nlse));
      const Reference ref =
          varlen_reference(host_view(qh, a.q), host_view(kh, a.k), host_view(vh, a.v), pk, causal, &used_q, &used_k);
      const std::vector<uint8_t> got = out.download();
      lse.download(lse_got.data(), lse_got.size() * 4);
      const std::string name = "d" + std::to_string(d) + (causal ? " causal" : "");
      EXPECT_LE(rel_l2_error(decode(got.data(), size_t(nout), t), decode(ref.out.data(), size_t(nout), t)), 6e-2) << name;
      EXPECT_LE(lse_excess(lse_got, ref.lse, 0.1, 5e-3), 1.0) << name;
    }
  }
}

// forward_fp8_varlen: e4m3 inputs with per-(sequence, head, block) descales, against the fp64
// reference on the dequantised values (exact in bf16: descales are powers of two).
TEST(Sm90Fp8Varlen, ForwardFp8VarlenMatchesReferenceOnDequantisedInputs) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  std::mt19937_64 gen(1234);
  std::uniform_real_distribution<float> val(-2.f, 2.f);
  std::uniform_int_distribution<int> expo(-2, 2);
  for (int d : {64, 128, 256}) {
    if (find_fp8_kernel(DType::kFP16, d) == nullptr) continue;
    for (bool causal : {false, true}) {
      const std::vector<int> lens_q = {1, 260, 0, 129, 500}, lens_k = {40, 260, 7, 300, 129};
      Packed pk = pack(lens_q, lens_k);
      const int64_t hq = 4, hkv = 2, B = pk.batch;
      const int64_t nbq = (pk.max_q + 127) / 128, nbk = (pk.max_k + 127) / 128;
      auto codes = [&](int64_t n, std::vector<float>* values) {
        std::vector<uint8_t> c(static_cast<size_t>(n));
        values->resize(size_t(n));
        for (size_t i = 0; i < c.size(); ++i) {
          c[i] = f8::float_to_e4m3(val(gen));
          (*values)[i] = f8::e4m3_to_float(c[i]);
        }
        return c;
      };
      auto descales = [&](int64_t n) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& s : x) s = std::ldexp(1.f, expo(gen));
        return x;
      };
      std::vector<float> qf, kf, vf;
      const std::vector<uint8_t> q8 = codes(pk.total_q * hq * d, &qf), k8 = codes(pk.total_k * hkv * d, &kf),
                                 v8 = codes(pk.total_k * hkv * d, &vf);
      const std::vector<float> qd = descales(B * hq * nbq), kd = descales(B * hkv * nbk), vd = descales(B * hkv);
      // Dequantise: row i of sequence b, head h uses block i / 128 of (b, h).
      auto dequantise = [&](std::vector<float> x, const std::vector<int32_t>& cu, int64_t h_count,
                            const std::vector<float>& ds, int64_t nb, bool per_block) {
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = cu[size_t(b)]; i < cu[size_t(b + 1)]; ++i)
            for (int64_t h = 0; h < h_count; ++h) {
              const float s = ds[size_t((b * h_count + h) * nb + (per_block ? (i - cu[size_t(b)]) / 128 : 0))];
              for (int64_t e = 0; e < d; ++e) x[size_t((i * h_count + h) * d + e)] *= s;
            }
        return x;
      };
      std::vector<uint8_t> qb = encode(dequantise(qf, pk.cu_q, hq, qd, nbq, true), DType::kBF16);
      std::vector<uint8_t> kb = encode(dequantise(kf, pk.cu_k, hkv, kd, nbk, true), DType::kBF16);
      std::vector<uint8_t> vb = encode(dequantise(vf, pk.cu_k, hkv, vd, 1, false), DType::kBF16);

      DeviceBuffer q(q8), k(k8), v(v8), qdd(qd.size() * 4), kdd(kd.size() * 4), vdd(vd.size() * 4);
      qdd.upload(qd);
      kdd.upload(kd);
      vdd.upload(vd);
      DeviceBuffer cu_q(pk.cu_q.size() * 4), cu_k(pk.cu_k.size() * 4);
      cu_q.upload(pk.cu_q);
      cu_k.upload(pk.cu_k);
      const int64_t nout = pk.total_q * hq * d, nlse = hq * pk.total_q;
      DeviceBuffer out(size_t(nout) * 2), lse(size_t(nlse) * 4);
      out.fill(0xFF);
      lse.fill(0xFF);
      Fp8VarlenForwardArgs a;
      a.q = make_tensor(q.get(), DType::kE4M3, pk.total_q, hq, d);
      a.k = make_tensor(k.get(), DType::kE4M3, pk.total_k, hkv, d);
      a.v = make_tensor(v.get(), DType::kE4M3, pk.total_k, hkv, d);
      a.q_descale = make_tensor(qdd.get(), DType::kFP32, B, hq, nbq);
      a.k_descale = make_tensor(kdd.get(), DType::kFP32, B, hkv, nbk);
      a.v_descale = make_tensor(vdd.get(), DType::kFP32, B, hkv, 1);
      a.v_descale.ndim = 2;
      a.out = make_tensor(out.get(), DType::kFP16, pk.total_q, hq, d);
      a.lse = lse_tensor(lse.get(), hq, pk.total_q);
      a.cu_seqlens_q = index_tensor(cu_q.get(), B + 1);
      a.cu_seqlens_k = index_tensor(cu_k.get(), B + 1);
      a.max_seqlen_q = pk.max_q;
      a.max_seqlen_k = pk.max_k;
      a.causal = causal;
      const size_t ws_bytes = forward_fp8_varlen_workspace_size(a);
      ASSERT_GT(ws_bytes, 0u);
      DeviceBuffer ws(ws_bytes);
      ws.fill(0xFF);
      const Result r = forward_fp8_varlen(a, ws.get(), ws_bytes);
      ASSERT_TRUE(r.ok()) << r.message;
      HOPATTN_TEST_CUDA(cudaDeviceSynchronize());

      std::vector<float> lse_got(static_cast<size_t>(nlse));
      const Reference ref = varlen_reference(make_tensor(qb.data(), DType::kBF16, pk.total_q, hq, d),
                                             make_tensor(kb.data(), DType::kBF16, pk.total_k, hkv, d),
                                             make_tensor(vb.data(), DType::kBF16, pk.total_k, hkv, d), pk, causal);
      const std::vector<uint8_t> got = out.download();
      lse.download(lse_got.data(), lse_got.size() * 4);
      const std::string name = "d" + std::to_string(d) + (causal ? " causal" : "");
      // As the fixed-length forward_fp8 test: P in e4m3 and 16-bit output rounding only.
      EXPECT_LE(rel_l2_error(decode(got.data(), size_t(nout), DType::kFP16),
                             decode(ref.out.data(), size_t(nout), DType::kBF16)),
                2.5e-2)
          << name;
      EXPECT_LE(lse_excess(lse_got, ref.lse, 2e-3, 2e-3), 1.0) << name;
    }
  }
}

// check_index_values reads the device index tensors and names the bad one.
TEST(Sm90Fp8Varlen, CheckIndexValuesNamesTheBadTensor) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  if (find_fp8_kernel(DType::kBF16, 128) == nullptr) GTEST_SKIP() << "not built";
  const int64_t total = 64, h = 2, d = 128;
  DeviceBuffer q(size_t(total * h * d) * 2), out(size_t(total * h * d) * 2), cu_q(12), cu_k(12);
  q.fill(0x3C);
  std::vector<int32_t> good = {0, 30, 64}, bad = {0, 40, 30};
  cu_q.upload(good);
  cu_k.upload(bad);
  Fp8VarlenAttentionArgs a;
  a.q = a.k = a.v = make_tensor(q.get(), DType::kBF16, total, h, d);
  a.out = make_tensor(out.get(), DType::kBF16, total, h, d);
  a.cu_seqlens_q = index_tensor(cu_q.get(), 3);
  a.cu_seqlens_k = index_tensor(cu_k.get(), 3);
  a.max_seqlen_q = a.max_seqlen_k = 64;
  a.check_index_values = true;
  DeviceBuffer ws(attention_fp8_varlen_workspace_size(a));
  const Result r = attention_fp8_varlen(a, ws.get(), ws.bytes());
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("cu_seqlens_k[2]"), std::string::npos) << r.message;
}

// The packed calls' workspace ends with the tile counter (256 bytes after V^T): a workspace sized
// without it, or none, is refused before anything runs, naming the workspace.
TEST(Sm90Fp8Varlen, WorkspaceWithoutRoomForTheTileCounterIsRejected) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  if (find_fp8_kernel(DType::kBF16, 64) == nullptr) GTEST_SKIP() << "not built";
  const int64_t total = 64, h = 2, d = 64;
  DeviceBuffer q(size_t(total * h * d) * 2), out(size_t(total * h * d) * 2), cu(12);
  q.fill(0x3C);
  cu.upload(std::vector<int32_t>{0, 30, 64});
  Fp8VarlenAttentionArgs a;
  a.q = a.k = a.v = make_tensor(q.get(), DType::kBF16, total, h, d);
  a.out = make_tensor(out.get(), DType::kBF16, total, h, d);
  a.cu_seqlens_q = a.cu_seqlens_k = index_tensor(cu.get(), 3);
  a.max_seqlen_q = a.max_seqlen_k = 34;
  const size_t need = attention_fp8_varlen_workspace_size(a);
  ASSERT_GT(need, 256u);
  DeviceBuffer ws(need);
  Result r = attention_fp8_varlen(a, ws.get(), need - 256);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("workspace_bytes"), std::string::npos) << r.message;
  r = attention_fp8_varlen(a, nullptr, 0);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("workspace is null"), std::string::npos) << r.message;

  // forward_fp8_varlen on e4m3 inputs (descales absent: 1): V^T alone is 256 bytes short.
  Fp8VarlenForwardArgs f;
  f.q = f.k = f.v = make_tensor(q.get(), DType::kE4M3, total, h, d);
  f.out = a.out;
  f.cu_seqlens_q = f.cu_seqlens_k = a.cu_seqlens_q;
  f.max_seqlen_q = f.max_seqlen_k = 34;
  const size_t need_f = forward_fp8_varlen_workspace_size(f);
  ASSERT_GT(need_f, 256u);
  r = forward_fp8_varlen(f, ws.get(), need_f - 256);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("workspace_bytes"), std::string::npos) << r.message;
  EXPECT_TRUE(forward_fp8_varlen(f, ws.get(), need_f).ok());  // the full size runs
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace hopattn::test
