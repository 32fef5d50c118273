// Variable-length batches on the CPU: forward_varlen_cpu against forward_cpu run on each sequence
// separately (bitwise), the rows it must zero (beyond seqused, no visible key) and the rows it must
// not touch (past cu_seqlens_q[batch]); one test per rule of validate_forward_varlen; and the int32
// dtype rejected wherever attention data is expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"
#include "../common/varlen_util.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {
namespace {

constexpr float kSentinel = 7.f;      // pre-filled into out: exact in every dtype
constexpr float kLseSentinel = 123.f;  // pre-filled into lse

struct VarlenCase {
  std::vector<int> len_q, len_k;
  std::optional<std::vector<int>> used_q, used_k;
  int64_t heads_q = 4, heads_kv = 1, head_dim = 16;
  DType dtype = DType::kFP32;
  bool causal = false;
  int64_t extra_q = 3, extra_k = 2;  // packed rows past cu_seqlens[batch]: never read or written
  int64_t token_pad = 0;             // extra elements per token row (a strided layout)
};

std::string describe(const VarlenCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : " non-causal") +
                  (c.used_q ? " seqused_q" : "") + (c.used_k ? " seqused_k" : "") + " hq=" +
                  std::to_string(c.heads_q) + " hkv=" + std::to_string(c.heads_kv) + " pad=" + std::to_string(c.token_pad);
  return s;
}

// Runs forward_varlen_cpu on `c`, then checks every row of out and lse: sequence rows against
// forward_cpu on that sequence alone (bitwise), rows beyond seqused_q as 0 / -inf, uncovered rows
// still holding the sentinels.
void check_against_per_sequence(const VarlenCase& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  const int64_t batch = static_cast<int64_t>(c.len_q.size());
  std::vector<int32_t> cu_q = prefix_sums(c.len_q), cu_k = prefix_sums(c.len_k);
  const int64_t total_q = cu_q.back() + c.extra_q, total_k = cu_k.back() + c.extra_k;
  const int64_t hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim, es = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t q_row = hq * d + c.token_pad, k_row = hkv * d + c.token_pad;  // token strides

  const std::vector<float> qf = random_values(static_cast<size_t>(total_q * q_row), seed, c.dtype);
  const std::vector<float> kf = random_values(static_cast<size_t>(total_k * k_row), seed + 1, c.dtype);
  const std::vector<float> vf = random_values(static_cast<size_t>(total_k * k_row), seed + 2, c.dtype);
  std::vector<uint8_t> q = encode(qf, c.dtype), k = encode(kf, c.dtype), v = encode(vf, c.dtype);
  std::vector<uint8_t> out = encode(std::vector<float>(static_cast<size_t>(total_q * q_row), kSentinel), c.dtype);
  const std::vector<uint8_t> sentinel_row = encode(std::vector<float>(static_cast<size_t>(d), kSentinel), c.dtype);
  std::vector<float> lse(static_cast<size_t>(hq * total_q), kLseSentinel);

  std::vector<int32_t> used_q, used_k;
  VarlenForwardArgs a;
  a.q = packed(q.data(), c.dtype, total_q, hq, d, q_row);
  a.k = packed(k.data(), c.dtype, total_k, hkv, d, k_row);
  a.v = packed(v.data(), c.dtype, total_k, hkv, d, k_row);
  a.out = packed(out.data(), c.dtype, total_q, hq, d, q_row);
  a.lse = lse_tensor(lse.data(), hq, total_q);
  a.cu_seqlens_q = index_tensor(cu_q);
  a.cu_seqlens_k = index_tensor(cu_k);
  a.max_seqlen_q = *std::max_element(c.len_q.begin(), c.len_q.end());
  a.max_seqlen_k = *std::max_element(c.len_k.begin(), c.len_k.end());
  if (c.used_q) {
    used_q.assign(c.used_q->begin(), c.used_q->end());
    a.seqused_q = index_tensor(used_q);
  }
  if (c.used_k) {
    used_k.assign(c.used_k->begin(), c.used_k->end());
    a.seqused_k = index_tensor(used_k);
  }
  a.causal = c.causal;
  const Result r = forward_varlen_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;

  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < batch; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const int64_t sq = c.used_q ? (*c.used_q)[b] : c.len_q[b];
    const int64_t sk = c.used_k ? (*c.used_k)[b] : c.len_k[b];
    // The sequence alone, contiguous (1, sq, hq, d) / (1, sk, hkv, d), through forward_cpu.
    std::vector<uint8_t> q1(static_cast<size_t>(sq * hq * d * es)), k1(static_cast<size_t>(sk * hkv * d * es)),
        v1(k1.size()), out1(q1.size(), 0xFF);
    std::vector<float> lse1(static_cast<size_t>(hq * sq), 0.f);
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h)
        std::memcpy(&q1[((i * hq + h) * d) * es], &q[((cu_q[b] + i) * q_row + h * d) * es], d * es);
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t h = 0; h < hkv; ++h) {
        std::memcpy(&k1[((j * hkv + h) * d) * es], &k[((cu_k[b] + j) * k_row + h * d) * es], d * es);
        std::memcpy(&v1[((j * hkv + h) * d) * es], &v[((cu_k[b] + j) * k_row + h * d) * es], d * es);
      }
    ForwardArgs f;
    f.q = make_tensor(q1.data(), c.dtype, 1, sq, hq, d);
    f.k = make_tensor(k1.data(), c.dtype, 1, sk, hkv, d);
    f.v = make_tensor(v1.data(), c.dtype, 1, sk, hkv, d);
    f.out = make_tensor(out1.data(), c.dtype, 1, sq, hq, d);
    f.lse = make_tensor(lse1.data(), DType::kFP32, 1, hq, sq);
    f.causal = c.causal;
    const Result rf = forward_cpu(f);
    ASSERT_TRUE(rf.ok()) << rf.message;

    for (int64_t i = 0; i < c.len_q[b]; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const uint8_t* got = &out[((cu_q[b] + i) * q_row + h * d) * es];
        const float got_lse = lse[h * total_q + cu_q[b] + i];
        if (i < sq) {
          ASSERT_EQ(std::memcmp(got, &out1[((i * hq + h) * d) * es], d * es), 0) << "out row " << i << " head " << h;
          const float want_lse = lse1[h * sq + i];
          ASSERT_EQ(std::memcmp(&got_lse, &want_lse, 4), 0)
              << "lse row " << i << " head " << h << ": " << got_lse << " vs " << want_lse;
        } else {  // beyond seqused_q
          for (int64_t x = 0; x < d * es; ++x) ASSERT_EQ(got[x], 0) << "out row " << i << " (beyond seqused) head " << h;
          ASSERT_EQ(got_lse, neg_inf) << "lse row " << i << " (beyond seqused) head " << h;
        }
      }
  }
  // Rows past cu_seqlens_q[batch]: untouched (and so is the padding of every row).
  for (int64_t t = cu_q.back(); t < total_q; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      ASSERT_EQ(std::memcmp(&out[(t * q_row + h * d) * es], sentinel_row.data(), d * es), 0) << "uncovered out row " << t;
      ASSERT_EQ(lse[h * total_q + t], kLseSentinel) << "uncovered lse row " << t;
    }
  for (int64_t t = 0; t < total_q; ++t)
    for (int64_t x = hq * d; x < q_row; ++x)
      ASSERT_EQ(decode(&out[(t * q_row + x) * es], 1, c.dtype)[0], kSentinel) << "padding of out row " << t;
}

