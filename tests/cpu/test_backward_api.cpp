// The backward pass's host side (issue 5), CPU only: one test per validation rule of
// validate_backward (status code, and the message names the argument), backward_cpu through the
// public API against reference::backward_cpu and finite differences of forward_cpu, the C ABI, the
// no-device path of backward, and the zero-length cases. In the validation tests pointers are fake
// (aligned, never dereferenced): a call is made only once validation is known to reject it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/c_abi_util.hpp"
#include "../common/test_util.hpp"
#include "api/instantiations.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"
#include "reference/reference.hpp"
#include "sm90/bwd/workspace.hpp"

namespace hopattn::test {
namespace {

alignas(256) unsigned char g_fake_memory[4096];  // a stand-in address; nothing reads or writes it

// ---- validation ----------------------------------------------------------------------------------

struct BuiltKernel {
  DType dtype = DType::kBF16;
  int64_t head_dim = 128;
  bool found = false;  // whether this build has a backward kernel at all
};

// The first backward kernel of this build, so valid_args() is valid for kSm90 too.
BuiltKernel backward_kernel() {
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      if (has_backward_kernel(t, d)) return {t, d, true};
  return {};
}

#define SKIP_WITHOUT_BACKWARD_KERNEL()                                                               \
  do {                                                                                               \
    if (!backward_kernel().found) GTEST_SKIP() << "no backward kernel in this build: " << build_instantiations(); \
  } while (0)

// batch 2, seqlen_q 64, seqlen_k 48, heads 4/2 (GQA), contiguous, with out and lse.
BackwardArgs valid_args() {
  const BuiltKernel kern = backward_kernel();
  const DType t = kern.dtype;
  const int64_t d = kern.head_dim;
  BackwardArgs a;
  a.q = make_tensor(g_fake_memory, t, 2, 64, 4, d);
  a.k = make_tensor(g_fake_memory, t, 2, 48, 2, d);
  a.v = make_tensor(g_fake_memory, t, 2, 48, 2, d);
  a.out = make_tensor(g_fake_memory, t, 2, 64, 4, d);
  a.dout = make_tensor(g_fake_memory, t, 2, 64, 4, d);
  a.lse = make_tensor(g_fake_memory, DType::kFP32, 2, 4, 64);
  a.dq = make_tensor(g_fake_memory, t, 2, 64, 4, d);
  a.dk = make_tensor(g_fake_memory, t, 2, 48, 2, d);
  a.dv = make_tensor(g_fake_memory, t, 2, 48, 2, d);
  return a;
}

using Mutation = std::function<void(BackwardArgs&)>;

// Applies `mutate` to valid args; if validation rejects them, runs the entry point of `backend` too
// and checks it reports the same (and that the workspace query gives 0).
Result run_invalid(Backend backend, const Mutation& mutate) {
  BackwardArgs a = valid_args();
  mutate(a);
  AttnBackwardProblem p;
  const Result v = validate_backward(a, backend, &p);
  if (v.ok()) return v;  // the caller expects an error: the test fails and names the mutation
  Result r;
  if (backend == Backend::kSm90) {
    r = backward(a, g_fake_memory, sizeof g_fake_memory);
    EXPECT_EQ(backward_workspace_size(a), 0u);
  } else {
    r = backward_cpu(a);
  }
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

// The four tensors validate_backward adds, each with the tensor whose shape it must have.
struct Grad {
  const char* name;
  TensorRef BackwardArgs::*member;
  const char* like;
  TensorRef BackwardArgs::*like_member;
};
const Grad kGrads[] = {{"dout", &BackwardArgs::dout, "q", &BackwardArgs::q},
                       {"dq", &BackwardArgs::dq, "q", &BackwardArgs::q},
                       {"dk", &BackwardArgs::dk, "k", &BackwardArgs::k},
                       {"dv", &BackwardArgs::dv, "v", &BackwardArgs::v}};

TEST(BackwardValidation, ValidArgsFillTheProblem) {
  BackwardArgs a = valid_args();
  a.dq.strides[1] = a.dq.strides[1] * 2;  // a padded dq: strides travel into the problem
  a.dq.strides[0] = a.dq.strides[0] * 2;
  a.deterministic = true;
  a.causal = true;
  a.softmax_scale = 0.25f;
  AttnBackwardProblem p;
  ASSERT_TRUE(validate_backward(a, Backend::kCpu, &p).ok());
  if (backward_kernel().found) {
    const Result r = validate_backward(a, Backend::kSm90, &p);
    ASSERT_TRUE(r.ok()) << r.message;
  }
  EXPECT_EQ(p.fwd.batch, 2);
  EXPECT_EQ(p.fwd.seqlen_q, 64);
  EXPECT_EQ(p.fwd.seqlen_k, 48);
  EXPECT_EQ(p.fwd.group(), 2);
  EXPECT_TRUE(p.fwd.causal);
  EXPECT_EQ(p.fwd.scale, 0.25f);
  EXPECT_EQ(p.fwd.out, static_cast<void*>(g_fake_memory));
  EXPECT_EQ(p.fwd.lse, reinterpret_cast<float*>(g_fake_memory));
  EXPECT_EQ(p.dout, static_cast<const void*>(g_fake_memory));
  EXPECT_EQ(p.dq, static_cast<void*>(g_fake_memory));
  EXPECT_EQ(p.dk, static_cast<void*>(g_fake_memory));
  EXPECT_EQ(p.dv, static_cast<void*>(g_fake_memory));
  EXPECT_EQ(p.grad_dtype, a.q.dtype);
  EXPECT_TRUE(p.deterministic);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p.do_stride[i], a.dout.strides[i]);
    EXPECT_EQ(p.dq_stride[i], a.dq.strides[i]);
    EXPECT_EQ(p.dk_stride[i], a.dk.strides[i]);
    EXPECT_EQ(p.dv_stride[i], a.dv.strides[i]);
    EXPECT_EQ(p.fwd.q_stride[i], a.q.strides[i]);
  }
}

TEST(BackwardValidation, ForwardRulesApplyToQKVOut) {
  expect_rejected(cpu([](BackwardArgs& a) { a.q.ndim = 3; }), Status::kInvalidArgument, "q: expected 4 dims");
  expect_rejected(cpu([](BackwardArgs& a) { a.k.sizes[0] = 3; }), Status::kInvalidArgument, "k.sizes[0]");
  expect_rejected(cpu([](BackwardArgs& a) { a.v.sizes[1] = 47; }), Status::kInvalidArgument, "v.sizes[1]");
  expect_rejected(cpu([](BackwardArgs& a) { a.out.sizes[2] += 1; }), Status::kInvalidArgument, "out.sizes[2]");
  expect_rejected(cpu([](BackwardArgs& a) { a.k.sizes[2] = a.v.sizes[2] = a.dk.sizes[2] = a.dv.sizes[2] = 3; }),
                  Status::kInvalidArgument, "heads_q");
  expect_rejected(cpu([](BackwardArgs& a) { a.softmax_scale = -1.f; }), Status::kInvalidArgument, "softmax_scale");
  expect_rejected(cpu([](BackwardArgs& a) { a.v.sizes[3] += 8; }), Status::kUnsupported, "v.sizes[3]");
  expect_rejected(cpu([](BackwardArgs& a) { a.q.strides[3] = 2; }), Status::kInvalidArgument, "q.strides[3]=2");
}

TEST(BackwardValidation, Fp32IsCpuOnly) {
  auto to_fp32 = [](BackwardArgs& a) {
    for (TensorRef* t : {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv}) t->dtype = DType::kFP32;
  };
  expect_rejected(sm90(to_fp32), Status::kUnsupported, "q: dtype fp32 is not supported");
  BackwardArgs a = valid_args();
  to_fp32(a);
  AttnBackwardProblem p;
  EXPECT_TRUE(validate_backward(a, Backend::kCpu, &p).ok());
  EXPECT_EQ(p.grad_dtype, DType::kFP32);
}

TEST(BackwardValidation, OnlySm90AndCpuBackends) {
  AttnBackwardProblem p;
  const Result r = validate_backward(valid_args(), Backend::kCudaReference, &p);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kUnsupported)) << r.message;
  EXPECT_NE(r.message.find("backward"), std::string::npos) << r.message;
}

