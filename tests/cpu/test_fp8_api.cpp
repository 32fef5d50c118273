// Validation of the FP8 entry points (forward_fp8, attention_fp8, quantize_fp8): every check runs
// before the device is touched, so each bad argument is rejected here, without a GPU, with a
// message naming it. Also the workspace sizes, which are pure arithmetic on valid arguments.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "../common/c_abi_util.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn::test {
namespace {

// Fake device pointers: validation reads only their alignment.
void* fake(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{1} << 20 | offset); }

constexpr int64_t kB = 2, kSq = 300, kSk = 200, kHq = 4, kHkv = 2, kD = 128;

Fp8ForwardArgs valid_fp8_args() {
  Fp8ForwardArgs a;
  a.q = make_tensor(fake(), DType::kE4M3, kB, kSq, kHq, kD);
  a.k = make_tensor(fake(), DType::kE4M3, kB, kSk, kHkv, kD);
  a.v = make_tensor(fake(), DType::kE4M3, kB, kSk, kHkv, kD);
  a.q_descale = make_tensor(fake(), DType::kFP32, kB, kHq, 3);  // ceil(300 / 128)
  a.k_descale = make_tensor(fake(), DType::kFP32, kB, kHkv, 2);
  a.v_descale = make_tensor(fake(), DType::kFP32, kB, kHkv, 1);
  a.v_descale.ndim = 2;
  a.out = make_tensor(fake(), DType::kBF16, kB, kSq, kHq, kD);
  return a;
}

Fp8AttentionArgs valid_attention_args() {
  Fp8AttentionArgs a;
  a.q = make_tensor(fake(), DType::kBF16, kB, kSq, kHq, kD);
  a.k = make_tensor(fake(), DType::kBF16, kB, kSk, kHkv, kD);
  a.v = make_tensor(fake(), DType::kBF16, kB, kSk, kHkv, kD);
  a.out = make_tensor(fake(), DType::kBF16, kB, kSq, kHq, kD);
  return a;
}

Fp8QuantizeArgs valid_quantize_args() {
  Fp8QuantizeArgs a;
  a.in = make_tensor(fake(), DType::kFP16, kB, kSq, kHq, kD);
  a.out = make_tensor(fake(), DType::kE4M3, kB, kSq, kHq, kD);
  a.descale = make_tensor(fake(), DType::kFP32, kB, kHq, 3);
  return a;
}

// The call fails with `status` and a message containing `needle`. Valid arguments reach the device
// check, which on this GPU-less machine fails with kUnsupportedDevice (or succeeds on a GPU): either
// way not kInvalidArgument, which is what the first test of each group asserts.
void expect_error(const Result& r, Status status, const std::string& needle) {
  EXPECT_EQ(r.status, status) << r.message;
  EXPECT_NE(r.message.find(needle), std::string::npos) << "message: " << r.message << "\nexpected to contain: " << needle;
}

Result run(const Fp8ForwardArgs& a) { return forward_fp8(a, fake(), 1 << 30); }
Result run(const Fp8AttentionArgs& a) { return attention_fp8(a, fake(), 1 << 30); }

TEST(Fp8Validation, ValidArgumentsPassValidation) {
  EXPECT_NE(run(valid_fp8_args()).status, Status::kInvalidArgument) << run(valid_fp8_args()).message;
  EXPECT_NE(run(valid_attention_args()).status, Status::kInvalidArgument);
  EXPECT_NE(quantize_fp8(valid_quantize_args()).status, Status::kInvalidArgument);
  Fp8ForwardArgs per_head = valid_fp8_args();
  per_head.q_descale.sizes[2] = 1;
  per_head.k_descale.sizes[2] = 1;
  per_head.q_descale.strides[0] = kHq;
  per_head.q_descale.strides[1] = 1;
  per_head.k_descale.strides[0] = kHkv;
  per_head.k_descale.strides[1] = 1;
  EXPECT_NE(run(per_head).status, Status::kInvalidArgument) << run(per_head).message;
  Fp8ForwardArgs no_descales = valid_fp8_args();
  no_descales.q_descale = no_descales.k_descale = no_descales.v_descale = TensorRef{};
  EXPECT_NE(run(no_descales).status, Status::kInvalidArgument) << run(no_descales).message;
}