// ---- (a) equality with forward_cpu per sequence -------------------------------------------------

const std::vector<int> kLenQ = {0, 1, 17, 64, 5};
const std::vector<int> kLenK = {3, 0, 40, 64, 9};

TEST(Varlen, MatchesPerSequenceForward) {
  uint64_t seed = 100;
  for (DType dtype : {DType::kFP32, DType::kBF16})
    for (bool causal : {false, true})
      for (int with_used = 0; with_used < 2; ++with_used) {
        VarlenCase c;
        c.len_q = kLenQ;
        c.len_k = kLenK;
        c.dtype = dtype;
        c.causal = causal;
        c.heads_q = 4;
        c.heads_kv = 1;  // GQA 4:1
        if (with_used) {
          c.used_q = std::vector<int>{0, 1, 9, 64, 0};
          c.used_k = std::vector<int>{2, 0, 40, 30, 9};
        }
        check_against_per_sequence(c, seed += 10);
        if (HasFatalFailure()) return;
      }
}

TEST(Varlen, MatchesPerSequenceForwardFp16MhaAndStrided) {
  VarlenCase c;
  c.len_q = kLenQ;
  c.len_k = kLenK;
  c.dtype = DType::kFP16;
  c.heads_q = 2;
  c.heads_kv = 2;
  c.token_pad = 8;
  for (bool causal : {false, true}) {
    c.causal = causal;
    check_against_per_sequence(c, causal ? 7 : 8);
  }
}

TEST(Varlen, OnlyOneSideHasSeqused) {
  VarlenCase c;
  c.len_q = kLenQ;
  c.len_k = kLenK;
  c.causal = true;
  c.used_k = std::vector<int>{1, 0, 17, 63, 4};
  check_against_per_sequence(c, 1);
  c.used_k.reset();
  c.used_q = std::vector<int>{0, 0, 17, 1, 5};
  check_against_per_sequence(c, 2);
}

TEST(Varlen, EmptyBatchAndAllEmptySequences) {
  VarlenCase c;
  c.len_q = {0, 0};
  c.len_k = {0, 5};
  check_against_per_sequence(c, 3);
  // batch 0: cu_seqlens = {0}; nothing is written.
  std::vector<int32_t> cu = {0};
  std::vector<float> buf(4 * 2 * 8, kSentinel), lse(2 * 4, kLseSentinel);
  VarlenForwardArgs a;
  a.q = make_tensor(buf.data(), DType::kFP32, 4, 2, 8);
  a.k = make_tensor(buf.data(), DType::kFP32, 4, 2, 8);
  a.v = make_tensor(buf.data(), DType::kFP32, 4, 2, 8);
  a.out = make_tensor(buf.data(), DType::kFP32, 4, 2, 8);
  a.lse = lse_tensor(lse.data(), 2, 4);
  a.cu_seqlens_q = index_tensor(cu);
  a.cu_seqlens_k = index_tensor(cu);
  const Result r = forward_varlen_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;
  for (float x : buf) EXPECT_EQ(x, kSentinel);
  for (float x : lse) EXPECT_EQ(x, kLseSentinel);
}

// ---- (b) the rows defined as 0 / -inf, and untouched rows ---------------------------------------