TEST(BackwardValidation, LseRequiredOnSm90) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  expect_rejected(sm90([](BackwardArgs& a) { a.lse.data = nullptr; }), Status::kInvalidArgument,
                  "lse: required by backward");
  expect_rejected(sm90([](BackwardArgs& a) { a.lse = TensorRef{}; }), Status::kInvalidArgument,
                  "lse: required by backward");
}

TEST(BackwardValidation, LseOptionalOnCpu) {
  BackwardArgs a = valid_args();
  a.lse = TensorRef{};  // data null, ndim 0
  AttnBackwardProblem p;
  const Result r = validate_backward(a, Backend::kCpu, &p);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(p.fwd.lse, nullptr);
}

TEST(BackwardValidation, LseCheckedWhenGiven) {
  expect_rejected(cpu([](BackwardArgs& a) { a.lse.sizes[2] = 63; }), Status::kInvalidArgument, "lse.sizes[2]");
  expect_rejected(cpu([](BackwardArgs& a) { a.lse.dtype = DType::kBF16; }), Status::kInvalidArgument,
                  "lse: dtype must be fp32");
  if (backward_kernel().found)
    expect_rejected(sm90([](BackwardArgs& a) { a.lse.strides[1] = 128; }), Status::kInvalidArgument,
                    "lse must be contiguous");
}

TEST(BackwardValidation, OutRequiredOnSm90) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  expect_rejected(sm90([](BackwardArgs& a) { a.out = TensorRef{}; }), Status::kInvalidArgument,
                  "out: required by backward");
  expect_rejected(sm90([](BackwardArgs& a) { a.out.data = nullptr; }), Status::kInvalidArgument, "out.data is null");
}

TEST(BackwardValidation, OutOptionalOnCpu) {
  for (bool zero_ndim : {true, false}) {
    BackwardArgs a = valid_args();
    a.out = TensorRef{};
    if (!zero_ndim) a.out.ndim = 4;  // sizes all 0
    a.lse = TensorRef{};
    AttnBackwardProblem p;
    const Result r = validate_backward(a, Backend::kCpu, &p);
    EXPECT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(p.fwd.out, nullptr);
    EXPECT_EQ(p.fwd.seqlen_q, 64);
  }
}

TEST(BackwardValidation, OutCheckedWhenGivenOnCpu) {
  expect_rejected(cpu([](BackwardArgs& a) { a.out.sizes[1] += 1; }), Status::kInvalidArgument,
                  "out.sizes[1]=65 but q.sizes[1]=64");
  // Sizes given but no data: not "left out", so it is an error.
  expect_rejected(cpu([](BackwardArgs& a) { a.out.data = nullptr; }), Status::kInvalidArgument, "out.data is null");
  expect_rejected(cpu([](BackwardArgs& a) { a.out.dtype = DType::kFP32; }), Status::kInvalidArgument,
                  "differs from q's");
}

TEST(BackwardValidation, HeadDimWithoutAnyKernel) {
  // No kernel at all for 96: the forward check reports it.
  auto to_96 = [](BackwardArgs& a) {
    for (TensorRef* t : {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv})  // contiguous: no overlap
      *t = make_tensor(t->data, t->dtype, t->sizes[0], t->sizes[1], t->sizes[2], 96);
  };
  Result r = sm90(to_96);
  expect_rejected(r, Status::kUnsupported, "head_dim 96");
  EXPECT_NE(r.message.find(build_instantiations()), std::string::npos) << r.message;
  BackwardArgs a = valid_args();
  to_96(a);
  AttnBackwardProblem p;
  EXPECT_TRUE(validate_backward(a, Backend::kCpu, &p).ok()) << "the CPU reference takes any head dim";
}

