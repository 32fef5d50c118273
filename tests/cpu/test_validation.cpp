// One test per argument-validation rule in src/api/validate.cpp: each feeds one bad value and checks
// the status code and that the message names the argument. Validation runs before any device
// check, so all of this runs without a GPU; pointers are fake (aligned, never dereferenced).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "../common/c_abi_util.hpp"
#include "../common/test_util.hpp"
#include "valid_forward_args.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn::test {
namespace {

alignas(256) unsigned char g_fake_memory[1024];  // a stand-in address; nothing reads or writes it

ForwardArgs valid_args() { return valid_forward_args(g_fake_memory); }

using Mutation = std::function<void(ForwardArgs&)>;

// Applies `mutate` to valid args and runs the entry point for `backend`. The entry point is called
// only once validation is known to reject the args: a valid call would read the fake pointers.
Result run_invalid(Backend backend, const Mutation& mutate) {
  ForwardArgs a = valid_args();
  mutate(a);
  AttnProblem p;
  const Result v = validate_forward(a, backend, &p);
  if (v.ok()) return v;  // the caller expects an error: the test fails and names the mutation
  const Result r = backend == Backend::kSm90            ? forward(a)
                   : backend == Backend::kCudaReference ? forward_reference_cuda(a)
                                                        : forward_cpu(a);
  EXPECT_EQ(r.status, v.status);
  EXPECT_EQ(r.message, v.message);
  return r;
}

void expect_rejected(const Result& r, Status status, const std::string& fragment) {
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(status)) << r.message;
  EXPECT_NE(r.message.find(fragment), std::string::npos) << "message \"" << r.message << "\" lacks \"" << fragment << "\"";
}

Result sm90(const Mutation& m) { return run_invalid(Backend::kSm90, m); }
Result cpu(const Mutation& m) { return run_invalid(Backend::kCpu, m); }
Result cuda_ref(const Mutation& m) { return run_invalid(Backend::kCudaReference, m); }

TEST(Validation, ValidArgsPassEveryBackend) {
  AttnProblem p;
  for (Backend b : {Backend::kSm90, Backend::kCudaReference, Backend::kCpu}) {
    const Result r = validate_forward(valid_args(), b, &p);
    EXPECT_TRUE(r.ok()) << r.message;
  }
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.seqlen_q, 64);
  EXPECT_EQ(p.seqlen_k, 48);
  EXPECT_EQ(p.group(), 2);
  EXPECT_FLOAT_EQ(p.scale, static_cast<float>(1.0 / std::sqrt(double(first_built_kernel().head_dim))));
}

TEST(Validation, WrongNdim) {
  expect_rejected(sm90([](ForwardArgs& a) { a.q.ndim = 3; }), Status::kInvalidArgument, "q: expected 4 dims");
  expect_rejected(cpu([](ForwardArgs& a) { a.out.ndim = 5; }), Status::kInvalidArgument, "out: expected 4 dims");
}

TEST(Validation, NegativeSize) {
  expect_rejected(cpu([](ForwardArgs& a) { a.k.sizes[1] = -1; }), Status::kInvalidArgument, "k.sizes[1] is negative");
}

TEST(Validation, NegativeStride) {
  expect_rejected(cpu([](ForwardArgs& a) { a.v.strides[0] = -4; }), Status::kInvalidArgument, "v.strides[0] is negative");
}

TEST(Validation, SizeBeyondInt32) {
  expect_rejected(cpu([](ForwardArgs& a) { a.q.sizes[1] = a.out.sizes[1] = int64_t{1} << 31; }),
                  Status::kInvalidArgument, "q.sizes[1]");
}

TEST(Validation, ExtentBeyondInt64) {
  // Each size and stride is legal alone; together they reach past 2^63 bytes.
  const Result r = cpu([](ForwardArgs& a) { a.k.strides[0] = int64_t{1} << 62; });
  expect_rejected(r, Status::kInvalidArgument, "k: sizes (2, 48, 2, ");
  EXPECT_NE(r.message.find("reach beyond 2^63 bytes"), std::string::npos) << r.message;
}