TEST(Varlen, RowsWithoutKeysAndBeyondSeqused) {
  // Sequence 0: 5 queries, 2 keys, causal: query i sees keys j <= i - 3, so rows 0..2 see none.
  // Sequence 1: 3 queries, no keys. Sequence 2: 4 queries of which seqused_q keeps 1.
  std::vector<int32_t> cu_q = {0, 5, 8, 12}, cu_k = {0, 2, 2, 6}, used_q = {5, 3, 1};
  const int64_t total_q = 14, total_k = 6, hq = 2, d = 4;  // rows 12, 13: uncovered
  std::vector<float> q = random_values(total_q * hq * d, 1), k = random_values(total_k * hq * d, 2),
                     v = random_values(total_k * hq * d, 3);
  std::vector<float> out(total_q * hq * d, kSentinel), lse(hq * total_q, kLseSentinel);
  VarlenForwardArgs a;
  a.q = make_tensor(q.data(), DType::kFP32, total_q, hq, d);
  a.k = make_tensor(k.data(), DType::kFP32, total_k, hq, d);
  a.v = make_tensor(v.data(), DType::kFP32, total_k, hq, d);
  a.out = make_tensor(out.data(), DType::kFP32, total_q, hq, d);
  a.lse = lse_tensor(lse.data(), hq, total_q);
  a.cu_seqlens_q = index_tensor(cu_q);
  a.cu_seqlens_k = index_tensor(cu_k);
  a.seqused_q = index_tensor(used_q);
  a.max_seqlen_q = 5;
  a.max_seqlen_k = 4;
  a.causal = true;
  const Result r = forward_varlen_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  auto row_is = [&](int64_t t, float value) {
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t c = 0; c < d; ++c)
        if (out[(t * hq + h) * d + c] != value) return false;
    return true;
  };
  for (int64_t t : {0, 1, 2, 5, 6, 7, 9, 10, 11}) {  // no visible key, or beyond seqused_q
    EXPECT_TRUE(row_is(t, 0.f)) << "row " << t;
    for (int64_t h = 0; h < hq; ++h) EXPECT_EQ(lse[h * total_q + t], neg_inf) << "row " << t << " head " << h;
  }
  for (int64_t t : {3, 4, 8}) {  // rows that see keys: finite lse, out a convex mix of v rows
    for (int64_t h = 0; h < hq; ++h) EXPECT_TRUE(std::isfinite(lse[h * total_q + t])) << "row " << t;
    EXPECT_FALSE(row_is(t, 0.f)) << "row " << t;
  }
  // Row 3 sees key 0 only: out equals v row 0 (of its head) and lse the single scaled score.
  for (int64_t h = 0; h < hq; ++h) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_FLOAT_EQ(out[(3 * hq + h) * d + c], v[(0 * hq + h) * d + c]);
      dot += double(q[(3 * hq + h) * d + c]) * k[(0 * hq + h) * d + c];
    }
    EXPECT_NEAR(lse[h * total_q + 3], dot / std::sqrt(double(d)), 1e-6);
  }
  for (int64_t t : {12, 13}) {  // beyond cu_seqlens_q[batch]
    EXPECT_TRUE(row_is(t, kSentinel)) << "row " << t;
    for (int64_t h = 0; h < hq; ++h) EXPECT_EQ(lse[h * total_q + t], kLseSentinel) << "row " << t;
  }
}

TEST(Varlen, LseIsOptional) {
  std::vector<int32_t> cu = {0, 3, 7};
  std::vector<float> q = random_values(7 * 2 * 8, 5), out(7 * 2 * 8, kSentinel);
  VarlenForwardArgs a;
  a.q = a.k = a.v = make_tensor(q.data(), DType::kFP32, 7, 2, 8);
  a.out = make_tensor(out.data(), DType::kFP32, 7, 2, 8);
  a.cu_seqlens_q = a.cu_seqlens_k = index_tensor(cu);
  a.max_seqlen_q = a.max_seqlen_k = 4;
  const Result r = forward_varlen_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;
  for (float x : out) ASSERT_TRUE(std::isfinite(x) && x != kSentinel);
}

// ---- (c) validation rules -----------------------------------------------------------------------

alignas(256) unsigned char g_fake_memory[1024];  // validation never reads the attention data

// Real index arrays (the CPU path reads them) around fake q/k/v/out/lse. Batch 3: q lengths
// {4, 0, 6} of total_q 12, k lengths {5, 2, 0} of total_k 8; heads 4/2; head_dim 16.
struct ValidArgs {
  std::vector<int32_t> cu_q = {0, 4, 4, 10}, cu_k = {0, 5, 7, 7}, used_q = {4, 0, 3}, used_k = {5, 1, 0};
  VarlenForwardArgs a;
  ValidArgs() {
    a.q = make_tensor(g_fake_memory, DType::kBF16, 12, 4, 16);
    a.k = make_tensor(g_fake_memory, DType::kBF16, 8, 2, 16);
    a.v = make_tensor(g_fake_memory, DType::kBF16, 8, 2, 16);
    a.out = make_tensor(g_fake_memory, DType::kBF16, 12, 4, 16);
    a.lse = lse_tensor(reinterpret_cast<float*>(g_fake_memory), 4, 12);
    a.cu_seqlens_q = index_tensor(cu_q);
    a.cu_seqlens_k = index_tensor(cu_k);
    a.seqused_q = index_tensor(used_q);
    a.seqused_k = index_tensor(used_k);
    a.max_seqlen_q = 6;
    a.max_seqlen_k = 5;
  }
  ValidArgs(const ValidArgs&) = delete;
};