TEST(BackwardValidation, HeadDimWithForwardButNoBackwardKernel) {
  // E.g. 256 in a full build: the forward checks pass, the backward table has no entry.
  const DType t = backward_kernel().dtype;
  int fwd_only = 0;
  for (int d : {64, 96, 128, 192, 256})
    if (has_forward_kernel(t, d) && !has_backward_kernel(t, d)) fwd_only = d;
  if (fwd_only == 0) GTEST_SKIP() << "every forward head dim of this build has a backward kernel: " << build_instantiations();
  const Result r = sm90([fwd_only](BackwardArgs& a) {
    for (TensorRef* x : {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv}) x->sizes[3] = fwd_only;
  });
  expect_rejected(r, Status::kUnsupported, "head_dim " + std::to_string(fwd_only));
  EXPECT_NE(r.message.find("backward"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find(build_instantiations()), std::string::npos) << r.message;
}

// ---- dout, dq, dk, dv: one test per rule, each over the four tensors ------------------------------

TEST(BackwardValidation, GradDtypeDiffersFromQ) {
  for (const Grad& g : kGrads) {
    const Result r = cpu([&g](BackwardArgs& a) { (a.*g.member).dtype = DType::kFP32; });
    expect_rejected(r, Status::kInvalidArgument, std::string(g.name) + ": dtype fp32 differs from q's");
  }
}

TEST(BackwardValidation, GradNdim) {
  for (const Grad& g : kGrads) {
    expect_rejected(cpu([&g](BackwardArgs& a) { (a.*g.member).ndim = 3; }), Status::kInvalidArgument,
                    std::string(g.name) + ": expected 4 dims");
  }
}

TEST(BackwardValidation, GradNegativeSize) {
  for (const Grad& g : kGrads) {
    expect_rejected(cpu([&g](BackwardArgs& a) { (a.*g.member).sizes[1] = -1; }), Status::kInvalidArgument,
                    std::string(g.name) + ".sizes[1] is negative");
  }
}

TEST(BackwardValidation, GradNegativeStride) {
  for (const Grad& g : kGrads) {
    expect_rejected(cpu([&g](BackwardArgs& a) { (a.*g.member).strides[0] = -4; }), Status::kInvalidArgument,
                    std::string(g.name) + ".strides[0] is negative");
  }
}

TEST(BackwardValidation, GradSizeBeyondInt32) {
  for (const Grad& g : kGrads) {
    expect_rejected(cpu([&g](BackwardArgs& a) { (a.*g.member).sizes[1] = int64_t{1} << 31; }),
                    Status::kInvalidArgument, std::string(g.name) + ".sizes[1] = 2147483648 exceeds");
  }
}

TEST(BackwardValidation, GradLastDimNotContiguous) {
  for (const Grad& g : kGrads) {
    const Result r = cpu([&g](BackwardArgs& a) { (a.*g.member).strides[3] = 2; });
    expect_rejected(r, Status::kInvalidArgument, std::string(g.name) + ".strides[3]=2");
    EXPECT_NE(r.message.find("last dim (head_dim) must be contiguous"), std::string::npos) << r.message;
  }
}

TEST(BackwardValidation, GradNullData) {
  for (const Grad& g : kGrads) {
    expect_rejected(cpu([&g](BackwardArgs& a) { (a.*g.member).data = nullptr; }), Status::kInvalidArgument,
                    std::string(g.name) + ".data is null");
  }
}

TEST(BackwardValidation, GradSizesMustMatch) {
  for (const Grad& g : kGrads) {
    for (int i = 0; i < 4; ++i) {
      const BackwardArgs base = valid_args();
      const int64_t want = (base.*g.like_member).sizes[i];
      const Result r = cpu([&g, i](BackwardArgs& a) { (a.*g.member).sizes[i] += 1; });
      expect_rejected(r, Status::kInvalidArgument,
                      std::string(g.name) + ".sizes[" + std::to_string(i) + "]=" + std::to_string(want + 1) + " but " +
                          g.like + ".sizes[" + std::to_string(i) + "]=" + std::to_string(want));
    }
  }
}

TEST(BackwardValidation, GradMisalignedPointerOnSm90) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  for (const Grad& g : kGrads) {
    expect_rejected(sm90([&g](BackwardArgs& a) { (a.*g.member).data = g_fake_memory + 2; }),
                    Status::kInvalidArgument, std::string(g.name) + ".data is not 16-byte aligned");
    BackwardArgs a = valid_args();  // the CPU backend has no alignment rule
    (a.*g.member).data = g_fake_memory + 2;
    AttnBackwardProblem p;
    EXPECT_TRUE(validate_backward(a, Backend::kCpu, &p).ok()) << g.name;
  }
}

TEST(BackwardValidation, GradMisalignedStrideOnSm90) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  for (const Grad& g : kGrads) {
    // Rows 4 elements apart from 16-byte alignment; the batch stride doubled so that the longer
    // rows do not run into the next batch (an output must not overlap itself).
    auto misalign = [&g](BackwardArgs& a) {
      (a.*g.member).strides[1] += 4;
      (a.*g.member).strides[0] *= 2;
    };
    const Result r = sm90(misalign);
    expect_rejected(r, Status::kInvalidArgument, std::string(g.name) + ".strides[1]");
    EXPECT_NE(r.message.find("16 bytes"), std::string::npos) << r.message;
    BackwardArgs a = valid_args();
    misalign(a);
    AttnBackwardProblem p;
    EXPECT_TRUE(validate_backward(a, Backend::kCpu, &p).ok()) << g.name;
  }
}

TEST(BackwardValidation, GradientsMustNotOverlap) {
  // dq, dk, dv are outputs: a stride of 0 would make several CTAs write one element. dout is an
  // input and may be a broadcast view.
  for (const Grad& g : kGrads) {
    BackwardArgs a = valid_args();
    (a.*g.member).strides[0] = 0;
    AttnBackwardProblem p;
    const Result r = validate_backward(a, Backend::kCpu, &p);
    if (std::string(g.name) == "dout") {
      EXPECT_TRUE(r.ok()) << r.message;
      continue;
    }
    expect_rejected(r, Status::kInvalidArgument, std::string(g.name) + ": strides (0, ");
    EXPECT_NE(r.message.find("share an address"), std::string::npos) << r.message;
  }
  // The CPU backward without out puts q in out's place: a broadcast q is still accepted there.
  BackwardArgs a = valid_args();
  a.out = TensorRef{};
  a.q.strides[0] = 0;
  AttnBackwardProblem p;
  EXPECT_TRUE(validate_backward(a, Backend::kCpu, &p).ok()) << validate_backward(a, Backend::kCpu, &p).message;
}

