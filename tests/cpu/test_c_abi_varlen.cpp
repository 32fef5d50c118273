// The varlen forward through the C ABI (hopattn_c.h: hopattn_varlen_fwd_args): hopattn_forward_varlen_cpu
// against hopattn::forward_varlen_cpu through the C++ API on the same inputs (bitwise: the C layer
// only converts the struct), the optional tensors (lse, seqused) left out as the header says, the
// error path (null args, malformed structs, bad cu_seqlens values: a nonzero code and
// hopattn_last_error() naming the argument, out left untouched), and hopattn_forward_varlen without a
// GPU (validation first, then the unsupported-device code with a message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../common/c_abi_util.hpp"
#include "../common/test_util.hpp"
#include "../common/varlen_util.hpp"
#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn::test {
namespace {

constexpr float kSentinel = 7.f;
constexpr float kLseSentinel = 123.f;

// One mixed-length fp32 problem on the host, with two sets of outputs (one for the C ABI, one for
// the C++ API), both pre-filled with sentinels.
struct HostCase {
  std::vector<int> len_q, len_k;
  std::optional<std::vector<int>> used_k;
  int64_t heads_q = 4, heads_kv = 2, head_dim = 16;
  int64_t extra_q = 2, extra_k = 3;  // packed rows past cu_seqlens[batch]
  bool causal = false;
  std::optional<float> softmax_scale;

  std::vector<int32_t> cu_q, cu_k, seqused_k;
  int64_t total_q = 0, total_k = 0;
  std::vector<float> q, k, v, out_c, out_cpp, lse_c, lse_cpp;

  void build(uint64_t seed) {
    cu_q = prefix_sums(len_q);
    cu_k = prefix_sums(len_k);
    if (used_k) seqused_k.assign(used_k->begin(), used_k->end());
    total_q = cu_q.back() + extra_q;
    total_k = cu_k.back() + extra_k;
    q = random_values(static_cast<size_t>(total_q * heads_q * head_dim), seed);
    k = random_values(static_cast<size_t>(total_k * heads_kv * head_dim), seed + 1);
    v = random_values(static_cast<size_t>(total_k * heads_kv * head_dim), seed + 2);
    out_c.assign(q.size(), kSentinel);
    out_cpp.assign(q.size(), kSentinel);
    lse_c.assign(static_cast<size_t>(heads_q * total_q), kLseSentinel);
    lse_cpp.assign(lse_c.size(), kLseSentinel);
  }

  VarlenForwardArgs cpp_args(float* out, float* lse) {
    VarlenForwardArgs a;
    a.q = make_tensor(q.data(), DType::kFP32, total_q, heads_q, head_dim);
    a.k = make_tensor(k.data(), DType::kFP32, total_k, heads_kv, head_dim);
    a.v = make_tensor(v.data(), DType::kFP32, total_k, heads_kv, head_dim);
    a.out = make_tensor(out, DType::kFP32, total_q, heads_q, head_dim);
    if (lse != nullptr) a.lse = lse_tensor(lse, heads_q, total_q);
    a.cu_seqlens_q = index_tensor(cu_q);
    a.cu_seqlens_k = index_tensor(cu_k);
    if (used_k) a.seqused_k = index_tensor(seqused_k);
    a.max_seqlen_q = *std::max_element(len_q.begin(), len_q.end());
    a.max_seqlen_k = *std::max_element(len_k.begin(), len_k.end());
    a.causal = causal;
    a.softmax_scale = softmax_scale;
    return a;
  }