using Mutation = std::function<void(ValidArgs&)>;

// Mutates valid args; checks validate_forward_varlen (kCpu) and forward_varlen_cpu agree on the
// rejection, its status, and that the message holds `fragment`.
void expect_rejected(const Mutation& mutate, Status status, const std::string& fragment) {
  ValidArgs v;
  mutate(v);
  VarlenProblem p;
  const Result r = validate_forward_varlen(v.a, Backend::kCpu, &p);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(status)) << r.message;
  EXPECT_NE(r.message.find(fragment), std::string::npos) << "message \"" << r.message << "\" lacks \"" << fragment << "\"";
  if (r.ok()) return;  // a valid call would read the fake pointers
  const Result api = forward_varlen_cpu(v.a);
  EXPECT_EQ(api.status, r.status);
  EXPECT_EQ(api.message, r.message);
}

void expect_invalid(const Mutation& mutate, const std::string& fragment) {
  expect_rejected(mutate, Status::kInvalidArgument, fragment);
}

TEST(VarlenValidation, ValidArgsFillTheProblem) {
  ValidArgs v;
  VarlenProblem p;
  const Result r = validate_forward_varlen(v.a, Backend::kCpu, &p);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.total_q, 12);
  EXPECT_EQ(p.total_k, 8);
  EXPECT_EQ(p.group(), 2);
  EXPECT_EQ(p.head_dim, 16);
  EXPECT_EQ(p.max_seqlen_q, 6);
  EXPECT_EQ(p.q_stride[0], 64);
  EXPECT_EQ(p.k_stride[1], 16);
  EXPECT_EQ(p.cu_seqlens_q, v.cu_q.data());
  EXPECT_EQ(p.seqused_k, v.used_k.data());
  EXPECT_FLOAT_EQ(p.scale, 0.25f);
  // seqused and lse are optional.
  v.a.seqused_q = TensorRef{};
  v.a.seqused_k = TensorRef{};
  v.a.lse = TensorRef{};
  ASSERT_TRUE(validate_forward_varlen(v.a, Backend::kCpu, &p).ok());
  EXPECT_EQ(p.seqused_q, nullptr);
  EXPECT_EQ(p.lse, nullptr);
}

// The first built kernel's dtype and head_dim: the sm90 checks also require a kernel for them.
std::pair<DType, int64_t> first_built() {
  const std::string built = build_instantiations();
  const std::string first = built.substr(0, built.find(','));
  const size_t c1 = first.find(':'), c2 = first.rfind(':');
  return {first.substr(c1 + 1, c2 - c1 - 1) == "fp16" ? DType::kFP16 : DType::kBF16, std::atoll(first.c_str() + c2 + 1)};
}

TEST(VarlenValidation, ValueChecksAreCpuOnly) {
  // The GPU path cannot read device-side cu_seqlens without a copy: shape checks only (the value
  // checks are its check_index_values mode). Needs a built sm90 kernel for the dtype/head_dim.
  const auto [dtype, d] = first_built();
  ValidArgs v;
  v.a.q = make_tensor(g_fake_memory, dtype, 12, 4, d);
  v.a.out = make_tensor(g_fake_memory, dtype, 12, 4, d);
  v.a.k = v.a.v = make_tensor(g_fake_memory, dtype, 8, 2, d);
  v.cu_q[2] = 1;  // decreasing
  VarlenProblem p;
  EXPECT_TRUE(validate_forward_varlen(v.a, Backend::kSm90, &p).ok());
  const VarlenProblem pg = p;  // the GPU path's problem, for its host-copy value checks below
  const Result r = validate_forward_varlen(v.a, Backend::kCpu, &p);
  EXPECT_FALSE(r.ok());
  // The GPU path's check_index_values mode runs the same value rules on host copies.
  const Result hv = check_varlen_index_values(pg, v.cu_q.data(), v.cu_k.data(), v.used_q.data(), v.used_k.data());
  EXPECT_EQ(hv.message, r.message);
  v.cu_q[2] = 4;
  v.used_k[1] = 3;  // sequence 1 has 2 keys
  const Result hk = check_varlen_index_values(pg, v.cu_q.data(), v.cu_k.data(), v.used_q.data(), v.used_k.data());
  EXPECT_NE(hk.message.find("seqused_k[1]=3 is outside [0, 2]"), std::string::npos) << hk.message;
  // Shape rules still apply on the GPU.
  v.a.cu_seqlens_k.sizes[0] = 3;
  EXPECT_EQ(validate_forward_varlen(v.a, Backend::kSm90, &p).status, Status::kInvalidArgument);
  // A head dim without an sm90 kernel is named on the GPU path; the CPU reference takes it.
  ValidArgs w;
  for (TensorRef* t : {&w.a.q, &w.a.out}) *t = make_tensor(g_fake_memory, dtype, 12, 4, 96);
  w.a.k = w.a.v = make_tensor(g_fake_memory, dtype, 8, 2, 96);
  const Result r96 = validate_forward_varlen(w.a, Backend::kSm90, &p);
  EXPECT_EQ(r96.status, Status::kUnsupported) << r96.message;
  EXPECT_NE(r96.message.find("head_dim 96"), std::string::npos) << r96.message;
  EXPECT_TRUE(validate_forward_varlen(w.a, Backend::kCpu, &p).ok());
  // Only the CPU reference and the sm90 kernels take packed batches.
  EXPECT_EQ(validate_forward_varlen(w.a, Backend::kCudaReference, &p).status, Status::kUnsupported);
}

