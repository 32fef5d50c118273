// Validation of the FP8 varlen entry points (attention_fp8_varlen, forward_fp8_varlen) and their C
// ABI: every check runs before the device is touched, so each bad argument is rejected here,
// without a GPU, with a message naming it. Also the workspace sizes (pure arithmetic).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "../common/c_abi_util.hpp"
#include "../common/varlen_util.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn::test {
namespace {

// Fake device pointers: validation reads only their alignment.
void* fake(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{1} << 20 | offset); }

// Three sequences, 700 query and 500 key tokens in all, the longest 300 and 260.
constexpr int64_t kBatch = 3, kTotalQ = 700, kTotalK = 500, kMaxQ = 300, kMaxK = 260, kHq = 4, kHkv = 2, kD = 128;

template <class Args>
void set_packed_common(Args* a, DType in, DType out) {
  a->q = make_tensor(fake(), in, kTotalQ, kHq, kD);
  a->k = make_tensor(fake(), in, kTotalK, kHkv, kD);
  a->v = make_tensor(fake(), in, kTotalK, kHkv, kD);
  a->out = make_tensor(fake(), out, kTotalQ, kHq, kD);
  a->cu_seqlens_q = index_tensor(fake(), kBatch + 1);
  a->cu_seqlens_k = index_tensor(fake(), kBatch + 1);
  a->max_seqlen_q = kMaxQ;
  a->max_seqlen_k = kMaxK;
}

Fp8VarlenAttentionArgs valid_attention_args() {
  Fp8VarlenAttentionArgs a;
  set_packed_common(&a, DType::kBF16, DType::kBF16);
  return a;
}

Fp8VarlenForwardArgs valid_forward_args() {
  Fp8VarlenForwardArgs a;
  set_packed_common(&a, DType::kE4M3, DType::kBF16);  // bf16 out: also built by the dev loop's bf16-only builds
  a.q_descale = make_tensor(fake(), DType::kFP32, kBatch, kHq, 3);  // ceil(300 / 128)
  a.k_descale = make_tensor(fake(), DType::kFP32, kBatch, kHkv, 3);  // ceil(260 / 128)
  a.v_descale = make_tensor(fake(), DType::kFP32, kBatch, kHkv, 1);
  a.v_descale.ndim = 2;
  return a;
}

void expect_error(const Result& r, Status status, const std::string& needle) {
  EXPECT_EQ(r.status, status) << r.message;
  EXPECT_NE(r.message.find(needle), std::string::npos) << "message: " << r.message << "\nexpected to contain: " << needle;
}

Result run(const Fp8VarlenAttentionArgs& a) { return attention_fp8_varlen(a, fake(), size_t{1} << 30); }
Result run(const Fp8VarlenForwardArgs& a) { return forward_fp8_varlen(a, fake(), size_t{1} << 30); }

// Valid arguments get a workspace size (0 means invalid, or nothing to run). Not a call: on a GPU
// machine it would launch on the fake pointers. The tests below each break one argument of these;
// a broken argument is rejected before the device is touched.
TEST(Fp8VarlenValidation, ValidArgumentsPassValidation) {
  EXPECT_GT(attention_fp8_varlen_workspace_size(valid_attention_args()), 0u);
  EXPECT_GT(forward_fp8_varlen_workspace_size(valid_forward_args()), 0u);
  Fp8VarlenForwardArgs no_descales = valid_forward_args();
  no_descales.q_descale = no_descales.k_descale = no_descales.v_descale = TensorRef{};
  EXPECT_GT(forward_fp8_varlen_workspace_size(no_descales), 0u);
  Fp8VarlenForwardArgs per_head = valid_forward_args();
  per_head.q_descale = make_tensor(fake(), DType::kFP32, kBatch, kHq, 1);
  per_head.k_descale = make_tensor(fake(), DType::kFP32, kBatch, kHkv, 1);
  EXPECT_GT(forward_fp8_varlen_workspace_size(per_head), 0u);
  Fp8VarlenAttentionArgs causal_gqa_used = valid_attention_args();
  causal_gqa_used.causal = true;
  causal_gqa_used.seqused_k = index_tensor(fake(), kBatch);
  causal_gqa_used.lse = lse_tensor(fake(), kHq, kTotalQ);
  EXPECT_GT(attention_fp8_varlen_workspace_size(causal_gqa_used), 0u);
}

TEST(Fp8VarlenValidation, InputDtypesSelectTheCall) {
  Fp8VarlenAttentionArgs a = valid_attention_args();
  a.k.dtype = DType::kE4M3;
  expect_error(run(a), Status::kInvalidArgument, "k: dtype must be bf16 or fp16 for attention_fp8_varlen");
  Fp8VarlenForwardArgs f = valid_forward_args();
  f.v.dtype = DType::kBF16;
  expect_error(run(f), Status::kInvalidArgument, "v: dtype must be e4m3 for forward_fp8_varlen");
}