TEST(Validation, MakeTensorWithAbsurdSizesIsRejectedNotUndefined) {
  // The strides make_tensor computes would overflow int64; it saturates, and validation says why.
  const int64_t big = int64_t{1} << 31;  // each size alone is 2^31; the product is 2^124
  ForwardArgs a = valid_args();
  a.q = a.out = make_tensor(g_fake_memory, a.q.dtype, big, big, big, big);
  EXPECT_EQ(a.q.strides[0], std::numeric_limits<int64_t>::max());
  AttnProblem p;
  const Result r = validate_forward(a, Backend::kCpu, &p);
  expect_rejected(r, Status::kInvalidArgument, "q.sizes[0] = 2147483648 exceeds 2^31-1");
  a.q = a.out = make_tensor(g_fake_memory, a.q.dtype, big - 1, big - 1, big - 1, 64);  // sizes legal, extent not
  expect_rejected(validate_forward(a, Backend::kCpu, &p), Status::kInvalidArgument, "reach beyond 2^63 bytes");
}

TEST(Validation, OutputMustNotOverlap) {
  // A stride of 0 (a broadcast view) on out: every batch would write one place.
  Result r = cpu([](ForwardArgs& a) { a.out.strides[0] = 0; });
  expect_rejected(r, Status::kInvalidArgument, "out: strides (0, ");
  EXPECT_NE(r.message.find("share an address"), std::string::npos) << r.message;
  // Heads closer together than head_dim: neighbouring heads share elements.
  expect_rejected(sm90([](ForwardArgs& a) { a.out.strides[2] = 8; }), Status::kInvalidArgument, "out: strides");
  // The same views are fine as inputs: k and v broadcast over the batch (torch's expand).
  ForwardArgs a = valid_args();
  a.k.strides[0] = a.v.strides[0] = 0;
  AttnProblem p;
  for (Backend b : {Backend::kSm90, Backend::kCpu}) EXPECT_TRUE(validate_forward(a, b, &p).ok());
  // A padded, permuted out (heads outermost within a batch) does not overlap and passes.
  a = valid_args();
  a.out.strides[2] = 64 * a.out.sizes[3] + 8;  // (b, s, h, d) stored as (b, h, s, d) with 8 padding per head
  a.out.strides[1] = a.out.sizes[3];
  a.out.strides[0] = a.out.strides[2] * 4;
  EXPECT_TRUE(validate_forward(a, Backend::kSm90, &p).ok()) << validate_forward(a, Backend::kSm90, &p).message;
}

TEST(Validation, RowsBeyondInt32) {
  // Broadcast q and k (stride 0 over the batch) make many rows from little memory; the kernels count
  // rows in 32 bits. out must be a real tensor, so its strides stay dense (huge but within int64).
  auto wide = [](int64_t batch) {
    return [batch](ForwardArgs& a) {
      for (TensorRef* t : {&a.q, &a.k, &a.v}) {
        t->sizes[0] = batch;
        t->strides[0] = 0;
      }
      a.out.sizes[0] = batch;
      a.lse = TensorRef{};  // left out
    };
  };
  // 2^25 batches x 4 heads x 64 rows = 2^33 query rows.
  const Result r = cpu(wide(int64_t{1} << 25));
  expect_rejected(r, Status::kInvalidArgument, "q: batch x heads_q x seqlen_q = 33554432 x 4 x 64");
  // 2^22 x 4 x 64 = 2^30 query rows, 2^22 x 2 x 48 key rows: accepted.
  ForwardArgs a = valid_args();
  wide(int64_t{1} << 22)(a);
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kCpu, &p).ok()) << validate_forward(a, Backend::kCpu, &p).message;
  // Keys alone beyond: 2^23 x 2 heads x 2^8 keys = 2^32 rows (queries 2^23 x 4 x 64 = 2^31: also
  // beyond, so the key rule is reached with q cut to one row).
  const Result rk = cpu([&](ForwardArgs& b) {
    wide(int64_t{1} << 23)(b);
    b.q.sizes[1] = b.out.sizes[1] = 1;
    b.k.sizes[1] = b.v.sizes[1] = 256;
  });
  expect_rejected(rk, Status::kInvalidArgument, "k: batch x heads_kv x seqlen_k = 8388608 x 2 x 256");
}

TEST(Validation, LastDimNotContiguous) {
  const Result r = cpu([](ForwardArgs& a) { a.q.strides[3] = 2; });
  expect_rejected(r, Status::kInvalidArgument, "q: last dim (head_dim) must be contiguous");
  EXPECT_NE(r.message.find("strides[3]"), std::string::npos) << r.message;
}