TEST(VarlenValidation, PackedTensorShapes) {
  expect_invalid([](ValidArgs& v) { v.a.q.ndim = 4; }, "q: expected 3 dims");
  expect_invalid([](ValidArgs& v) { v.a.out.ndim = 2; }, "out: expected 3 dims");
  expect_invalid([](ValidArgs& v) { v.a.k.sizes[0] = -1; }, "k.sizes[0] is negative");
  expect_invalid([](ValidArgs& v) { v.a.v.strides[1] = -1; }, "v.strides[1] is negative");
  expect_invalid([](ValidArgs& v) { v.a.q.strides[2] = 2; }, "q: last dim (head_dim) must be contiguous");
  expect_invalid([](ValidArgs& v) { v.a.k.data = nullptr; }, "k.data is null");
  expect_invalid([](ValidArgs& v) { v.a.q.sizes[0] = v.a.out.sizes[0] = int64_t{1} << 31; }, "q.sizes[0]");
}

TEST(VarlenValidation, ExtentOverlapAndRows) {
  expect_invalid([](ValidArgs& v) { v.a.v.strides[0] = int64_t{1} << 62; }, "v: sizes (8, 2, 16) and strides");
  expect_invalid([](ValidArgs& v) { v.a.out.strides[0] = 0; }, "out: strides (0, ");
  // 2^30 tokens x 4 heads of a broadcast q: 2^32 query rows.
  expect_invalid([](ValidArgs& v) {
    v.a.q.sizes[0] = v.a.out.sizes[0] = int64_t{1} << 30;
    v.a.q.strides[0] = 0;
    v.a.out.strides[0] = 4 * 16;
    v.a.lse = TensorRef{};
  }, "q: total_q x heads_q = 1073741824 x 4");
  // 2^30 key tokens x 2 kv heads of a broadcast k and v: 2^31 key rows.
  expect_invalid([](ValidArgs& v) {
    for (TensorRef* t : {&v.a.k, &v.a.v}) {
      t->sizes[0] = int64_t{1} << 30;
      t->strides[0] = 0;
    }
  }, "k: total_k x heads_kv = 1073741824 x 2");
  // A broadcast k is an input: fine.
  ValidArgs v;
  v.a.k.strides[0] = 0;
  VarlenProblem p;
  EXPECT_TRUE(validate_forward_varlen(v.a, Backend::kCpu, &p).ok());
}

TEST(VarlenValidation, DtypesAgree) {
  expect_invalid([](ValidArgs& v) { v.a.k.dtype = DType::kFP16; }, "k: dtype fp16 differs from q's bf16");
  expect_invalid([](ValidArgs& v) { v.a.v.dtype = static_cast<DType>(7); }, "v: dtype");
}

TEST(VarlenValidation, HeadDimsAndHeads) {
  expect_invalid([](ValidArgs& v) { v.a.k.sizes[2] = 8; }, "k.sizes[2] (head_dim)=8");
  expect_rejected([](ValidArgs& v) { v.a.v.sizes[2] = 8; }, Status::kUnsupported, "v.sizes[2] (head_dim)=8");
  expect_invalid([](ValidArgs& v) { v.a.v.sizes[0] = 7; }, "v.sizes[0] (total_k)=7");
  expect_invalid([](ValidArgs& v) { v.a.v.sizes[1] = 1; }, "v.sizes[1] (heads_kv)=1");
  expect_invalid([](ValidArgs& v) { v.a.out.sizes[1] = 2; }, "out.sizes[1]=2 but q.sizes[1]=4");
  expect_invalid([](ValidArgs& v) { v.a.k.sizes[1] = v.a.v.sizes[1] = 3; }, "heads_q=4 is not a multiple of heads_kv=3");
  expect_invalid([](ValidArgs& v) { v.a.k.sizes[1] = v.a.v.sizes[1] = 0; }, "k.sizes[1] (heads_kv) is 0");
  expect_invalid(
      [](ValidArgs& v) {
        for (TensorRef* t : {&v.a.q, &v.a.k, &v.a.v, &v.a.out}) t->sizes[2] = 0;
      },
      "q.sizes[2] (head_dim) is 0");
}

TEST(VarlenValidation, Lse) {
  expect_invalid([](ValidArgs& v) { v.a.lse.dtype = DType::kBF16; }, "lse: dtype must be fp32");
  expect_invalid([](ValidArgs& v) { v.a.lse.ndim = 3; }, "lse: expected 2 dims (heads_q, total_q)");
  expect_invalid([](ValidArgs& v) { v.a.lse.sizes[1] = 10; }, "lse.sizes[1]=10 but expected 12");
  expect_invalid([](ValidArgs& v) { v.a.lse.sizes[0] = 2; }, "lse.sizes[0]=2 but expected 4");
  expect_invalid([](ValidArgs& v) { v.a.lse.strides[0] = 16; }, "lse must be contiguous: strides[0]=16");
  expect_invalid([](ValidArgs& v) { v.a.lse.data = g_fake_memory + 2; }, "lse.data is not 4-byte aligned");
}