TEST(BackwardValidation, NullPointersOfEmptyTensorsAreFine) {
  // seqlen_k == 0: k, v, dk, dv have no elements and may be null.
  BackwardArgs a = valid_args();
  for (TensorRef* t : {&a.k, &a.v, &a.dk, &a.dv}) {
    t->sizes[1] = 0;
    t->data = nullptr;
  }
  AttnBackwardProblem p;
  EXPECT_TRUE(validate_backward(a, Backend::kCpu, &p).ok());
  if (backward_kernel().found) {
    const Result r = validate_backward(a, Backend::kSm90, &p);
    EXPECT_TRUE(r.ok()) << r.message;
  }
}

// ---- workspace and the no-device path -------------------------------------------------------------

TEST(BackwardWorkspace, SizeOfValidProblems) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  BackwardArgs a = valid_args();
  AttnBackwardProblem p;
  ASSERT_TRUE(validate_backward(a, Backend::kSm90, &p).ok());
  const std::size_t bytes = backward_workspace_size(a);
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(bytes, sm90::bwd::workspace_bytes(p.fwd));
  EXPECT_EQ(bytes % 256, 0u);
  // Invalid args, or nothing for a kernel to do: 0.
  BackwardArgs bad = a;
  bad.dk.sizes[1] += 1;
  EXPECT_EQ(backward_workspace_size(bad), 0u);
  BackwardArgs no_keys = a;
  for (TensorRef* t : {&no_keys.k, &no_keys.v, &no_keys.dk, &no_keys.dv}) t->sizes[1] = 0;
  EXPECT_EQ(backward_workspace_size(no_keys), 0u);
  BackwardArgs no_batch = a;
  for (TensorRef* t : {&no_batch.q, &no_batch.k, &no_batch.v, &no_batch.out, &no_batch.dout, &no_batch.dq,
                       &no_batch.dk, &no_batch.dv, &no_batch.lse})
    t->sizes[0] = 0;
  EXPECT_EQ(backward_workspace_size(no_batch), 0u);
  // The CPU-only relaxations do not hold for the GPU's workspace query.
  BackwardArgs no_lse = a;
  no_lse.lse = TensorRef{};
  EXPECT_EQ(backward_workspace_size(no_lse), 0u);
}

// The main kernel's query step per problem, and the per-row padding that must hold whole steps:
// fixed-length d128 without a mask steps 80 rows (seqlen_q padded to 640, a multiple of 80 and 128);
// packed batches never do (their per-sequence pad is 128 rows).
TEST(BackwardWorkspace, QueryStepAndRowPadding) {
  using sm90::bwd::bwd_query_step;
  AttnProblem p;
  p.batch = 2, p.seqlen_q = 1000, p.seqlen_k = 700, p.heads_q = 4, p.heads_kv = 2;
  const int64_t dims[] = {64, 128, 256};
  const int want_plain[] = {128, 80, 64};
  for (int i = 0; i < 3; ++i) {
    p.head_dim = dims[i];
    p.causal = false, p.window_left = p.window_right = -1, p.softcap = 0.f;
    EXPECT_EQ(bwd_query_step(p), want_plain[i]) << "d" << dims[i];
    const sm90::bwd::WorkspaceLayout w = sm90::bwd::workspace_layout(p);
    EXPECT_EQ(w.query_step, want_plain[i]);
    EXPECT_EQ(w.seqlen_q_padded % w.query_step, 0) << "whole steps, d" << dims[i];
    EXPECT_EQ(w.seqlen_q_padded % sm90::bwd::kRowPadding, 0);
    EXPECT_GE(w.seqlen_q_padded, p.seqlen_q);
    EXPECT_EQ(w.seqlen_q_padded, dims[i] == 128 ? 1280 : 1024);
    // Every mask falls back to the head dim's packed-batch step (64 at d128).
    for (int mask = 0; mask < 3; ++mask) {
      AttnProblem m = p;
      if (mask == 0) m.causal = true, m.window_right = 0;
      if (mask == 1) m.window_left = 100;
      if (mask == 2) m.softcap = 30.f;
      EXPECT_EQ(bwd_query_step(m), dims[i] == 64 ? 128 : 64) << "d" << dims[i] << " mask " << mask;
      EXPECT_EQ(sm90::bwd::workspace_layout(m).seqlen_q_padded, 1024);
    }
  }
  // Packed batches: the default step, and the 128-row per-sequence pad.
  static const int32_t cu[3] = {0, 10, 20};
  p.head_dim = 128;
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  p.total_q = p.total_k = 20;
  EXPECT_EQ(bwd_query_step(p), 64);
  EXPECT_EQ(sm90::bwd::workspace_layout(p).query_step, 64);
}

// The dq_overlap counters: one int per (batch, kv head), after the semaphores.
TEST(BackwardWorkspace, DqDoneCounters) {
  using namespace sm90::bwd;
  AttnProblem p;
  p.batch = 3, p.seqlen_q = 1000, p.seqlen_k = 700, p.heads_q = 8, p.heads_kv = 2, p.head_dim = 256;
  p.window_left = p.window_right = -1;
  const WorkspaceLayout w = workspace_layout(p);
  EXPECT_GE(w.dq_done, w.semaphore + std::size_t(3 * 8 * 1024 / kQueryBlock) * sizeof(int));
  EXPECT_EQ(w.dq_done % 256, 0u);
  EXPECT_GE(w.total, w.dq_done + std::size_t(3 * 2) * sizeof(int));
  EXPECT_TRUE(dq_overlap(256));
  EXPECT_FALSE(dq_overlap(128));
  EXPECT_FALSE(dq_overlap(64));
}

extern "C" int hopattn_debug_bwd_trace(void* host, int max);  // src/api/bwd_trace.cpp, for bench/bwd_trace.py

// Without HOPATTN_BWD_TRACE=1 there is no trace buffer: the reader says so and touches no device.
TEST(BackwardTrace, OffWithoutTheEnvironmentVariable) {
  if (std::getenv("HOPATTN_BWD_TRACE") != nullptr) GTEST_SKIP() << "HOPATTN_BWD_TRACE is set";
  unsigned char record[32] = {};
  EXPECT_EQ(hopattn_debug_bwd_trace(record, 1), -1);
}