TEST(Validation, NullData) {
  expect_rejected(cpu([](ForwardArgs& a) { a.out.data = nullptr; }), Status::kInvalidArgument, "out.data is null");
  // A tensor without elements may be null: seqlen_k == 0 with null k and v is valid.
  ForwardArgs a = valid_args();
  a.k.sizes[1] = a.v.sizes[1] = 0;
  a.k.data = a.v.data = nullptr;
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());
}

TEST(Validation, MisalignedPointerOnSm90) {
  expect_rejected(sm90([](ForwardArgs& a) { a.k.data = g_fake_memory + 2; }), Status::kInvalidArgument,
                  "k.data is not 16-byte aligned");
  // The CPU backend has no alignment rule.
  ForwardArgs a = valid_args();
  a.k.data = g_fake_memory + 2;
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kCpu, &p).ok());
}

TEST(Validation, MisalignedStrideOnSm90) {
  const Result r = sm90([](ForwardArgs& a) { a.q.strides[1] += 4; });
  expect_rejected(r, Status::kInvalidArgument, "q.strides[1]");
  EXPECT_NE(r.message.find("16 bytes"), std::string::npos) << r.message;
  // A dim of size 1 is never stepped over, so its stride may be anything.
  ForwardArgs a = valid_args();
  a.q.sizes[0] = a.k.sizes[0] = a.v.sizes[0] = a.out.sizes[0] = a.lse.sizes[0] = 1;
  a.q.strides[0] = 3;
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());
}

TEST(Validation, Fp32IsCpuOnly) {
  auto to_fp32 = [](ForwardArgs& a) { a.q.dtype = a.k.dtype = a.v.dtype = a.out.dtype = DType::kFP32; };
  expect_rejected(sm90(to_fp32), Status::kUnsupported, "q: dtype fp32 is not supported");
  expect_rejected(cuda_ref(to_fp32), Status::kUnsupported, "q: dtype fp32 is not supported");
  ForwardArgs a = valid_args();
  to_fp32(a);
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kCpu, &p).ok());
}

TEST(Validation, UnknownDtypeOnCpu) {
  expect_rejected(cpu([](ForwardArgs& a) { a.v.dtype = static_cast<DType>(7); }), Status::kInvalidArgument,
                  "v: dtype");
}

TEST(Validation, MixedDtypes) {
  expect_rejected(sm90([](ForwardArgs& a) {
                    a.k.dtype = a.q.dtype == DType::kBF16 ? DType::kFP16 : DType::kBF16;
                  }),
                  Status::kInvalidArgument, "k: dtype");
  expect_rejected(cpu([](ForwardArgs& a) { a.out.dtype = DType::kFP32; }), Status::kInvalidArgument,
                  "differs from q's");
}

TEST(Validation, BatchMismatch) {
  expect_rejected(cpu([](ForwardArgs& a) { a.k.sizes[0] = 3; }), Status::kInvalidArgument, "k.sizes[0]");
  expect_rejected(cpu([](ForwardArgs& a) { a.v.sizes[0] = 1; }), Status::kInvalidArgument, "v.sizes[0]");
}

TEST(Validation, HeadDimMismatch) {
  expect_rejected(cpu([](ForwardArgs& a) { a.k.sizes[3] += 8; }), Status::kInvalidArgument, "k.sizes[3]");
  // A different value head dim is a valid attention this library does not implement yet.
  expect_rejected(cpu([](ForwardArgs& a) { a.v.sizes[3] += 8; }), Status::kUnsupported, "v.sizes[3]");
}

TEST(Validation, SeqlenKMismatch) {
  expect_rejected(cpu([](ForwardArgs& a) { a.v.sizes[1] = 47; }), Status::kInvalidArgument, "v.sizes[1]");
}

TEST(Validation, HeadsKvMismatch) {
  expect_rejected(cpu([](ForwardArgs& a) { a.v.sizes[2] = 4; }), Status::kInvalidArgument, "v.sizes[2]");
}

TEST(Validation, OutShapeMismatch) {
  for (int i = 0; i < 4; ++i) {
    const Result r = cpu([i](ForwardArgs& a) { a.out.sizes[i] += 1; });
    expect_rejected(r, Status::kInvalidArgument, "out.sizes[" + std::to_string(i) + "]");
  }
}

TEST(Validation, ZeroHeadsKv) {
  expect_rejected(cpu([](ForwardArgs& a) { a.k.sizes[2] = a.v.sizes[2] = 0; }), Status::kInvalidArgument,
                  "k.sizes[2]");
}