TEST(Fp8VarlenValidation, OutputDtypeIsChecked) {
  Fp8VarlenForwardArgs f = valid_forward_args();
  f.out.dtype = DType::kE4M3;
  expect_error(run(f), Status::kInvalidArgument, "out: dtype e4m3 is not an output dtype");
  Fp8VarlenAttentionArgs a = valid_attention_args();
  a.out.dtype = DType::kFP16;  // attention_fp8_varlen writes q's dtype
  expect_error(run(a), Status::kInvalidArgument, "out: dtype fp16 differs from q's bf16");
}

TEST(Fp8VarlenValidation, UnsupportedHeadDimIsNamed) {
  Fp8VarlenAttentionArgs a = valid_attention_args();
  a.q = make_tensor(fake(), DType::kBF16, kTotalQ, kHq, 96);
  a.k = make_tensor(fake(), DType::kBF16, kTotalK, kHkv, 96);
  a.v = make_tensor(fake(), DType::kBF16, kTotalK, kHkv, 96);
  a.out = make_tensor(fake(), DType::kBF16, kTotalQ, kHq, 96);
  expect_error(run(a), Status::kUnsupported, "head_dim 96 with output dtype bf16 has no FP8 kernel");
}

TEST(Fp8VarlenValidation, PackedShapesAndIndexTensorsAreChecked) {
  Fp8VarlenAttentionArgs a = valid_attention_args();
  a.v.sizes[0] = kTotalK - 1;
  expect_error(run(a), Status::kInvalidArgument, "v.sizes[0] (total_k)");
  a = valid_attention_args();
  a.cu_seqlens_k = index_tensor(fake(), kBatch);
  expect_error(run(a), Status::kInvalidArgument, "cu_seqlens_k.sizes[0]=3 but expected 4");
  a = valid_attention_args();
  a.seqused_q = index_tensor(fake(), kBatch + 1);
  expect_error(run(a), Status::kInvalidArgument, "seqused_q.sizes[0]=4 but expected 3");
  a = valid_attention_args();
  a.max_seqlen_k = -1;
  expect_error(run(a), Status::kInvalidArgument, "max_seqlen_k=-1 is negative");
  a = valid_attention_args();
  a.lse = lse_tensor(fake(), kHq, kTotalQ + 1);
  expect_error(run(a), Status::kInvalidArgument, "lse.sizes[1]");
  a = valid_attention_args();
  a.q.data = fake(8);
  expect_error(run(a), Status::kInvalidArgument, "q.data is not 16-byte aligned");
}

TEST(Fp8VarlenValidation, E4m3TokenRowsMust16ByteAlign) {
  Fp8VarlenForwardArgs f = valid_forward_args();
  f.k.strides[0] = kHkv * kD + 8;  // 8 bytes: a multiple of 16 for 16-bit, not for e4m3
  expect_error(run(f), Status::kInvalidArgument, "k.strides[0]=264 is not a multiple of 16 elements");
}

TEST(Fp8VarlenValidation, DescalesFollowTheLongestSequence) {
  Fp8VarlenForwardArgs f = valid_forward_args();
  f.q_descale.sizes[2] = 6;  // ceil(total_q / 128): blocks are per sequence, counted by max_seqlen_q
  f.q_descale.strides[0] = kHq * 6;
  f.q_descale.strides[1] = 6;
  expect_error(run(f), Status::kInvalidArgument, "q_descale.sizes[2]=6 but expected 1 (one per head) or 3");
  f = valid_forward_args();
  f.k_descale = make_tensor(fake(), DType::kFP32, kBatch + 1, kHkv, 3);
  expect_error(run(f), Status::kInvalidArgument, "k_descale.sizes[0]=4 but expected 3");
  f = valid_forward_args();
  f.v_descale = make_tensor(fake(), DType::kFP32, kBatch, kHq, 1);
  f.v_descale.ndim = 2;
  expect_error(run(f), Status::kInvalidArgument, "v_descale.sizes[1]=4 but expected 2");
  f = valid_forward_args();
  f.q_descale.dtype = DType::kBF16;
  expect_error(run(f), Status::kInvalidArgument, "q_descale: dtype must be fp32");
}

TEST(Fp8VarlenValidation, TheVtLayoutMustFitInt32Keys) {
  // total_k rounded up to 128 plus 128 per sequence: 2^31 - 2^20 + 128 * 2^13 > 2^31 - 1.
  Fp8VarlenAttentionArgs a = valid_attention_args();
  const int64_t total_k = (int64_t{1} << 31) - (int64_t{1} << 20), batch = int64_t{1} << 13;
  a.k.sizes[0] = a.v.sizes[0] = total_k;
  a.k.sizes[1] = a.v.sizes[1] = 1;  // one kv head: total_k x heads_kv stays within the 2^31-1 rows rule
  a.cu_seqlens_q = index_tensor(fake(), batch + 1);
  a.cu_seqlens_k = index_tensor(fake(), batch + 1);
  expect_error(run(a), Status::kInvalidArgument, "the FP8 V^T layout");
  a.cu_seqlens_q = index_tensor(fake(), kBatch + 1);  // 3 sequences fit
  a.cu_seqlens_k = index_tensor(fake(), kBatch + 1);
  EXPECT_GT(attention_fp8_varlen_workspace_size(a), 0u);
}