// The d256 tail split (sm90/bwd/workspace.hpp): which of the grid's last units are cut into pieces.
TEST(BackwardWorkspace, TailSplitModel) {
  using sm90::bwd::bwd_tail_split;
  // The paper grid's 2048 units on 132 SMs: 68 units in the last wave, cut into pieces whose rounds
  // cost less than the one unit they replace.
  for (int64_t steps : {32, 64, 256}) {
    const auto t = bwd_tail_split(2048, steps, 132);
    EXPECT_EQ(t.units, 68) << steps;
    EXPECT_GE(t.parts, 2);
    EXPECT_LE(t.parts, 16);
    const int64_t rounds = (68 * t.parts + 131) / 132;
    EXPECT_LT(rounds * ((steps + t.parts - 1) / t.parts + sm90::bwd::kTailPieceCost), 0.95 * (steps + 2.3)) << steps;
  }
  EXPECT_EQ(bwd_tail_split(2048, 64, 132).parts, 5);  // 340 pieces of 13 steps: 3 rounds of 16.2 < 66.3
  // No split: a single wave or less, whole waves, short units, a tail too full to gain, no device.
  EXPECT_EQ(bwd_tail_split(132, 64, 132).units, 0);
  EXPECT_EQ(bwd_tail_split(100, 64, 132).units, 0);
  EXPECT_EQ(bwd_tail_split(264, 64, 132).units, 0);
  EXPECT_EQ(bwd_tail_split(2048, 8, 132).units, 0);
  EXPECT_EQ(bwd_tail_split(132 + 131, 64, 132).units, 0);  // 131 units: two rounds of halves cost more
  EXPECT_EQ(bwd_tail_split(2048, 64, 0).units, 0);
  // A tail of more units than the workspace has slots for (kMaxTailUnits) is not split.
  EXPECT_EQ(bwd_tail_split(400 * 2 + 150, 64, 400).units, 150);
  EXPECT_EQ(bwd_tail_split(400 * 2 + 200, 64, 400).units, 0);
}

// What the postprocess waits for per (batch, kv head) with a tail split: its key blocks, plus
// parts - 1 for each of its units among the launch's last tail units.
TEST(BackwardWorkspace, DqDoneTargetWithTailSplit) {
  using sm90::bwd::dq_done_target;
  // 32 heads of 64 key blocks, the last 68 units in 5 parts: heads 0-29 whole, 30 has 4 split, 31 all.
  const int tail_first = 32 * 64 - 68;
  EXPECT_EQ(dq_done_target(0, 64, tail_first, 5), 64);
  EXPECT_EQ(dq_done_target(29, 64, tail_first, 5), 64);
  EXPECT_EQ(dq_done_target(30, 64, tail_first, 5), 64 + 4 * 4);
  EXPECT_EQ(dq_done_target(31, 64, tail_first, 5), 64 + 64 * 4);
  EXPECT_EQ(dq_done_target(31, 64, 1 << 30, 1), 64);  // no split
  EXPECT_EQ(dq_done_target(0, 3, 0, 2), 6);            // every unit split in two
}

TEST(BackwardWorkspace, TailSlots) {
  using namespace sm90::bwd;
  AttnProblem p;
  p.batch = 4, p.seqlen_q = p.seqlen_k = 4096, p.heads_q = p.heads_kv = 8, p.head_dim = 256;
  p.window_left = p.window_right = -1;
  WorkspaceLayout w = workspace_layout(p);
  EXPECT_EQ(w.tail_count - w.tail_acc, std::size_t(kMaxTailUnits) * kTailSlotFloats * sizeof(float));
  EXPECT_GE(w.total, w.tail_count + kMaxTailUnits * sizeof(int));
  p.seqlen_k = 64, p.batch = 1, p.heads_kv = p.heads_q = 2;  // 2 units: 2 slots
  w = workspace_layout(p);
  EXPECT_EQ(w.tail_count - w.tail_acc, std::size_t(2) * kTailSlotFloats * sizeof(float));
  for (int mask = 0; mask < 4; ++mask) {  // none for masked problems and other head dims
    AttnProblem m = p;
    if (mask == 0) m.causal = true, m.window_right = 0;
    if (mask == 1) m.window_left = 10;
    if (mask == 2) m.softcap = 30.f;
    if (mask == 3) m.head_dim = 128;
    w = workspace_layout(m);
    EXPECT_EQ(w.tail_count, w.tail_acc) << mask;
    EXPECT_EQ(w.total, w.tail_count) << mask;
  }
}

TEST(BackwardWorkspace, NoDeviceIsReportedAfterValidation) {
  if (has_cuda_device()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  SKIP_WITHOUT_BACKWARD_KERNEL();
  Result r = backward(valid_args(), g_fake_memory, sizeof g_fake_memory);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kUnsupportedDevice)) << r.message;
  EXPECT_NE(r.message.find("CUDA device"), std::string::npos) << r.message;
  // Before any workspace check: a null workspace is not what gets reported without a device.
  r = backward(valid_args(), nullptr, 0);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kUnsupportedDevice)) << r.message;
  // ...but validation comes first.
  BackwardArgs a = valid_args();
  a.dv.data = nullptr;
  r = backward(a, g_fake_memory, sizeof g_fake_memory);
  expect_rejected(r, Status::kInvalidArgument, "dv.data is null");
}

// ---- backward_cpu on real data --------------------------------------------------------------------

struct Shape {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal;
  float scale;
};

// Host buffers of one backward problem: q, k, v, dout random (rounded to `dtype`), out and lse from
// forward_cpu, dq/dk/dv poisoned (NaN) so an element nobody writes shows.
struct HostProblem {
  Shape sh;
  DType dtype;
  std::vector<float> qf, kf, vf, dof;
  std::vector<uint8_t> q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse;

  HostProblem(const Shape& s, DType t, uint64_t seed) : sh(s), dtype(t) {
    const size_t nq = static_cast<size_t>(s.b * s.sq * s.hq * s.d), nk = static_cast<size_t>(s.b * s.sk * s.hkv * s.d);
    qf = random_values(nq, seed, t);
    kf = random_values(nk, seed + 1, t);
    vf = random_values(nk, seed + 2, t);
    dof = random_values(nq, seed + 3, t);
    q = encode(qf, t), k = encode(kf, t), v = encode(vf, t), dout = encode(dof, t);
    out.assign(nq * dtype_size(t), 0);
    lse.assign(static_cast<size_t>(s.b * s.hq * s.sq), 0.f);
    dq.assign(nq * dtype_size(t), 0), dk.assign(nk * dtype_size(t), 0), dv.assign(nk * dtype_size(t), 0);
    poison(dq), poison(dk), poison(dv);
    const Result r = forward_cpu(forward_args());
    EXPECT_TRUE(r.ok()) << r.message;
  }