TEST(Fp8Validation, ForwardFp8WantsE4m3Inputs) {
  Fp8ForwardArgs a = valid_fp8_args();
  a.k.dtype = DType::kBF16;
  expect_error(run(a), Status::kInvalidArgument, "k: dtype must be e4m3");
}

TEST(Fp8Validation, OutputMustBe16Bit) {
  Fp8ForwardArgs a = valid_fp8_args();
  a.out.dtype = DType::kE4M3;
  expect_error(run(a), Status::kInvalidArgument, "out: dtype e4m3 is not an output dtype");
  a.out.dtype = DType::kFP32;
  expect_error(run(a), Status::kUnsupported, "out: dtype fp32");
}

TEST(Fp8Validation, UnsupportedHeadDimIsNamed) {
  Fp8ForwardArgs a = valid_fp8_args();
  for (TensorRef* t : {&a.q, &a.k, &a.v, &a.out}) {
    t->sizes[3] = 96;
    t->strides[2] = 96;
    t->strides[1] = 96 * t->sizes[2];
    t->strides[0] = t->strides[1] * t->sizes[1];
  }
  a.q_descale = a.k_descale = a.v_descale = TensorRef{};
  expect_error(run(a), Status::kUnsupported, "head_dim 96");
}

TEST(Fp8Validation, DescaleShapesAreChecked) {
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.q_descale.sizes[2] = 2;  // neither 1 nor ceil(300 / 128) = 3
    expect_error(run(a), Status::kInvalidArgument, "q_descale.sizes[2]=2 but expected 1 (one per head) or 3");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.k_descale.sizes[1] = kHq;  // must be heads_kv
    a.k_descale.strides[0] = kHq * 2;
    expect_error(run(a), Status::kInvalidArgument, "k_descale.sizes[1]=4 but expected 2");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.v_descale.ndim = 3;
    expect_error(run(a), Status::kInvalidArgument, "v_descale: expected 2 dims");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.q_descale.dtype = DType::kBF16;
    expect_error(run(a), Status::kInvalidArgument, "q_descale: dtype must be fp32");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.k_descale.strides[0] = 100;  // not contiguous
    expect_error(run(a), Status::kInvalidArgument, "k_descale must be contiguous");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.v_descale.data = fake(2);
    expect_error(run(a), Status::kInvalidArgument, "v_descale.data is not 4-byte aligned");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.q_descale.data = nullptr;  // a shape but no data
    expect_error(run(a), Status::kInvalidArgument, "q_descale.data is null");
  }
  {
    Fp8ForwardArgs a = valid_fp8_args();
    a.k_descale.ndim = 2;  // the block descales are (batch, heads, nblocks)
    expect_error(run(a), Status::kInvalidArgument, "k_descale: expected 3 dims (batch, heads, nblocks), got ndim=2");
  }
}

TEST(Fp8Validation, E4m3RowsMust16ByteAlign) {
  Fp8ForwardArgs a = valid_fp8_args();
  a.q.data = fake(8);
  expect_error(run(a), Status::kInvalidArgument, "q.data is not 16-byte aligned");
  a = valid_fp8_args();
  a.k.strides[1] = kHkv * kD + 8;  // 8 bytes: not a 16-byte multiple for e4m3
  a.k.strides[0] = a.k.strides[1] * kSk;
  expect_error(run(a), Status::kInvalidArgument, "k.strides[1]");
  a = valid_fp8_args();
  a.v.strides[3] = 2;
  expect_error(run(a), Status::kInvalidArgument, "v: last dim (head_dim) must be contiguous");
}