  // The same arguments as the C struct, writing out_c / lse_c (lse left out when with_lse is false:
  // data NULL, the other fields garbage, which the C layer must not look at).
  hopattn_varlen_fwd_args c_args(bool with_lse = true) {
    const VarlenForwardArgs a = cpp_args(out_c.data(), with_lse ? lse_c.data() : nullptr);
    hopattn_varlen_fwd_args c{};
    c.q = to_c(a.q);
    c.k = to_c(a.k);
    c.v = to_c(a.v);
    c.out = to_c(a.out);
    if (with_lse) {
      c.lse = to_c(a.lse);
    } else {
      c.lse.data = nullptr;
      c.lse.dtype = 99;
      c.lse.ndim = 7;
    }
    c.cu_seqlens_q = to_c(a.cu_seqlens_q);
    c.cu_seqlens_k = to_c(a.cu_seqlens_k);
    // Absent seqused: data NULL and ndim 0 (zero-initialised above).
    if (used_k) c.seqused_k = to_c(a.seqused_k);
    c.max_seqlen_q = a.max_seqlen_q;
    c.max_seqlen_k = a.max_seqlen_k;
    c.causal = causal ? 1 : 0;
    c.has_softmax_scale = softmax_scale ? 1 : 0;
    c.softmax_scale = softmax_scale.value_or(-5.f);  // ignored when has_softmax_scale is 0
    return c;
  }
};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_c_matches_cpp(HostCase c, uint64_t seed, bool with_lse = true) {
  c.build(seed);
  hopattn_varlen_fwd_args ca = c.c_args(with_lse);
  ASSERT_EQ(hopattn_forward_varlen_cpu(&ca), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");
  const Result r = forward_varlen_cpu(c.cpp_args(c.out_cpp.data(), with_lse ? c.lse_cpp.data() : nullptr));
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(bitwise_equal(c.out_c, c.out_cpp)) << "out differs between the C ABI and the C++ API";
  EXPECT_TRUE(bitwise_equal(c.lse_c, c.lse_cpp)) << "lse differs between the C ABI and the C++ API";
  // Not vacuous: the real rows were written (finite values, not the sentinel), the rows past
  // cu_seqlens_q[batch] were not.
  const int64_t row = c.heads_q * c.head_dim;
  int64_t written = 0;
  for (int64_t t = 0; t < c.cu_q.back(); ++t)
    for (int64_t e = 0; e < row; ++e) {
      const float x = c.out_c[t * row + e];
      EXPECT_TRUE(std::isfinite(x)) << "token " << t;
      written += x != kSentinel;
    }
  EXPECT_GT(written, 0);
  for (int64_t t = c.cu_q.back(); t < c.total_q; ++t)
    for (int64_t e = 0; e < row; ++e) EXPECT_EQ(c.out_c[t * row + e], kSentinel) << "token " << t;
  if (!with_lse)
    for (float x : c.lse_c) EXPECT_EQ(x, kLseSentinel);
}

HostCase mixed_case() {
  HostCase c;
  c.len_q = {3, 0, 5, 1, 4};
  c.len_k = {4, 2, 5, 6, 0};  // an empty key sequence: its queries get 0 / -inf
  return c;
}

TEST(VarlenCAbi, CpuMatchesCppApiBitwise) { expect_c_matches_cpp(mixed_case(), 11); }

TEST(VarlenCAbi, CpuMatchesCppApiBitwiseCausal) {
  HostCase c = mixed_case();
  c.causal = true;
  c.len_q = {3, 0, 5, 1, 4};
  c.len_k = {4, 2, 5, 6, 2};  // k shorter than q in the last sequence: rows without keys
  expect_c_matches_cpp(c, 12);
}

TEST(VarlenCAbi, CpuMatchesCppApiBitwiseScaleSequsedNoLse) {
  HostCase c = mixed_case();
  c.causal = true;
  c.softmax_scale = 0.3f;
  c.used_k = std::vector<int>{2, 2, 4, 6, 0};
  expect_c_matches_cpp(c, 13);
  expect_c_matches_cpp(c, 14, /*with_lse=*/false);
}

TEST(VarlenCAbi, SoftmaxScaleIsPassedThrough) {
  // The C struct's scale reaches the computation (has_softmax_scale = 1), and is ignored with 0.
  HostCase c = mixed_case();
  c.build(15);
  hopattn_varlen_fwd_args ca = c.c_args();
  ASSERT_EQ(hopattn_forward_varlen_cpu(&ca), HOPATTN_SUCCESS) << hopattn_last_error();
  const std::vector<float> default_scale = c.out_c;
  ca.has_softmax_scale = 1;
  ca.softmax_scale = 0.05f;
  ASSERT_EQ(hopattn_forward_varlen_cpu(&ca), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_FALSE(bitwise_equal(c.out_c, default_scale));
}

// ---- the error path ------------------------------------------------------------------------------

void expect_c_rejected(hopattn_varlen_fwd_args* ca, HostCase& c, int code, const std::string& fragment) {
  SCOPED_TRACE(fragment);
  const std::vector<float> before = c.out_c;
  EXPECT_EQ(hopattn_forward_varlen_cpu(ca), code);
  const std::string msg = hopattn_last_error();
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  EXPECT_TRUE(bitwise_equal(c.out_c, before)) << "out written by a rejected call";
}

TEST(VarlenCAbi, NullArgs) {
  EXPECT_EQ(hopattn_forward_varlen_cpu(nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("args is null"), std::string::npos) << hopattn_last_error();
  EXPECT_EQ(hopattn_forward_varlen(nullptr, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("args is null"), std::string::npos) << hopattn_last_error();
}

// A zero-filled C struct whose tensor `first` has an unknown dtype code: `call` must reject it, naming
// the tensor.
template <class Args, class Call>
void expect_bad_dtype(hopattn_tensor Args::*first, Call call, const char* entry, const char* tensor) {
  Args a{};
  (a.*first).dtype = 77;
  EXPECT_EQ(call(&a), HOPATTN_INVALID_ARGUMENT) << entry;
  const std::string msg = hopattn_last_error();
  EXPECT_NE(msg.find(std::string(tensor) + ": unknown dtype code 77"), std::string::npos) << entry << ": " << msg;
}

// Every C entry point that takes an args struct: a null struct, and a struct whose first tensor has
// an unknown dtype code (zero-filled otherwise), are rejected with a message; nothing is dereferenced.
TEST(CAbi, EveryEntryPointRejectsNullAndMalformedArgs) {
  auto expect_null = [](int rc, const char* entry) {
    EXPECT_EQ(rc, HOPATTN_INVALID_ARGUMENT) << entry;
    EXPECT_NE(std::string(hopattn_last_error()).find("args is null"), std::string::npos) << entry << ": " << hopattn_last_error();
  };
  expect_null(hopattn_attention_fp8(nullptr, nullptr, 0, nullptr), "attention_fp8");
  expect_null(hopattn_forward_fp8(nullptr, nullptr, 0, nullptr), "forward_fp8");
  expect_null(hopattn_quantize_fp8(nullptr, nullptr), "quantize_fp8");
  expect_null(hopattn_attention_fp8_varlen(nullptr, nullptr, 0, nullptr), "attention_fp8_varlen");
  expect_null(hopattn_forward_fp8_varlen(nullptr, nullptr, 0, nullptr), "forward_fp8_varlen");
  expect_null(hopattn_attention_with_kvcache(nullptr, nullptr, 0, nullptr), "attention_with_kvcache");
  expect_null(hopattn_attention_with_kvcache_cpu(nullptr), "attention_with_kvcache_cpu");
  expect_null(hopattn_forward_reference_cuda(nullptr, nullptr), "forward_reference_cuda");
  EXPECT_EQ(hopattn_attention_fp8_workspace_size(nullptr), 0u);
  EXPECT_EQ(hopattn_forward_fp8_workspace_size(nullptr), 0u);
  EXPECT_EQ(hopattn_attention_with_kvcache_workspace_size(nullptr), 0u);
  expect_bad_dtype<hopattn_fp8_attention_args>(
      &hopattn_fp8_attention_args::q, [](const auto* a) { return hopattn_attention_fp8(a, nullptr, 0, nullptr); },
      "attention_fp8", "q");
  expect_bad_dtype<hopattn_fp8_fwd_args>(
      &hopattn_fp8_fwd_args::q, [](const auto* a) { return hopattn_forward_fp8(a, nullptr, 0, nullptr); }, "forward_fp8",
      "q");
  expect_bad_dtype<hopattn_fp8_quantize_args>(
      &hopattn_fp8_quantize_args::in, [](const auto* a) { return hopattn_quantize_fp8(a, nullptr); }, "quantize_fp8",
      "in");
  expect_bad_dtype<hopattn_fp8_varlen_attention_args>(
      &hopattn_fp8_varlen_attention_args::q,
      [](const auto* a) { return hopattn_attention_fp8_varlen(a, nullptr, 0, nullptr); }, "attention_fp8_varlen", "q");
  expect_bad_dtype<hopattn_fp8_varlen_fwd_args>(
      &hopattn_fp8_varlen_fwd_args::q, [](const auto* a) { return hopattn_forward_fp8_varlen(a, nullptr, 0, nullptr); },
      "forward_fp8_varlen", "q");
  {
    hopattn_fwd_args a{};
    a.q.ndim = 9;
    EXPECT_EQ(hopattn_forward_reference_cuda(&a, nullptr), HOPATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(hopattn_last_error()).find("q: ndim 9 out of range"), std::string::npos) << hopattn_last_error();
  }
}

TEST(VarlenCAbi, BadCuSeqlensValuesNameCuSeqlensQ) {
  HostCase c = mixed_case();
  c.build(21);
  {
    hopattn_varlen_fwd_args ca = c.c_args();
    std::vector<int32_t> cu = c.cu_q;
    cu[0] = 1;  // prefix sums start at 0
    ca.cu_seqlens_q.data = cu.data();
    expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q[0]=1");
  }
  {
    hopattn_varlen_fwd_args ca = c.c_args();
    std::vector<int32_t> cu = c.cu_q;
    cu[3] = cu[2] - 1;  // decreasing
    ca.cu_seqlens_q.data = cu.data();
    expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q[3]");
  }
  {
    hopattn_varlen_fwd_args ca = c.c_args();
    std::vector<int32_t> cu = c.cu_q;
    cu.back() = static_cast<int32_t>(c.total_q) + 1;  // past the packed tokens
    ca.cu_seqlens_q.data = cu.data();
    expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q[5]");
  }
  {
    hopattn_varlen_fwd_args ca = c.c_args();
    ca.max_seqlen_q = 4;  // sequence 2 has 5 queries
    expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q[3]-cu_seqlens_q[2]=5");
  }
}

TEST(VarlenCAbi, MalformedIndexTensorsNameThem) {
  HostCase c = mixed_case();
  c.build(22);
  hopattn_varlen_fwd_args ca = c.c_args();
  ca.cu_seqlens_q.dtype = 42;  // not a dtype code: the C layer rejects it
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q: unknown dtype code 42");
  ca = c.c_args();
  ca.cu_seqlens_q.dtype = HOPATTN_FP32;
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q: dtype must be int32");
  ca = c.c_args();
  ca.cu_seqlens_q.ndim = 2;
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q: expected 1 dim");
  ca = c.c_args();
  ca.cu_seqlens_q.ndim = 5;
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_q: ndim 5 out of range");
  ca = c.c_args();
  ca.cu_seqlens_k.sizes[0] = 4;  // batch + 1 is 6, from cu_seqlens_q
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "cu_seqlens_k.sizes[0]=4");
  // A seqused tensor that is present (ndim 1) but has a NULL data pointer is not "absent".
  ca = c.c_args();
  ca.seqused_q.ndim = 1;
  ca.seqused_q.dtype = HOPATTN_INT32;
  ca.seqused_q.sizes[0] = 5;
  ca.seqused_q.strides[0] = 1;
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "seqused_q.data is null");
  // An absent seqused (data NULL, ndim 0) is not looked at, whatever its dtype field says.
  ca = c.c_args();
  ca.seqused_k.dtype = 99;
  ASSERT_EQ(hopattn_forward_varlen_cpu(&ca), HOPATTN_SUCCESS) << hopattn_last_error();
  // A valid call after a failed one clears the message.
  EXPECT_STREQ(hopattn_last_error(), "");
}

TEST(VarlenCAbi, BadSequsedValuesNameSeqused) {
  HostCase c = mixed_case();
  c.used_k = std::vector<int>{2, 2, 4, 6, 0};
  c.build(23);
  hopattn_varlen_fwd_args ca = c.c_args();
  std::vector<int32_t> used = c.seqused_k;
  used[2] = 6;  // sequence 2 has 5 keys
  ca.seqused_k.data = used.data();
  expect_c_rejected(&ca, c, HOPATTN_INVALID_ARGUMENT, "seqused_k[2]=6");
}

// ---- hopattn_forward_varlen without a GPU --------------------------------------------------------

alignas(256) unsigned char g_fake_memory[4096];  // a stand-in device address; nothing reads or writes it
alignas(16) int32_t g_fake_index[8];

struct BuiltForward {
  DType dtype = DType::kBF16;
  int64_t head_dim = 64;
  bool found = false;
};

BuiltForward forward_kernel() {
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      if (has_forward_kernel(t, d)) return {t, d, true};
  return {};
}

// A valid GPU-side struct (batch 2, 16 tokens each side, GQA 4/2) over fake device memory.
hopattn_varlen_fwd_args gpu_c_args(const BuiltForward& kern) {
  const DType t = kern.dtype;
  const int64_t d = kern.head_dim;
  hopattn_varlen_fwd_args c{};
  c.q = to_c(make_tensor(g_fake_memory, t, 16, 4, d));
  c.k = to_c(make_tensor(g_fake_memory, t, 16, 2, d));
  c.v = to_c(make_tensor(g_fake_memory, t, 16, 2, d));
  c.out = to_c(make_tensor(g_fake_memory, t, 16, 4, d));
  TensorRef cu;
  cu.data = g_fake_index;
  cu.dtype = DType::kInt32;
  cu.ndim = 1;
  cu.sizes[0] = 3;
  cu.strides[0] = 1;
  c.cu_seqlens_q = c.cu_seqlens_k = to_c(cu);
  c.max_seqlen_q = c.max_seqlen_k = 16;
  c.causal = 1;
  return c;
}

TEST(VarlenCAbi, GpuEntryWithoutDeviceReportsUnsupportedDevice) {
  if (has_cuda_device()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const BuiltForward kern = forward_kernel();
  if (!kern.found) GTEST_SKIP() << "no forward kernel in this build: " << build_instantiations();
  hopattn_varlen_fwd_args c = gpu_c_args(kern);
  EXPECT_EQ(hopattn_forward_varlen(&c, nullptr), HOPATTN_UNSUPPORTED_DEVICE) << hopattn_last_error();
  EXPECT_NE(std::string(hopattn_last_error()).find("CUDA device"), std::string::npos) << hopattn_last_error();
  // check_index_values copies the index tensors from the device: it comes after the device check.
  c.check_index_values = 1;
  EXPECT_EQ(hopattn_forward_varlen(&c, nullptr), HOPATTN_UNSUPPORTED_DEVICE) << hopattn_last_error();
  // Validation comes first: a malformed cu_seqlens_q is reported as such, even without a device.
  c = gpu_c_args(kern);
  c.cu_seqlens_q.dtype = HOPATTN_FP32;
  EXPECT_EQ(hopattn_forward_varlen(&c, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("cu_seqlens_q"), std::string::npos) << hopattn_last_error();
  // fp32 is CPU-only.
  c = gpu_c_args(kern);
  c.q.dtype = c.k.dtype = c.v.dtype = c.out.dtype = HOPATTN_FP32;
  EXPECT_EQ(hopattn_forward_varlen(&c, nullptr), HOPATTN_UNSUPPORTED);
  EXPECT_NE(std::string(hopattn_last_error()).find("q: dtype fp32"), std::string::npos) << hopattn_last_error();
}

// The workspace form: its size query agrees with the C++ one (0 for invalid args), and a missing,
// short or misaligned workspace is refused naming the workspace, before any device is looked for
// (so the same on machines with and without a GPU); invalid args are reported as such first.
TEST(VarlenCAbi, WorkspaceFormChecksItsWorkspace) {
  const BuiltForward kern = forward_kernel();
  if (!kern.found) GTEST_SKIP() << "no forward kernel in this build: " << build_instantiations();
  alignas(256) static unsigned char workspace[512];
  hopattn_varlen_fwd_args c = gpu_c_args(kern);
  EXPECT_EQ(hopattn_forward_varlen_workspace_size(&c), 256u);
  EXPECT_EQ(hopattn_forward_varlen_workspace_size(nullptr), 0u);
  const auto expect_refused = [&](void* ws, size_t bytes, const std::string& fragment) {
    EXPECT_EQ(hopattn_forward_varlen_with_workspace(&c, ws, bytes, nullptr), HOPATTN_INVALID_ARGUMENT) << fragment;
    EXPECT_NE(std::string(hopattn_last_error()).find(fragment), std::string::npos) << hopattn_last_error();
  };
  expect_refused(nullptr, 0, "workspace is null but 256 bytes are needed (forward_varlen_workspace_size)");
  expect_refused(workspace, 255, "workspace_bytes=255 but 256 bytes are needed");
  expect_refused(workspace + 16, 256, "workspace is not 256-byte aligned");
  c.cu_seqlens_q.dtype = HOPATTN_FP32;
  EXPECT_EQ(hopattn_forward_varlen_workspace_size(&c), 0u);
  expect_refused(workspace, sizeof(workspace), "cu_seqlens_q");
  expect_refused(nullptr, 0, "cu_seqlens_q");  // the arguments first, then the workspace
  EXPECT_EQ(hopattn_forward_varlen_with_workspace(nullptr, workspace, sizeof(workspace), nullptr),
            HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("args is null"), std::string::npos) << hopattn_last_error();
  if (has_cuda_device()) return;  // a valid call would launch on the fake tensors
  c = gpu_c_args(kern);
  EXPECT_EQ(hopattn_forward_varlen_with_workspace(&c, workspace, sizeof(workspace), nullptr),
            HOPATTN_UNSUPPORTED_DEVICE)
      << hopattn_last_error();
}

}  // namespace
}  // namespace hopattn::test