  ForwardArgs forward_args() {
    ForwardArgs a;
    a.q = make_tensor(q.data(), dtype, sh.b, sh.sq, sh.hq, sh.d);
    a.k = make_tensor(k.data(), dtype, sh.b, sh.sk, sh.hkv, sh.d);
    a.v = make_tensor(v.data(), dtype, sh.b, sh.sk, sh.hkv, sh.d);
    a.out = make_tensor(out.data(), dtype, sh.b, sh.sq, sh.hq, sh.d);
    a.lse = make_tensor(lse.data(), DType::kFP32, sh.b, sh.hq, sh.sq);
    a.causal = sh.causal;
    a.softmax_scale = sh.scale;
    return a;
  }

  BackwardArgs backward_args(bool with_out_lse = true) {
    const ForwardArgs f = forward_args();
    BackwardArgs a;
    a.q = f.q, a.k = f.k, a.v = f.v;
    if (with_out_lse) a.out = f.out, a.lse = f.lse;
    a.dout = make_tensor(dout.data(), dtype, sh.b, sh.sq, sh.hq, sh.d);
    a.dq = make_tensor(dq.data(), dtype, sh.b, sh.sq, sh.hq, sh.d);
    a.dk = make_tensor(dk.data(), dtype, sh.b, sh.sk, sh.hkv, sh.d);
    a.dv = make_tensor(dv.data(), dtype, sh.b, sh.sk, sh.hkv, sh.d);
    a.causal = sh.causal;
    a.softmax_scale = sh.scale;
    return a;
  }

  // reference::backward_cpu called directly on a hand-built problem, into fresh buffers.
  void reference(std::vector<uint8_t>& rq, std::vector<uint8_t>& rk, std::vector<uint8_t>& rv) {
    rq.assign(dq.size(), 0), rk.assign(dk.size(), 0), rv.assign(dv.size(), 0);
    poison(rq), poison(rk), poison(rv);
    auto contiguous = [](int64_t (&st)[3], int64_t s, int64_t h, int64_t d) {
      st[0] = s * h * d, st[1] = h * d, st[2] = d;
    };
    AttnBackwardProblem p;
    AttnProblem& f = p.fwd;
    f.batch = sh.b, f.seqlen_q = sh.sq, f.seqlen_k = sh.sk, f.heads_q = sh.hq, f.heads_kv = sh.hkv, f.head_dim = sh.d;
    // The normalised form validation produces: causal is window_right = 0.
    f.dtype = dtype, f.causal = sh.causal, f.scale = sh.scale, f.window_right = sh.causal ? 0 : -1;
    f.q = q.data(), f.k = k.data(), f.v = v.data();
    contiguous(f.q_stride, sh.sq, sh.hq, sh.d), contiguous(f.o_stride, sh.sq, sh.hq, sh.d);
    contiguous(f.k_stride, sh.sk, sh.hkv, sh.d), contiguous(f.v_stride, sh.sk, sh.hkv, sh.d);
    p.dout = dout.data(), p.dq = rq.data(), p.dk = rk.data(), p.dv = rv.data();
    p.grad_dtype = dtype;
    contiguous(p.do_stride, sh.sq, sh.hq, sh.d), contiguous(p.dq_stride, sh.sq, sh.hq, sh.d);
    contiguous(p.dk_stride, sh.sk, sh.hkv, sh.d), contiguous(p.dv_stride, sh.sk, sh.hkv, sh.d);
    reference::backward_cpu(p);
  }

  // L = sum(dout * out) through the public forward_cpu, in double from fp32 out.
  double loss() {
    std::vector<float> o(qf.size());
    ForwardArgs a;
    a.q = make_tensor(qf.data(), DType::kFP32, sh.b, sh.sq, sh.hq, sh.d);
    a.k = make_tensor(kf.data(), DType::kFP32, sh.b, sh.sk, sh.hkv, sh.d);
    a.v = make_tensor(vf.data(), DType::kFP32, sh.b, sh.sk, sh.hkv, sh.d);
    a.out = make_tensor(o.data(), DType::kFP32, sh.b, sh.sq, sh.hq, sh.d);
    a.causal = sh.causal;
    a.softmax_scale = sh.scale;
    const Result r = forward_cpu(a);
    EXPECT_TRUE(r.ok()) << r.message;
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += static_cast<double>(o[i]) * dof[i];
    return l;
  }
};

// GQA (4 query heads on 2 kv heads), causal with seqlen_q > seqlen_k: rows 0 and 1 see no key.
const Shape kGqaCausal{2, 7, 5, 4, 2, 8, true, 0.6f};

TEST(BackwardCpu, EqualsReferenceBitwise) {
  for (DType t : {DType::kFP32, DType::kBF16}) {
    HostProblem hp(kGqaCausal, t, 11);
    std::vector<uint8_t> rq, rk, rv;
    hp.reference(rq, rk, rv);
    const Result r = backward_cpu(hp.backward_args());
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(hp.dq, rq) << dtype_name(t);
    EXPECT_EQ(hp.dk, rk) << dtype_name(t);
    EXPECT_EQ(hp.dv, rv) << dtype_name(t);
    // Without out and lse (the reference recomputes both): the same bits.
    poison(hp.dq), poison(hp.dk), poison(hp.dv);
    const Result r2 = backward_cpu(hp.backward_args(/*with_out_lse=*/false));
    ASSERT_TRUE(r2.ok()) << r2.message;
    EXPECT_EQ(hp.dq, rq) << dtype_name(t);
    EXPECT_EQ(hp.dk, rk) << dtype_name(t);
    EXPECT_EQ(hp.dv, rv) << dtype_name(t);
  }
}