TEST(Validation, HeadsQNotMultipleOfHeadsKv) {
  expect_rejected(cpu([](ForwardArgs& a) { a.k.sizes[2] = a.v.sizes[2] = 3; }), Status::kInvalidArgument,
                  "heads_q");
}

TEST(Validation, LseDtype) {
  expect_rejected(cpu([](ForwardArgs& a) { a.lse.dtype = DType::kBF16; }), Status::kInvalidArgument,
                  "lse: dtype must be fp32");
}

TEST(Validation, LseNdim) {
  expect_rejected(cpu([](ForwardArgs& a) { a.lse.ndim = 4; }), Status::kInvalidArgument, "lse: expected 3 dims");
}

TEST(Validation, LseSizes) {
  expect_rejected(cpu([](ForwardArgs& a) { a.lse.sizes[2] = 63; }), Status::kInvalidArgument, "lse.sizes[2]");
  // (batch, seqlen_q, heads) is the out layout, not the lse layout.
  expect_rejected(cpu([](ForwardArgs& a) { std::swap(a.lse.sizes[1], a.lse.sizes[2]); }),
                  Status::kInvalidArgument, "lse.sizes[1]");
}

TEST(Validation, LseNotContiguous) {
  const Result r = cpu([](ForwardArgs& a) { a.lse.strides[1] = 128; });
  expect_rejected(r, Status::kInvalidArgument, "lse must be contiguous");
  EXPECT_NE(r.message.find("strides[1]"), std::string::npos) << r.message;
}

TEST(Validation, LseMisaligned) {
  expect_rejected(cpu([](ForwardArgs& a) { a.lse.data = g_fake_memory + 2; }), Status::kInvalidArgument,
                  "lse.data is not 4-byte aligned");
}

TEST(Validation, NullLseSkipsItsChecks) {
  ForwardArgs a = valid_args();
  a.lse.data = nullptr;
  a.lse.dtype = DType::kBF16;
  a.lse.ndim = 0;
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());
  EXPECT_EQ(p.lse, nullptr);
}

TEST(Validation, SoftmaxScale) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), 0.f, -0.5f, std::numeric_limits<float>::infinity()}) {
    const Result r = sm90([bad](ForwardArgs& a) { a.softmax_scale = bad; });
    expect_rejected(r, Status::kInvalidArgument, "softmax_scale");
  }
  ForwardArgs a = valid_args();
  a.softmax_scale = 0.25f;
  AttnProblem p;
  ASSERT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());
  EXPECT_EQ(p.scale, 0.25f);
}

// Sliding window (issue 6): each bound >= -1; causal is right = 0, so with causal right must be -1
// or 0; normalised into the problem (-1 unbounded, causal sets right = 0).
TEST(Validation, Window) {
  expect_rejected(sm90([](ForwardArgs& a) { a.window = {-2, -1}; }), Status::kInvalidArgument, "window.left=-2");
  expect_rejected(cpu([](ForwardArgs& a) { a.window = {4, -7}; }), Status::kInvalidArgument, "window.right=-7");
  expect_rejected(cuda_ref([](ForwardArgs& a) {
                    a.causal = true;
                    a.window = {-1, 3};
                  }),
                  Status::kInvalidArgument, "window.right=3 with causal");
  const struct { Window w; bool causal; int64_t left, right; } ok[] = {
      {{-1, -1}, false, -1, -1}, {{-1, -1}, true, -1, 0}, {{5, -1}, false, 5, -1},
      {{-1, 0}, true, -1, 0},    {{0, 0}, false, 0, 0},   {{1LL << 40, 3}, false, 1LL << 40, 3}};
  for (const auto& c : ok) {
    ForwardArgs a = valid_args();
    a.window = c.w;
    a.causal = c.causal;
    AttnProblem p;
    ASSERT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());
    EXPECT_EQ(p.window_left, c.left);
    EXPECT_EQ(p.window_right, c.right);
    EXPECT_EQ(p.masked(), c.left >= 0 || c.right >= 0);
  }
  // The backward call checks the same rules (through its forward checks).
  BackwardArgs b;
  const ForwardArgs f = valid_args();
  b.q = f.q; b.k = f.k; b.v = f.v; b.out = f.out; b.lse = f.lse;
  b.dout = f.out; b.dq = f.q; b.dk = f.k; b.dv = f.v;
  b.window = {-3, 2};
  AttnBackwardProblem bp;
  expect_rejected(validate_backward(b, Backend::kSm90, &bp), Status::kInvalidArgument, "window.left=-3");
  b.window = {7, 2};
  ASSERT_TRUE(validate_backward(b, Backend::kSm90, &bp).ok());
  EXPECT_EQ(bp.fwd.window_left, 7);
  EXPECT_EQ(bp.fwd.window_right, 2);
}