TEST(Fp8Validation, ShapesMustAgree) {
  Fp8ForwardArgs a = valid_fp8_args();
  a.v.sizes[1] = kSk + 1;
  a.v.strides[0] = a.v.strides[1] * (kSk + 1);
  expect_error(run(a), Status::kInvalidArgument, "v.sizes[1] (seqlen_k)");
  a = valid_fp8_args();
  a.k.sizes[2] = 3;  // 4 query heads are not a multiple of 3
  a.k.strides[1] = 3 * kD;
  a.k.strides[0] = 3 * kD * kSk;
  a.v = a.k;
  a.k_descale = a.v_descale = TensorRef{};
  expect_error(run(a), Status::kInvalidArgument, "heads_q=4 is not a multiple of heads_kv=3");
}

TEST(Fp8Validation, AttentionFp8Wants16BitInputsAndMatchingOut) {
  Fp8AttentionArgs a = valid_attention_args();
  a.q.dtype = DType::kE4M3;
  expect_error(run(a), Status::kInvalidArgument, "q: dtype must be bf16 or fp16 for attention_fp8");
  a = valid_attention_args();
  a.v.dtype = DType::kFP32;
  expect_error(run(a), Status::kInvalidArgument, "v: dtype must be bf16 or fp16");
  a = valid_attention_args();
  a.out.dtype = DType::kFP16;
  expect_error(run(a), Status::kInvalidArgument, "out: dtype fp16 differs from q's bf16");
  a = valid_attention_args();
  a.softmax_scale = -1.f;
  expect_error(run(a), Status::kInvalidArgument, "softmax_scale");
}

TEST(Fp8Validation, QuantizeArgumentsAreChecked) {
  Fp8QuantizeArgs a = valid_quantize_args();
  a.in.dtype = DType::kE4M3;
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "in: dtype must be bf16 or fp16");
  a = valid_quantize_args();
  a.out.dtype = DType::kBF16;
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "out: dtype must be e4m3");
  a = valid_quantize_args();
  a.out.sizes[1] = kSq - 1;
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "out.sizes[1]=299 but in.sizes[1]=300");
  a = valid_quantize_args();
  a.block_quant = false;  // descale must then be (batch, heads, 1)
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "descale.sizes[2]=3 but expected 1");
  a = valid_quantize_args();
  for (TensorRef* t : {&a.in, &a.out}) {
    t->sizes[3] = 48;
    t->strides[2] = 48;
    t->strides[1] = 48 * kHq;
    t->strides[0] = 48 * kHq * kSq;
  }
  expect_error(quantize_fp8(a), Status::kUnsupported, "the rotation needs head_dim 64, 128 or 256");
  a.rotate = false;  // any multiple of 16 without the rotation
  EXPECT_NE(quantize_fp8(a).status, Status::kInvalidArgument) << quantize_fp8(a).message;
  // head_dim: a multiple of 16 up to 256 (rotation or not). One row, so that e4m3 rows of 40 bytes
  // are not first rejected for their 16-byte alignment.
  for (int64_t d : {40, 272}) {
    a = valid_quantize_args();
    a.rotate = false;
    for (TensorRef* t : {&a.in, &a.out}) *t = make_tensor(t->data, t->dtype, 1, 1, 1, d);
    expect_error(quantize_fp8(a), Status::kUnsupported, "quantize_fp8 takes multiples of 16 up to 256");
  }
  a = valid_quantize_args();
  a.in.data = fake(4);
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "in.data is not 16-byte aligned");
  // out is written: a broadcast out (stride 0) is rejected, a broadcast in is fine.
  a = valid_quantize_args();
  a.out.strides[0] = 0;
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "out: strides (0, ");
  a = valid_quantize_args();
  a.in.strides[0] = 0;
  EXPECT_TRUE(validate_quantize_fp8(a).ok()) << validate_quantize_fp8(a).message;
  // 2^31 rows of a broadcast in: rejected before the descale's sizes are multiplied out.
  a = valid_quantize_args();
  a.in.sizes[0] = a.out.sizes[0] = int64_t{1} << 23;
  a.in.strides[0] = 0;
  a.out.strides[0] = 0;
  expect_error(quantize_fp8(a), Status::kInvalidArgument, "in: batch x heads x seqlen = 8388608 x ");
}