TEST(BackwardCpu, StridedGradientsLandInPlace) {
  HostProblem hp(kGqaCausal, DType::kFP32, 12);
  std::vector<uint8_t> rq, rk, rv;
  hp.reference(rq, rk, rv);
  const Shape& s = hp.sh;
  // dk with its seq and head dims swapped in memory (batch, head, seq, d), plus a padded batch stride.
  std::vector<float> dk(static_cast<size_t>((s.b * s.hkv * s.sk + 3) * s.d), NAN);
  BackwardArgs a = hp.backward_args();
  a.dk.data = dk.data();
  a.dk.strides[2] = s.sk * s.d;
  a.dk.strides[1] = s.d;
  a.dk.strides[0] = s.hkv * s.sk * s.d + s.d;
  const Result r = backward_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;
  const std::vector<float> want = decode(rk.data(), rk.size() / 4, DType::kFP32);
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t j = 0; j < s.sk; ++j)
      for (int64_t h = 0; h < s.hkv; ++h)
        for (int64_t c = 0; c < s.d; ++c) {
          const float got = dk[static_cast<size_t>(b * a.dk.strides[0] + j * a.dk.strides[1] + h * a.dk.strides[2] + c)];
          const float ref = want[static_cast<size_t>(((b * s.sk + j) * s.hkv + h) * s.d + c)];
          ASSERT_EQ(float_bits(got), float_bits(ref)) << b << "," << j << "," << h << "," << c;
        }
  EXPECT_TRUE(std::isnan(dk[static_cast<size_t>(s.hkv * s.sk * s.d)])) << "the padding between batches was written";
}

TEST(BackwardCpu, MatchesFiniteDifferences) {
  HostProblem hp(kGqaCausal, DType::kFP32, 13);
  ASSERT_TRUE(backward_cpu(hp.backward_args()).ok());
  const std::vector<float> dq = decode(hp.dq.data(), hp.qf.size(), DType::kFP32);
  const std::vector<float> dk = decode(hp.dk.data(), hp.kf.size(), DType::kFP32);
  const std::vector<float> dv = decode(hp.dv.data(), hp.vf.size(), DType::kFP32);
  constexpr float kStep = 1e-2f;
  auto check = [&](std::vector<float>& x, const std::vector<float>& grad, size_t i, const char* name) {
    const float saved = x[i];
    x[i] = saved + kStep;
    const double up = hp.loss();
    x[i] = saved - kStep;
    const double down = hp.loss();
    x[i] = saved;
    const double fd = (up - down) / (2.0 * kStep);
    EXPECT_LT(std::fabs(fd - grad[i]) / (1.0 + std::fabs(fd)), 2e-3)
        << name << "[" << i << "]: finite difference " << fd << ", backward_cpu " << grad[i];
  };
  const Shape& s = hp.sh;
  // q: a row that sees keys (i = 4), in each batch; k and v: entries of both kv heads, i.e. summed
  // over the two query heads of each GQA group.
  for (size_t i : {static_cast<size_t>((4 * s.hq + 1) * s.d + 3), static_cast<size_t>(((s.sq + 6) * s.hq + 3) * s.d + 7)})
    check(hp.qf, dq, i, "dq");
  for (size_t i : {static_cast<size_t>((0 * s.hkv + 0) * s.d + 2), static_cast<size_t>(((s.sk + 3) * s.hkv + 1) * s.d + 5)}) {
    check(hp.kf, dk, i, "dk");
    check(hp.vf, dv, i, "dv");
  }
  // Rows 0 and 1 see no key: their dq is exactly 0.
  for (int64_t c = 0; c < 2 * s.hq * s.d; ++c) EXPECT_EQ(dq[static_cast<size_t>(c)], 0.f) << c;
}

// ---- zero-length cases ---------------------------------------------------------------------------

TEST(BackwardCpuEmpty, SeqlenQZeroGivesZeroDkDv) {
  for (DType t : {DType::kFP32, DType::kBF16, DType::kFP16}) {
    HostProblem hp(Shape{2, 0, 5, 4, 2, 8, true, 0.5f}, t, 21);
    BackwardArgs a = hp.backward_args();
    a.q.data = a.out.data = a.dout.data = a.dq.data = a.lse.data = nullptr;  // no elements: may be null
    const Result r = backward_cpu(a);
    ASSERT_TRUE(r.ok()) << r.message;
    for (float x : decode(hp.dk.data(), hp.kf.size(), t)) ASSERT_EQ(float_bits(x), 0u) << dtype_name(t);
    for (float x : decode(hp.dv.data(), hp.vf.size(), t)) ASSERT_EQ(float_bits(x), 0u) << dtype_name(t);
  }
}

TEST(BackwardCpuEmpty, SeqlenKZeroGivesZeroDq) {
  for (DType t : {DType::kFP32, DType::kBF16, DType::kFP16}) {
    for (bool causal : {false, true}) {
      HostProblem hp(Shape{2, 6, 0, 4, 2, 8, causal, 0.5f}, t, 22);
      BackwardArgs a = hp.backward_args();
      a.k.data = a.v.data = a.dk.data = a.dv.data = nullptr;
      const Result r = backward_cpu(a);
      ASSERT_TRUE(r.ok()) << r.message;
      for (float x : decode(hp.dq.data(), hp.qf.size(), t)) ASSERT_EQ(float_bits(x), 0u) << dtype_name(t);
    }
  }
}

TEST(BackwardCpuEmpty, NoQueryHeadsGivesZeroDkDv) {
  // heads_q == 0 with heads_kv > 0: dk and dv have elements, and no query uses them.
  const int64_t b = 2, sk = 5, hkv = 2, d = 8;
  std::vector<float> k(b * sk * hkv * d, 1.f), v(k.size(), 1.f);
  std::vector<float> dk(k.size() + 16, NAN), dv(k.size(), NAN);
  BackwardArgs a;
  a.q = make_tensor(nullptr, DType::kFP32, b, 3, 0, d);
  a.out = a.dout = a.dq = a.q;
  a.k = make_tensor(k.data(), DType::kFP32, b, sk, hkv, d);
  a.v = make_tensor(v.data(), DType::kFP32, b, sk, hkv, d);
  a.dk = make_tensor(dk.data(), DType::kFP32, b, sk, hkv, d);
  a.dk.strides[0] += 8;  // padded batches: the padding stays untouched
  a.dv = make_tensor(dv.data(), DType::kFP32, b, sk, hkv, d);
  const Result r = backward_cpu(a);
  ASSERT_TRUE(r.ok()) << r.message;
  for (float x : dv) EXPECT_EQ(float_bits(x), 0u);
  for (int64_t i = 0; i < static_cast<int64_t>(dk.size()); ++i) {
    const int64_t in_batch = i % a.dk.strides[0];
    const bool padding = i >= b * a.dk.strides[0] || in_batch >= sk * hkv * d;
    if (padding)
      EXPECT_TRUE(std::isnan(dk[static_cast<size_t>(i)])) << i;
    else
      EXPECT_EQ(float_bits(dk[static_cast<size_t>(i)]), 0u) << i;
  }
}