// Softcap: finite and >= 0 (0: off), on every backend and through backward; FP8 has none.
TEST(Validation, Softcap) {
  for (float bad : {-1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    expect_rejected(sm90([bad](ForwardArgs& a) { a.softcap = bad; }), Status::kInvalidArgument, "softcap");
    expect_rejected(cpu([bad](ForwardArgs& a) { a.softcap = bad; }), Status::kInvalidArgument, "softcap");
  }
  ForwardArgs a = valid_args();
  a.softcap = 30.f;
  AttnProblem p;
  ASSERT_TRUE(validate_forward(a, Backend::kCpu, &p).ok());
  EXPECT_EQ(p.softcap, 30.f);
  ASSERT_TRUE(validate_forward(a, Backend::kCudaReference, &p).ok());
  p.softcap = 0.f;
  ASSERT_TRUE(validate_forward(a, Backend::kSm90, &p).ok());  // the softcap kernels
  EXPECT_EQ(p.softcap, 30.f);
  // The FP8 forward has none: a clear "unsupported", never a silently uncapped result.
  AttnProblem fp8_problem;
  const Result fp8 = validate_forward(a, Backend::kSm90Fp8, &fp8_problem);
  EXPECT_EQ(fp8.status, Status::kUnsupported) << fp8.message;
  EXPECT_NE(fp8.message.find("softcap"), std::string::npos) << fp8.message;
  BackwardArgs b;
  b.q = a.q; b.k = a.k; b.v = a.v; b.out = a.out; b.lse = a.lse;
  b.dout = a.out; b.dq = a.q; b.dk = a.k; b.dv = a.v;
  b.softcap = -2.f;
  AttnBackwardProblem bp;
  expect_rejected(validate_backward(b, Backend::kSm90, &bp), Status::kInvalidArgument, "softcap");
  b.softcap = 5.f;
  ASSERT_TRUE(validate_backward(b, Backend::kSm90, &bp).ok());
  EXPECT_EQ(bp.fwd.softcap, 5.f);
  ASSERT_TRUE(validate_backward(b, Backend::kCpu, &bp).ok());
  EXPECT_EQ(bp.fwd.softcap, 5.f);
}

// The key range of one row: bottom-right aligned, clipped to [0, sk), possibly empty.
TEST(Validation, VisibleKeys) {
  const auto eq = [](KeyRange r, int64_t b, int64_t e) { return r.begin == b && r.end == e; };
  EXPECT_TRUE(eq(visible_keys(0, 4, 4, -1, -1), 0, 4));
  EXPECT_TRUE(eq(visible_keys(2, 4, 4, -1, 0), 0, 3));    // causal
  EXPECT_TRUE(eq(visible_keys(2, 4, 4, 1, 0), 1, 3));     // causal, one key to the left
  EXPECT_TRUE(eq(visible_keys(2, 4, 4, 0, 0), 2, 3));     // the diagonal only
  EXPECT_TRUE(eq(visible_keys(0, 2, 6, 0, 1), 4, 6));     // sk > sq: the diagonal is at i + 4
  EXPECT_TRUE(eq(visible_keys(0, 6, 2, -1, 0), 0, -3));   // sq > sk: row 0 sees no key
  EXPECT_TRUE(eq(visible_keys(5, 6, 2, 0, 100), 1, 2));
  EXPECT_TRUE(eq(visible_keys(3, 4, 4, 100, 100), 0, 4)); // wider than the sequence
}

TEST(Validation, ZeroHeadDim) {
  expect_rejected(cpu([](ForwardArgs& a) { a.q.sizes[3] = a.k.sizes[3] = a.v.sizes[3] = a.out.sizes[3] = 0; }),
                  Status::kInvalidArgument, "head_dim");
}

TEST(Validation, HeadDimWithoutSm90Kernel) {
  auto to_96 = [](ForwardArgs& a) {  // contiguous at head_dim 96 (out's old strides would overlap)
    for (TensorRef* t : {&a.q, &a.k, &a.v, &a.out})
      *t = make_tensor(t->data, t->dtype, t->sizes[0], t->sizes[1], t->sizes[2], 96);
  };
  const Result r = sm90(to_96);
  expect_rejected(r, Status::kUnsupported, "head_dim 96");
  EXPECT_NE(r.message.find(build_instantiations()), std::string::npos) << "message should list the built kernels";
  // The references take any head dim (up to the CUDA reference's limit).
  ForwardArgs a = valid_args();
  to_96(a);
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kCudaReference, &p).ok());
  EXPECT_TRUE(validate_forward(a, Backend::kCpu, &p).ok());
}