TEST(VarlenValidation, SoftmaxScale) {
  expect_invalid([](ValidArgs& v) { v.a.softmax_scale = 0.f; }, "softmax_scale must be finite and > 0");
  expect_invalid([](ValidArgs& v) { v.a.softmax_scale = std::nanf(""); }, "softmax_scale");
}

TEST(VarlenValidation, CuSeqlensForm) {
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_q.ndim = 2; }, "cu_seqlens_q: expected 1 dim");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_q.sizes[0] = 0; }, "cu_seqlens_q.sizes[0]=0 but must be batch + 1 >= 1");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_q.dtype = DType::kFP32; }, "cu_seqlens_q: dtype must be int32, got fp32");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_k.dtype = DType::kBF16; }, "cu_seqlens_k: dtype must be int32, got bf16");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_k.ndim = 0; }, "cu_seqlens_k: expected 1 dim");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_k.sizes[0] = 3; }, "cu_seqlens_k.sizes[0]=3 but expected 4");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_q.strides[0] = 2; }, "cu_seqlens_q must be contiguous");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_k.data = nullptr; }, "cu_seqlens_k.data is null");
  expect_invalid([](ValidArgs& v) { v.a.cu_seqlens_q.data = g_fake_memory + 2; }, "cu_seqlens_q.data is not 4-byte aligned");
}

TEST(VarlenValidation, SequsedForm) {
  expect_invalid([](ValidArgs& v) { v.a.seqused_q.sizes[0] = 4; }, "seqused_q.sizes[0]=4 but expected 3");
  expect_invalid([](ValidArgs& v) { v.a.seqused_k.dtype = DType::kFP32; }, "seqused_k: dtype must be int32");
  expect_invalid([](ValidArgs& v) { v.a.seqused_k.ndim = 2; }, "seqused_k: expected 1 dim");
  expect_invalid([](ValidArgs& v) { v.a.seqused_q.data = nullptr; }, "seqused_q.data is null");
}

TEST(VarlenValidation, MaxSeqlenNonNegative) {
  expect_invalid([](ValidArgs& v) { v.a.max_seqlen_q = -1; }, "max_seqlen_q=-1 is negative");
  expect_invalid([](ValidArgs& v) { v.a.max_seqlen_k = -2; }, "max_seqlen_k=-2 is negative");
}

TEST(VarlenValidation, CuSeqlensStartAtZero) {
  expect_invalid([](ValidArgs& v) { v.cu_q[0] = 1; }, "cu_seqlens_q[0]=1 but must be 0");
  expect_invalid([](ValidArgs& v) { v.cu_k[0] = -1; }, "cu_seqlens_k[0]=-1 but must be 0");
}

TEST(VarlenValidation, CuSeqlensNonDecreasing) {
  expect_invalid(
      [](ValidArgs& v) {
        v.cu_q = {0, 4, 12, 10};
        v.a.cu_seqlens_q.data = v.cu_q.data();
        v.a.max_seqlen_q = 8;
      },
      "cu_seqlens_q[3]=10 is less than cu_seqlens_q[2]=12 (must be non-decreasing)");
  expect_invalid([](ValidArgs& v) { v.cu_k[2] = 4; }, "cu_seqlens_k[2]=4 is less than cu_seqlens_k[1]=5");
}

TEST(VarlenValidation, CuSeqlensWithinTotal) {
  expect_invalid([](ValidArgs& v) { v.a.q.sizes[0] = v.a.out.sizes[0] = v.a.lse.sizes[1] = v.a.lse.strides[0] = 9; },
                 "cu_seqlens_q[3]=10 exceeds the total tokens q.sizes[0]=9");
  expect_invalid([](ValidArgs& v) { v.a.k.sizes[0] = v.a.v.sizes[0] = 6; },
                 "cu_seqlens_k[3]=7 exceeds the total tokens k.sizes[0]=6");
}

TEST(VarlenValidation, LengthsWithinMaxSeqlen) {
  expect_invalid([](ValidArgs& v) { v.a.max_seqlen_q = 5; }, "cu_seqlens_q[3]-cu_seqlens_q[2]=6 (sequence 2) exceeds max_seqlen_q=5");
  expect_invalid([](ValidArgs& v) { v.a.max_seqlen_k = 4; }, "cu_seqlens_k[1]-cu_seqlens_k[0]=5 (sequence 0) exceeds max_seqlen_k=4");
}

TEST(VarlenValidation, SequsedWithinLength) {
  expect_invalid([](ValidArgs& v) { v.used_q[2] = 7; }, "seqused_q[2]=7 is outside [0, 6]");
  expect_invalid([](ValidArgs& v) { v.used_q[1] = 1; }, "seqused_q[1]=1 is outside [0, 0]");
  expect_invalid([](ValidArgs& v) { v.used_k[0] = -1; }, "seqused_k[0]=-1 is outside [0, 5]");
}

TEST(VarlenValidation, Int32DataRejected) {
  const char* names[] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(names[i]);
    expect_invalid(
        [i](ValidArgs& v) {
          TensorRef* t[] = {&v.a.q, &v.a.k, &v.a.v, &v.a.out};
          t[i]->dtype = DType::kInt32;
        },
        std::string(names[i]) + ": dtype int32 is not supported");
  }
  expect_invalid([](ValidArgs& v) { v.a.lse.dtype = DType::kInt32; }, "lse: dtype must be fp32, got int32");
}