// forward_fp8 with a 16-bit v (out's dtype, no v_descale): the 16-bit P V kernels, no workspace.
TEST(Fp8Validation, ForwardFp8TakesA16BitVInOutsDtype) {
  Fp8ForwardArgs a = valid_fp8_args();
  a.v = make_tensor(fake(), DType::kBF16, kB, kSk, kHkv, kD);
  a.v_descale = TensorRef{};
  EXPECT_NE(run(a).status, Status::kInvalidArgument) << run(a).message;
  EXPECT_EQ(forward_fp8_workspace_size(a), 0u);
  Fp8ForwardArgs other = a;
  other.v.dtype = DType::kFP16;  // out is bf16
  expect_error(run(other), Status::kInvalidArgument, "v: dtype must be e4m3, or out's 16-bit dtype (bf16) for a 16-bit P V, got fp16");
  other.v.dtype = DType::kFP32;
  expect_error(run(other), Status::kInvalidArgument, "v: dtype must be e4m3, or out's 16-bit dtype (bf16)");
  Fp8ForwardArgs descaled = a;
  descaled.v_descale = valid_fp8_args().v_descale;
  expect_error(run(descaled), Status::kInvalidArgument, "v_descale: must be left out with a 16-bit v");
  Fp8ForwardArgs misaligned = a;  // a 16-bit v is checked as a 16-bit tensor: 16-byte rows
  misaligned.v.strides[1] = kHkv * kD + 4;
  expect_error(run(misaligned), Status::kInvalidArgument, "v");
  Fp8ForwardArgs q16 = a;  // q and k stay e4m3
  q16.q.dtype = DType::kBF16;
  expect_error(run(q16), Status::kInvalidArgument, "q: dtype must be e4m3 for forward_fp8");
}

// quantize_v = false leaves V unquantised, so a rotated V (which exists only to be quantised) is
// refused, naming rotate_v; without the rotation rotate_v is ignored, as elsewhere.
TEST(Fp8Validation, SixteenBitVRefusesRotateV) {
  Fp8AttentionArgs a = valid_attention_args();
  a.quantize_v = false;
  EXPECT_NE(run(a).status, Status::kInvalidArgument) << run(a).message;
  a.rotate_v = true;
  expect_error(run(a), Status::kInvalidArgument, "rotate_v: must be false with quantize_v = false");
  EXPECT_EQ(attention_fp8_workspace_size(a), 0u);
  a.incoherent = false;
  EXPECT_NE(run(a).status, Status::kInvalidArgument) << run(a).message;
  a = valid_attention_args();
  a.quantize_v = false;
  a.v.dtype = DType::kE4M3;  // the 16-bit V must still be 16-bit
  expect_error(run(a), Status::kInvalidArgument, "v: dtype must be bf16 or fp16 for attention_fp8");
}