TEST(Validation, HeadDimBeyondCudaReferenceLimit) {
  auto to_520 = [](ForwardArgs& a) {  // contiguous at head_dim 520 (out's old strides would overlap)
    for (TensorRef* t : {&a.q, &a.k, &a.v, &a.out})
      *t = make_tensor(t->data, t->dtype, t->sizes[0], t->sizes[1], t->sizes[2], 520);
  };
  expect_rejected(cuda_ref(to_520), Status::kUnsupported, "head_dim 520");
  ForwardArgs a = valid_args();
  to_520(a);
  AttnProblem p;
  EXPECT_TRUE(validate_forward(a, Backend::kCpu, &p).ok());
}

TEST(Validation, NoDeviceIsReportedAfterValidation) {
  if (has_cuda_device()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const Result r = forward(valid_args());
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kUnsupportedDevice)) << r.message;
  EXPECT_NE(r.message.find("CUDA device"), std::string::npos) << r.message;
  const Result ref = forward_reference_cuda(valid_args());
  EXPECT_EQ(static_cast<int>(ref.status), static_cast<int>(Status::kUnsupportedDevice)) << ref.message;
  EXPECT_EQ(static_cast<int>(check_device().status), static_cast<int>(Status::kUnsupportedDevice));
}

// ---- the C ABI -------------------------------------------------------------------------------

hopattn_fwd_args valid_c_args() {
  const ForwardArgs a = valid_args();
  hopattn_fwd_args c{};
  c.q = to_c(a.q);
  c.k = to_c(a.k);
  c.v = to_c(a.v);
  c.out = to_c(a.out);
  c.lse = to_c(a.lse);
  return c;
}

TEST(ValidationCAbi, NullArgs) {
  EXPECT_EQ(hopattn_forward(nullptr, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_STRNE(hopattn_last_error(), "");
  EXPECT_EQ(hopattn_forward_cpu(nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_EQ(hopattn_forward_reference_cuda(nullptr, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_STRNE(hopattn_last_error(), "");
  EXPECT_EQ(hopattn_forward_workspace_size(nullptr), 0u);
}

TEST(ValidationCAbi, UnknownDtypeCode) {
  hopattn_fwd_args c = valid_c_args();
  c.k.dtype = 7;
  EXPECT_EQ(hopattn_forward(&c, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("k: unknown dtype code 7"), std::string::npos)
      << hopattn_last_error();
}

TEST(ValidationCAbi, NdimOutOfRange) {
  hopattn_fwd_args c = valid_c_args();
  c.out.ndim = 9;
  EXPECT_EQ(hopattn_forward_cpu(&c), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("out: ndim 9"), std::string::npos) << hopattn_last_error();
}

TEST(ValidationCAbi, PassesValidationMessagesThrough) {
  hopattn_fwd_args c = valid_c_args();
  c.k.sizes[2] = c.v.sizes[2] = 3;
  EXPECT_EQ(hopattn_forward(&c, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("heads_q"), std::string::npos) << hopattn_last_error();
  c = valid_c_args();
  c.has_softmax_scale = 1;
  c.softmax_scale = -1.f;
  EXPECT_EQ(hopattn_forward_cpu(&c), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("softmax_scale"), std::string::npos) << hopattn_last_error();
}

TEST(ValidationCAbi, NullLseIgnoresItsFields) {
  hopattn_fwd_args c = valid_c_args();
  c.lse.data = nullptr;
  c.lse.dtype = 99;  // not even a dtype: the C layer must not look at an absent lse
  c.k.sizes[0] = 5;  // ...while still reporting the real error
  EXPECT_EQ(hopattn_forward(&c, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("k.sizes[0]"), std::string::npos) << hopattn_last_error();
}

TEST(ValidationCAbi, AbiVersion) { EXPECT_EQ(hopattn_abi_version(), HOPATTN_ABI_VERSION); }

}  // namespace
}  // namespace hopattn::test