// ---- (d) int32 in the fixed-length forward and backward validation ------------------------------

// ---- the GPU entry points' argument checks (they run before any device is needed) ---------------

TEST(VarlenValidation, MaxSeqlenFitsTheKernelsIndices) {
  const auto [dtype, d] = first_built();
  ValidArgs v;
  v.a.q = v.a.out = make_tensor(g_fake_memory, dtype, 12, 4, d);
  v.a.k = v.a.v = make_tensor(g_fake_memory, dtype, 8, 2, d);
  VarlenProblem p;
  ASSERT_TRUE(validate_forward_varlen(v.a, Backend::kSm90, &p).ok());
  v.a.max_seqlen_q = int64_t(1) << 30;
  Result r = forward_varlen(v.a);  // rejected before any device is touched
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("max_seqlen_q=1073741824 exceeds 2^30-1"), std::string::npos) << r.message;
  v.a.max_seqlen_q = 6;
  v.a.max_seqlen_k = int64_t(1) << 31;
  r = forward_varlen(v.a);
  EXPECT_NE(r.message.find("max_seqlen_k=2147483648 exceeds"), std::string::npos) << r.message;
}

// forward_varlen's workspace form: 256 bytes (the tile counter) for any valid args, 0 for invalid
// ones; a null, short or misaligned workspace is refused naming it, after the arguments' checks and
// before any device is looked for.
TEST(VarlenValidation, WorkspaceFormChecksItsWorkspace) {
  const auto [dtype, d] = first_built();
  ValidArgs v;
  v.a.q = v.a.out = make_tensor(g_fake_memory, dtype, 12, 4, d);
  v.a.k = v.a.v = make_tensor(g_fake_memory, dtype, 8, 2, d);
  EXPECT_EQ(forward_varlen_workspace_size(v.a), 256u);
  const auto expect_refused = [&](void* ws, std::size_t bytes, const std::string& fragment) {
    const Result r = forward_varlen(v.a, ws, bytes);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << r.message;
    EXPECT_NE(r.message.find(fragment), std::string::npos) << "message \"" << r.message << "\" lacks \"" << fragment << "\"";
  };
  expect_refused(nullptr, 256, "workspace is null but 256 bytes are needed (forward_varlen_workspace_size)");
  expect_refused(g_fake_memory, 128, "workspace_bytes=128 but 256 bytes are needed (forward_varlen_workspace_size)");
  expect_refused(g_fake_memory + 8, 512, "workspace is not 256-byte aligned");
  v.a.max_seqlen_k = -1;
  EXPECT_EQ(forward_varlen_workspace_size(v.a), 0u);
  expect_refused(g_fake_memory, 512, "max_seqlen_k=-1 is negative");
  expect_refused(nullptr, 0, "max_seqlen_k=-1 is negative");  // the arguments come first
}

// backward_varlen's arguments around the forward's: valid ones of the first built kernel, then each
// mutation must be rejected (by backward_varlen itself, before it looks for a device) naming the
// argument, and give a workspace size of 0.
struct ValidBackwardArgs {
  ValidArgs fwd;
  VarlenBackwardArgs a;
  ValidBackwardArgs() {
    const auto [dtype, d] = first_built();
    const TensorRef rows_q = make_tensor(g_fake_memory, dtype, 12, 4, d), rows_k = make_tensor(g_fake_memory, dtype, 8, 2, d);
    a.q = a.out = a.dout = a.dq = rows_q;
    a.k = a.v = a.dk = a.dv = rows_k;
    a.lse = fwd.a.lse;
    a.cu_seqlens_q = fwd.a.cu_seqlens_q;
    a.cu_seqlens_k = fwd.a.cu_seqlens_k;
    a.seqused_q = fwd.a.seqused_q;
    a.seqused_k = fwd.a.seqused_k;
    a.max_seqlen_q = fwd.a.max_seqlen_q;
    a.max_seqlen_k = fwd.a.max_seqlen_k;
  }
};

void expect_backward_invalid(const std::function<void(VarlenBackwardArgs&)>& mutate, const std::string& fragment) {
  ValidBackwardArgs v;
  mutate(v.a);
  const Result r = backward_varlen(v.a, g_fake_memory, sizeof(g_fake_memory));
  EXPECT_EQ(r.status, Status::kInvalidArgument) << r.message;
  EXPECT_NE(r.message.find(fragment), std::string::npos) << "message \"" << r.message << "\" lacks \"" << fragment << "\"";
  EXPECT_EQ(backward_varlen_workspace_size(v.a), 0u);
}

TEST(VarlenBackwardValidation, ValidArgsFillTheProblem) {
  ValidBackwardArgs v;
  VarlenProblem fwd;
  AttnBackwardProblem p;
  ASSERT_TRUE(validate_backward_varlen(v.a, &fwd, &p).ok());
  EXPECT_TRUE(p.fwd.varlen());
  EXPECT_EQ(p.fwd.total_q, 12);
  EXPECT_EQ(p.fwd.seqlen_q, 6);  // max_seqlen_q
  EXPECT_EQ(p.dq_stride[0], 0);  // packed: no batch stride
  EXPECT_EQ(p.dk_stride[1], v.a.dk.strides[0]);
  EXPECT_GT(backward_varlen_workspace_size(v.a), 0u);
}