TEST(Fp8VarlenWorkspace, SizesFollowThePackedLayout) {
  auto up = [](size_t x) { return (x + 255) / 256 * 256; };
  // V^T: (heads_kv, d, roundup(total_k, 128) + 128 * batch) = 2 * 128 * (512 + 384).
  const size_t vt = up(size_t(kHkv * kD * (512 + 128 * kBatch)));
  const size_t counter = 256;  // the dynamic tile order's counter, one aligned slot after the rest
  EXPECT_EQ(forward_fp8_varlen_workspace_size(valid_forward_args()), vt + counter);
  // attention_fp8_varlen: packed e4m3 q and k, V^T, descales per (sequence, head, block of max_seqlen).
  const size_t want = up(kTotalQ * kHq * kD) + up(kTotalK * kHkv * kD) + vt + up(4 * kBatch * kHq * 3) +
                      up(4 * kBatch * kHkv * 3) + up(4 * kBatch * kHkv) + counter;
  EXPECT_EQ(attention_fp8_varlen_workspace_size(valid_attention_args()), want);
  Fp8VarlenAttentionArgs rotated_v = valid_attention_args();
  rotated_v.rotate_v = true;
  EXPECT_EQ(attention_fp8_varlen_workspace_size(rotated_v), want + up(kTotalK * kHkv * kD));
  Fp8VarlenAttentionArgs per_head = valid_attention_args();
  per_head.block_quant = false;
  EXPECT_EQ(attention_fp8_varlen_workspace_size(per_head), want - up(4 * kBatch * kHq * 3) - up(4 * kBatch * kHkv * 3) +
                                                              up(4 * kBatch * kHq) + up(4 * kBatch * kHkv));
  Fp8VarlenAttentionArgs no_rows = valid_attention_args();
  no_rows.q.sizes[0] = no_rows.out.sizes[0] = 0;
  EXPECT_EQ(attention_fp8_varlen_workspace_size(no_rows), 0u);  // nothing to run
  Fp8VarlenAttentionArgs bad = valid_attention_args();
  bad.q.dtype = DType::kFP32;
  EXPECT_EQ(attention_fp8_varlen_workspace_size(bad), 0u);  // invalid: no size
}

// ---- C ABI -------------------------------------------------------------------------------------

template <class CArgs, class Args>
void set_c_common(CArgs* c, const Args& a) {
  c->q = to_c(a.q);
  c->k = to_c(a.k);
  c->v = to_c(a.v);
  c->out = to_c(a.out);
  c->cu_seqlens_q = to_c(a.cu_seqlens_q);
  c->cu_seqlens_k = to_c(a.cu_seqlens_k);
  c->max_seqlen_q = a.max_seqlen_q;
  c->max_seqlen_k = a.max_seqlen_k;
}

TEST(Fp8VarlenCAbi, SizesAndErrorsMatchTheCppApi) {
  const Fp8VarlenAttentionArgs a = valid_attention_args();
  hopattn_fp8_varlen_attention_args ca{};
  set_c_common(&ca, a);
  ca.incoherent = 1;
  ca.block_quant = 1;
  EXPECT_EQ(hopattn_attention_fp8_varlen_workspace_size(&ca), attention_fp8_varlen_workspace_size(a));
  ca.block_quant = 0;  // the flags reach the C++ call
  Fp8VarlenAttentionArgs per_head = a;
  per_head.block_quant = false;
  EXPECT_EQ(hopattn_attention_fp8_varlen_workspace_size(&ca), attention_fp8_varlen_workspace_size(per_head));
  ca.rotate_v = 1;
  per_head.rotate_v = true;
  EXPECT_EQ(hopattn_attention_fp8_varlen_workspace_size(&ca), attention_fp8_varlen_workspace_size(per_head));
  ca.max_seqlen_k = -1;
  EXPECT_EQ(hopattn_attention_fp8_varlen(&ca, fake(), size_t{1} << 30, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("max_seqlen_k=-1"), std::string::npos) << hopattn_last_error();
  EXPECT_EQ(hopattn_attention_fp8_varlen(nullptr, nullptr, 0, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_EQ(hopattn_attention_fp8_varlen_workspace_size(nullptr), 0u);

  const Fp8VarlenForwardArgs f = valid_forward_args();
  hopattn_fp8_varlen_fwd_args cf{};
  set_c_common(&cf, f);
  cf.q_descale = to_c(f.q_descale);
  cf.k_descale = to_c(f.k_descale);
  cf.v_descale = to_c(f.v_descale);
  EXPECT_EQ(hopattn_forward_fp8_varlen_workspace_size(&cf), forward_fp8_varlen_workspace_size(f));
  cf.k_descale.sizes[2] = 2;
  EXPECT_EQ(hopattn_forward_fp8_varlen(&cf, fake(), size_t{1} << 30, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("k_descale.sizes[2]=2"), std::string::npos) << hopattn_last_error();
}

}  // namespace
}  // namespace hopattn::test