TEST(BackwardCpuEmpty, ZeroBatchIsANoOp) {
  BackwardArgs a;
  for (TensorRef* t : {&a.q, &a.out, &a.dout, &a.dq}) *t = make_tensor(nullptr, DType::kFP32, 0, 4, 2, 8);
  for (TensorRef* t : {&a.k, &a.v, &a.dk, &a.dv}) *t = make_tensor(nullptr, DType::kFP32, 0, 3, 1, 8);
  const Result r = backward_cpu(a);
  EXPECT_TRUE(r.ok()) << r.message;
}

// ---- the C ABI -------------------------------------------------------------------------------------

using ::hopattn::test::to_c;  // the tensor overload (c_abi_util.hpp), beside this one

hopattn_bwd_args to_c(const BackwardArgs& a) {
  hopattn_bwd_args c{};
  c.q = to_c(a.q), c.k = to_c(a.k), c.v = to_c(a.v), c.out = to_c(a.out), c.dout = to_c(a.dout);
  c.lse = to_c(a.lse), c.dq = to_c(a.dq), c.dk = to_c(a.dk), c.dv = to_c(a.dv);
  c.causal = a.causal;
  c.has_softmax_scale = a.softmax_scale.has_value();
  c.softmax_scale = a.softmax_scale.value_or(0.f);
  c.deterministic = a.deterministic;
  return c;
}

TEST(BackwardCAbi, CpuRoundTrip) {
  HostProblem hp(kGqaCausal, DType::kFP32, 31);
  std::vector<uint8_t> rq, rk, rv;
  hp.reference(rq, rk, rv);
  hopattn_bwd_args c = to_c(hp.backward_args());
  ASSERT_EQ(hopattn_backward_cpu(&c), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");
  EXPECT_EQ(hp.dq, rq);
  EXPECT_EQ(hp.dk, rk);
  EXPECT_EQ(hp.dv, rv);
  // out and lse left out (data NULL, ndim 0); their other fields are not looked at.
  poison(hp.dq), poison(hp.dk), poison(hp.dv);
  c.out = hopattn_tensor{};
  c.out.dtype = 99;
  c.lse = hopattn_tensor{};
  c.lse.dtype = 99;
  ASSERT_EQ(hopattn_backward_cpu(&c), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_EQ(hp.dq, rq);
  EXPECT_EQ(hp.dk, rk);
  EXPECT_EQ(hp.dv, rv);
}

TEST(BackwardCAbi, LastErrorOnBadCalls) {
  EXPECT_EQ(hopattn_backward_cpu(nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_STREQ(hopattn_last_error(), "args is null");
  EXPECT_EQ(hopattn_backward(nullptr, g_fake_memory, sizeof g_fake_memory, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_STREQ(hopattn_last_error(), "args is null");
  EXPECT_EQ(hopattn_backward_workspace_size(nullptr), 0u);

  hopattn_bwd_args c = to_c(valid_args());
  c.dk.sizes[1] += 1;
  EXPECT_EQ(hopattn_backward_cpu(&c), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("dk.sizes[1]=49 but k.sizes[1]=48"), std::string::npos)
      << hopattn_last_error();
  EXPECT_EQ(hopattn_backward(&c, g_fake_memory, sizeof g_fake_memory, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("dk.sizes[1]"), std::string::npos) << hopattn_last_error();

  c = to_c(valid_args());
  c.dout.dtype = 7;
  EXPECT_EQ(hopattn_backward_cpu(&c), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("dout: unknown dtype code 7"), std::string::npos)
      << hopattn_last_error();

  c = to_c(valid_args());
  c.dq.ndim = 9;
  EXPECT_EQ(hopattn_backward_cpu(&c), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("dq: ndim 9"), std::string::npos) << hopattn_last_error();

  // out given with a NULL pointer but a shape is not "left out".
  c = to_c(valid_args());
  c.out.data = nullptr;
  EXPECT_EQ(hopattn_backward_cpu(&c), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("out.data is null"), std::string::npos) << hopattn_last_error();
}

TEST(BackwardCAbi, GpuCallNeedsOutAndLse) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  hopattn_bwd_args c = to_c(valid_args());
  c.out = hopattn_tensor{};
  EXPECT_EQ(hopattn_backward(&c, g_fake_memory, sizeof g_fake_memory, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("out: required by backward"), std::string::npos)
      << hopattn_last_error();
  EXPECT_EQ(hopattn_backward_workspace_size(&c), 0u);
  c = to_c(valid_args());
  c.lse = hopattn_tensor{};
  EXPECT_EQ(hopattn_backward(&c, g_fake_memory, sizeof g_fake_memory, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("lse: required by backward"), std::string::npos)
      << hopattn_last_error();
}

TEST(BackwardCAbi, WorkspaceSizeGrowsWithSeqlenQ) {
  SKIP_WITHOUT_BACKWARD_KERNEL();
  std::size_t previous = 0;
  for (int64_t sq : {64, 700, 2000}) {  // apart by more than any row padding (640 rows at most)
    BackwardArgs a = valid_args();
    for (TensorRef* t : {&a.q, &a.out, &a.dout, &a.dq}) *t = make_tensor(g_fake_memory, t->dtype, 2, sq, 4, t->sizes[3]);
    a.lse = make_tensor(g_fake_memory, DType::kFP32, 2, 4, sq);
    const hopattn_bwd_args c = to_c(a);
    const std::size_t bytes = hopattn_backward_workspace_size(&c);
    EXPECT_GT(bytes, previous) << "seqlen_q " << sq;
    EXPECT_EQ(bytes, backward_workspace_size(a));
    previous = bytes;
  }
}

TEST(BackwardCAbi, NoDevice) {
  if (has_cuda_device()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  SKIP_WITHOUT_BACKWARD_KERNEL();
  const hopattn_bwd_args c = to_c(valid_args());
  EXPECT_EQ(hopattn_backward(&c, g_fake_memory, sizeof g_fake_memory, nullptr), HOPATTN_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::string(hopattn_last_error()).find("CUDA device"), std::string::npos) << hopattn_last_error();
}

}  // namespace
}  // namespace hopattn::test