TEST(VarlenBackwardValidation, EachArgumentIsChecked) {
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.lse = TensorRef{}; }, "lse: required by backward_varlen");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.dout.dtype = DType::kFP32; }, "dout: dtype fp32 differs from q's");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.dq.sizes[0] = 11; }, "dq.sizes[0]=11 but q.sizes[0]=12");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.dk.sizes[1] = 1; }, "dk.sizes[1]=1 but k.sizes[1]=2");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.dv.strides[2] = 2; }, "dv: last dim (head_dim) must be contiguous");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.dq.data = nullptr; }, "dq.data is null");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.cu_seqlens_k.dtype = DType::kFP32; }, "cu_seqlens_k: dtype must be int32");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.max_seqlen_k = -1; }, "max_seqlen_k=-1 is negative");
  expect_backward_invalid([](VarlenBackwardArgs& a) { a.softmax_scale = -1.f; }, "softmax_scale must be finite and > 0");
}

TEST(Int32DType, NameAndSize) {
  EXPECT_STREQ(dtype_name(DType::kInt32), "int32");
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(static_cast<int>(DType::kInt32), 3);
}

ForwardArgs valid_forward_args() {
  ForwardArgs a;
  a.q = make_tensor(g_fake_memory, DType::kBF16, 1, 8, 2, 16);
  a.k = make_tensor(g_fake_memory, DType::kBF16, 1, 8, 2, 16);
  a.v = make_tensor(g_fake_memory, DType::kBF16, 1, 8, 2, 16);
  a.out = make_tensor(g_fake_memory, DType::kBF16, 1, 8, 2, 16);
  a.lse = make_tensor(g_fake_memory, DType::kFP32, 1, 2, 8);
  return a;
}

TEST(Int32DType, RejectedByForwardValidation) {
  TensorRef ForwardArgs::*members[] = {&ForwardArgs::q, &ForwardArgs::k, &ForwardArgs::v, &ForwardArgs::out};
  const char* names[] = {"q", "k", "v", "out"};
  for (Backend backend : {Backend::kCpu, Backend::kSm90, Backend::kCudaReference})
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(std::string(names[i]) + " backend " + std::to_string(static_cast<int>(backend)));
      ForwardArgs a = valid_forward_args();
      (a.*members[i]).dtype = DType::kInt32;
      AttnProblem p;
      const Result r = validate_forward(a, backend, &p);
      EXPECT_EQ(r.status, Status::kInvalidArgument) << r.message;
      EXPECT_NE(r.message.find(std::string(names[i]) + ": dtype int32 is not supported"), std::string::npos) << r.message;
      EXPECT_NE(r.message.find("index tensors"), std::string::npos) << r.message;
    }
  ForwardArgs a = valid_forward_args();
  a.lse.dtype = DType::kInt32;
  AttnProblem p;
  const Result r = validate_forward(a, Backend::kCpu, &p);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("lse: dtype must be fp32, got int32"), std::string::npos) << r.message;
  const Result api = forward_cpu(a);  // the public entry point says the same before touching memory
  EXPECT_EQ(api.message, r.message);
}

TEST(Int32DType, RejectedByBackwardValidation) {
  auto valid = [] {
    const ForwardArgs f = valid_forward_args();
    BackwardArgs a;
    a.q = a.dout = a.dq = f.q;
    a.out = f.out;
    a.k = a.dk = f.k;
    a.v = a.dv = f.v;
    a.lse = f.lse;
    return a;
  };
  struct Member { const char* name; TensorRef BackwardArgs::*m; const char* fragment; };
  const Member members[] = {{"q", &BackwardArgs::q, "q: dtype int32 is not supported"},
                            {"k", &BackwardArgs::k, "k: dtype int32 is not supported"},
                            {"v", &BackwardArgs::v, "v: dtype int32 is not supported"},
                            {"out", &BackwardArgs::out, "out: dtype int32 is not supported"},
                            {"lse", &BackwardArgs::lse, "lse: dtype must be fp32, got int32"},
                            {"dout", &BackwardArgs::dout, "dout: dtype int32 differs from q's bf16"},
                            {"dq", &BackwardArgs::dq, "dq: dtype int32 differs from q's bf16"}};
  for (Backend backend : {Backend::kCpu, Backend::kSm90})
    for (const Member& m : members) {
      // On sm90 the forward checks (this head_dim has no kernel) come before the gradient ones.
      if (backend == Backend::kSm90 && m.m != &BackwardArgs::q && m.m != &BackwardArgs::k && m.m != &BackwardArgs::v &&
          m.m != &BackwardArgs::out && m.m != &BackwardArgs::lse)
        continue;
      SCOPED_TRACE(std::string(m.name) + " backend " + std::to_string(static_cast<int>(backend)));
      BackwardArgs a = valid();
      AttnBackwardProblem p0;
      if (backend == Backend::kCpu) {
        ASSERT_TRUE(validate_backward(a, backend, &p0).ok());  // the base is valid
      }
      (a.*m.m).dtype = DType::kInt32;
      AttnBackwardProblem p;
      const Result r = validate_backward(a, backend, &p);
      EXPECT_EQ(r.status, Status::kInvalidArgument) << r.message;
      EXPECT_NE(r.message.find(m.fragment), std::string::npos) << r.message;
      if (backend == Backend::kCpu) {
        EXPECT_EQ(backward_cpu(a).message, r.message);
      }
    }
}

}  // namespace
}  // namespace hopattn::test
