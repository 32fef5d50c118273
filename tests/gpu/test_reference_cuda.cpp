// The CUDA reference (forward_reference_cuda, fill_no_keys) against the CPU reference on the same
// bytes. Both accumulate in fp64 and round once, so outputs agree to the last bit but for rare ties;
// outputs are poisoned (NaN) first so an element the kernel forgets to write fails loudly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"
#include "reference/reference.hpp"

namespace hopattn::test {
namespace {

struct Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
};

enum class Layout {
  kContiguous,
  kStrided,  // q/k/v views into one packed (b, s, 3, h, d) buffer; out head-major with padded rows
};

struct Case {
  Shape s;
  DType dtype;
  bool causal;
  uint64_t seed;
  std::optional<float> scale = std::nullopt;
  bool with_lse = true;
  Layout layout = Layout::kContiguous;
  Window window{};
  float softcap = 0.f;
};

// One allocation, mirrored on host and device; TensorRefs into it translate between the two.
struct Mirror {
  std::vector<uint8_t> host;
  DeviceBuffer device;
  void* on_device(void* host_ptr) const {
    return static_cast<uint8_t*>(device.get()) + (static_cast<uint8_t*>(host_ptr) - host.data());
  }
};

// Host and device copies of the same problem: args_host for forward_cpu, args_device for the kernel.
struct Problem {
  Mirror qkv, out, lse;  // q, k and v share one buffer (packed or back to back)
  ForwardArgs args_host, args_device;
};

Problem make_problem(const Case& c) {
  const Shape& s = c.s;
  const DType t = c.dtype;
  const size_t es = dtype_size(t);
  const int64_t nq = s.batch * s.seqlen_q * s.heads_q * s.head_dim;
  const int64_t nk = s.batch * s.seqlen_k * s.heads_kv * s.head_dim;
  Problem p;
  ForwardArgs& a = p.args_host;
  if (c.layout == Layout::kContiguous) {
    p.qkv.host = encode(random_values(size_t(nq + 2 * nk), c.seed, t), t);
    uint8_t* base = p.qkv.host.data();
    a.q = make_tensor(base, t, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
    a.k = make_tensor(base + nq * es, t, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
    a.v = make_tensor(base + (nq + nk) * es, t, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
    p.out.host.resize(size_t(nq) * es);
    a.out = make_tensor(p.out.host.data(), t, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  } else {  // needs seqlen_q == seqlen_k and heads_q == heads_kv, like a fused QKV projection
    const int64_t n = s.seqlen_q, h = s.heads_q, d = s.head_dim;
    p.qkv.host = encode(random_values(size_t(3 * nq), c.seed, t), t);
    for (int which = 0; which < 3; ++which) {
      TensorRef r = make_tensor(p.qkv.host.data() + which * h * d * es, t, s.batch, n, h, d);
      r.strides[0] = n * 3 * h * d;
      r.strides[1] = 3 * h * d;
      (which == 0 ? a.q : which == 1 ? a.k : a.v) = r;
    }
    const int64_t row = d + 8;  // 8 padding elements per row that nobody may write
    p.out.host.resize(size_t(s.batch * h * n * row) * es);
    a.out = make_tensor(p.out.host.data(), t, s.batch, n, h, d);
    a.out.strides[0] = h * n * row;
    a.out.strides[1] = row;
    a.out.strides[2] = n * row;
  }
  poison(p.out.host);
  if (c.with_lse) {
    p.lse.host.resize(size_t(s.batch * s.heads_q * s.seqlen_q) * 4);
    poison(p.lse.host);
    a.lse = make_tensor(p.lse.host.data(), DType::kFP32, s.batch, s.heads_q, s.seqlen_q);
  }
  a.causal = c.causal;
  a.softmax_scale = c.scale;
  a.window = c.window;
  a.softcap = c.softcap;

  for (Mirror* m : {&p.qkv, &p.out, &p.lse}) m->device = DeviceBuffer(m->host);
  p.args_device = a;
  p.args_device.q.data = p.qkv.on_device(a.q.data);
  p.args_device.k.data = p.qkv.on_device(a.k.data);
  p.args_device.v.data = p.qkv.on_device(a.v.data);
  p.args_device.out.data = p.out.on_device(a.out.data);
  if (c.with_lse) p.args_device.lse.data = p.lse.on_device(a.lse.data);
  return p;
}

// Same NaNs (padding, never written, in both), no element more than one output ulp apart,
// relative L2 <= tol over the written elements.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, DType t, double rel_tol,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  std::vector<float> g, c;
  int bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::isnan(gpu[i]) || std::isnan(cpu[i])) {
      if (std::isnan(gpu[i]) != std::isnan(cpu[i]) && ++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      continue;
    }
    if (std::isinf(cpu[i])) {  // lse of a row that sees no key
      if (gpu[i] != cpu[i] && ++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      continue;
    }
    if (!(std::fabs(double(gpu[i]) - cpu[i]) <= dtype_ulp(t, cpu[i])) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i] << " (over one ulp)";
    g.push_back(gpu[i]);
    c.push_back(cpu[i]);
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_LE(rel_l2_error(g, c), rel_tol) << what;
}

class ReferenceCuda : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(ReferenceCuda, MatchesCpuReference) {
  const Case& c = GetParam();
  Problem p = make_problem(c);
  const Result cpu = forward_cpu(p.args_host);
  ASSERT_TRUE(cpu.ok()) << cpu.message;
  const Result gpu = forward_reference_cuda(p.args_device, nullptr);
  ASSERT_TRUE(gpu.ok()) << gpu.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());

  const std::vector<uint8_t> out_gpu = p.out.device.download();
  const size_t n_out = p.out.host.size() / dtype_size(c.dtype);
  expect_close(decode(out_gpu.data(), n_out, c.dtype), decode(p.out.host.data(), n_out, c.dtype), c.dtype, 1e-3,
               "out");
  if (c.with_lse) {
    const std::vector<uint8_t> lse_gpu = p.lse.device.download();
    const size_t n_lse = p.lse.host.size() / 4;
    // lse is fp32 from an fp64 value on both sides: one fp32 ulp is ~6e-8 relative.
    expect_close(decode(lse_gpu.data(), n_lse, DType::kFP32), decode(p.lse.host.data(), n_lse, DType::kFP32),
                 DType::kFP32, 1e-6, "lse");
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string n = std::string(dtype_name(c.dtype)) + "_b" + std::to_string(c.s.batch) + "_sq" +
                  std::to_string(c.s.seqlen_q) + "_sk" + std::to_string(c.s.seqlen_k) + "_h" +
                  std::to_string(c.s.heads_q) + "x" + std::to_string(c.s.heads_kv) + "_d" + std::to_string(c.s.head_dim);
  if (c.causal) n += "_causal";
  if (!c.with_lse) n += "_nolse";
  if (c.layout == Layout::kStrided) n += "_strided";
  if (c.window.left >= 0 || c.window.right >= 0) n += "_window";
  if (c.softcap > 0) n += "_softcap";
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceCuda,
    ::testing::Values(
        Case{{2, 17, 127, 4, 2, 64}, DType::kBF16, true, 1},               // sq < sk, GQA
        Case{{1, 127, 17, 8, 1, 256}, DType::kFP16, true, 2},              // sq > sk: masked rows, MQA
        Case{{2, 64, 64, 4, 4, 96}, DType::kBF16, false, 3},               // head dim with no sm90 kernel
        Case{{1, 200, 300, 2, 2, 128}, DType::kFP16, false, 4, 0.5f},      // several key chunks
        Case{{1, 9, 40, 2, 2, 512}, DType::kBF16, true, 5},                // the largest head dim
        Case{{1, 33, 1000, 2, 1, 40}, DType::kFP16, true, 6},              // 8 chunks, odd head dim
        Case{{2, 31, 45, 4, 2, 128}, DType::kBF16, false, 7, std::nullopt, false},
        Case{{2, 3, 0, 4, 2, 64}, DType::kBF16, false, 8},                 // seqlen_k == 0
        Case{{2, 29, 29, 3, 3, 64}, DType::kBF16, true, 9, std::nullopt, true, Layout::kStrided},
        Case{{1, 70, 70, 2, 2, 128}, DType::kFP16, false, 10, 0.1f, true, Layout::kStrided},
        // Sliding windows (sq > sk: rows with no key) and softcapping (the sm90 kernels have none yet).
        Case{{2, 150, 90, 4, 2, 64}, DType::kBF16, false, 11, std::nullopt, true, Layout::kContiguous, {20, 5}},
        Case{{1, 60, 300, 2, 1, 128}, DType::kFP16, true, 12, std::nullopt, true, Layout::kContiguous, {33, -1}},
        Case{{1, 80, 120, 2, 2, 64}, DType::kBF16, false, 13, 2.f, true, Layout::kContiguous, {}, 3.f},
        Case{{2, 64, 64, 4, 2, 128}, DType::kFP16, true, 14, std::nullopt, true, Layout::kContiguous, {10, -1}, 30.f}),
    case_name);

// fill_no_keys writes 0 to every element of a strided out (never the padding) and -inf to lse.
TEST(ReferenceCudaFill, FillNoKeysHonoursStrides) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  for (DType t : {DType::kBF16, DType::kFP16}) {
    SCOPED_TRACE(dtype_name(t));
    Problem p = make_problem(Case{{2, 11, 11, 3, 3, 64}, t, false, 11, std::nullopt, true, Layout::kStrided});
    AttnProblem problem;
    const Result v = validate_forward(p.args_device, Backend::kCudaReference, &problem);
    ASSERT_TRUE(v.ok()) << v.message;
    ASSERT_EQ(reference::fill_no_keys(problem, nullptr), cudaSuccess);
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());

    const std::vector<uint8_t> out = p.out.device.download();
    const std::vector<float> values = decode(out.data(), out.size() / 2, t);
    const int64_t d = 64, row = d + 8;
    for (size_t i = 0; i < values.size(); ++i) {
      const bool padding = int64_t(i) % row >= d;
      if (padding) {
        ASSERT_TRUE(std::isnan(values[i])) << "padding written at " << i;
      } else {
        ASSERT_EQ(values[i], 0.f) << "element " << i;
      }
    }
    const std::vector<uint8_t> lse = p.lse.device.download();
    for (float l : decode(lse.data(), lse.size() / 4, DType::kFP32)) ASSERT_EQ(l, -INFINITY);
  }
}

// A launch on a non-default stream completes in stream order and leaves no sticky error behind.
TEST(ReferenceCudaFill, RunsOnAStream) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  Problem p = make_problem(Case{{1, 16, 24, 2, 2, 64}, DType::kBF16, true, 12});
  cudaStream_t stream = nullptr;
  HOPATTN_TEST_CUDA(cudaStreamCreate(&stream));
  const Result gpu = forward_reference_cuda(p.args_device, stream);
  HOPATTN_TEST_CUDA(cudaStreamSynchronize(stream));
  HOPATTN_TEST_CUDA(cudaStreamDestroy(stream));
  ASSERT_TRUE(gpu.ok()) << gpu.message;
  ASSERT_TRUE(forward_cpu(p.args_host).ok());
  const std::vector<uint8_t> out = p.out.device.download();
  const size_t n = out.size() / 2;
  expect_close(decode(out.data(), n, DType::kBF16), decode(p.out.host.data(), n, DType::kBF16), DType::kBF16, 1e-3,
               "out");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace hopattn::test