// The C struct's quantize_v (ABI 12) reaches the C++ call: the workspace follows it, and with
// rotate_v it gives the C++ call's error.
TEST(Fp8CAbi, QuantizeVReachesTheCppCall) {
  const Fp8AttentionArgs a = valid_attention_args();
  hopattn_fp8_attention_args c{};
  c.q = to_c(a.q), c.k = to_c(a.k), c.v = to_c(a.v), c.out = to_c(a.out);
  c.incoherent = 1, c.block_quant = 1, c.quantize_v = 1;
  EXPECT_EQ(hopattn_attention_fp8_workspace_size(&c), attention_fp8_workspace_size(a));
  Fp8AttentionArgs v16 = a;
  v16.quantize_v = false;
  c.quantize_v = 0;
  EXPECT_EQ(hopattn_attention_fp8_workspace_size(&c), attention_fp8_workspace_size(v16));
  EXPECT_LT(attention_fp8_workspace_size(v16), attention_fp8_workspace_size(a));
  c.rotate_v = 1;
  EXPECT_EQ(hopattn_attention_fp8(&c, fake(), size_t{1} << 30, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("rotate_v: must be false"), std::string::npos) << hopattn_last_error();
  EXPECT_EQ(hopattn_attention_fp8_workspace_size(&c), 0u);  // invalid: no size
  c.quantize_v = 1;  // rotate_v with a quantised V is valid (and takes V's rotated copy too)
  Fp8AttentionArgs rotated = a;
  rotated.rotate_v = true;
  EXPECT_EQ(hopattn_attention_fp8_workspace_size(&c), attention_fp8_workspace_size(rotated));
  EXPECT_GT(attention_fp8_workspace_size(rotated), attention_fp8_workspace_size(a));
}

TEST(Fp8Workspace, SizesFollowTheLayout) {
  // forward_fp8: V^T with seqlen_k padded to 128: 2 * 2 * 128 * 256 bytes.
  EXPECT_EQ(forward_fp8_workspace_size(valid_fp8_args()), size_t(kB * kHkv * kD * 256));
  // attention_fp8: e4m3 q, k, V^T, then descales, each rounded up to 256 bytes, and with a rotated
  // V its e4m3 copy in the ordinary layout.
  auto up = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t v8 = up(kB * kSk * kHkv * kD);
  const size_t want = up(kB * kSq * kHq * kD) + up(kB * kSk * kHkv * kD) + up(kB * kHkv * kD * 256) +
                      up(4 * kB * kHq * 3) + up(4 * kB * kHkv * 2) + up(4 * kB * kHkv);
  EXPECT_EQ(attention_fp8_workspace_size(valid_attention_args()), want);
  Fp8AttentionArgs rotated_v = valid_attention_args();
  rotated_v.rotate_v = true;
  EXPECT_EQ(attention_fp8_workspace_size(rotated_v), want + v8);
  rotated_v.incoherent = false;  // rotate_v applies only with the rotation on
  EXPECT_EQ(attention_fp8_workspace_size(rotated_v), want);
  Fp8AttentionArgs per_head = valid_attention_args();  // one descale per (batch, head)
  per_head.block_quant = false;
  const size_t want_per_head = up(kB * kSq * kHq * kD) + up(kB * kSk * kHkv * kD) + up(kB * kHkv * kD * 256) +
                               up(4 * kB * kHq) + up(4 * kB * kHkv) + up(4 * kB * kHkv);
  EXPECT_EQ(attention_fp8_workspace_size(per_head), want_per_head);
  // quantize_v = false: no V^T and no V descale; the kernel reads the caller's 16-bit V.
  Fp8AttentionArgs v16 = valid_attention_args();
  v16.quantize_v = false;
  EXPECT_EQ(attention_fp8_workspace_size(v16), up(kB * kSq * kHq * kD) + up(kB * kSk * kHkv * kD) + up(4 * kB * kHq * 3) +
                                                   up(4 * kB * kHkv * 2));
  Fp8AttentionArgs bad = valid_attention_args();
  bad.q.dtype = DType::kFP32;
  EXPECT_EQ(attention_fp8_workspace_size(bad), 0u);  // invalid: no size
  Fp8ForwardArgs empty = valid_fp8_args();
  empty.q.sizes[1] = 0;
  empty.out.sizes[1] = 0;
  empty.q_descale = TensorRef{};
  EXPECT_EQ(forward_fp8_workspace_size(empty), 0u);  // nothing to run
}

}  // namespace
}  // namespace hopattn::test
