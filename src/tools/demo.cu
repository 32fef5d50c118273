// hopattn-demo, the main job: on a Hopper GPU, runs a default attention workload through the sm90
// kernel, checks it against the fp64 CUDA reference and prints TFLOP/s. Without one, says so and runs
// the CPU reference on a small problem instead.
#include <cmath>
#include <cstdio>
#include <vector>

#include "tool_util.cuh"

namespace {

using namespace hopattn;

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

std::vector<float> to_host_float(const void* dev, int64_t n) {
  std::vector<__nv_bfloat16> h(n);
  TOOL_CUDA_CHECK(cudaMemcpy(h.data(), dev, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

int run_gpu() {
  const int64_t b = 4, s = 4096, h = 16, d = 128;
  const int64_t n = b * s * h * d;
  tools::DeviceBuffer q(n * 2), k(n * 2), v(n * 2), out(n * 2), ref(n * 2), lse(b * h * s * 4), lse_ref(b * h * s * 4);
  tools::fill_random(q.ptr, DType::kBF16, n, 11);
  tools::fill_random(k.ptr, DType::kBF16, n, 12);
  tools::fill_random(v.ptr, DType::kBF16, n, 13);
  int failures = 0;
  for (bool causal : {false, true}) {
    ForwardArgs a;
    a.q = make_tensor(q.ptr, DType::kBF16, b, s, h, d);
    a.k = make_tensor(k.ptr, DType::kBF16, b, s, h, d);
    a.v = make_tensor(v.ptr, DType::kBF16, b, s, h, d);
    a.out = make_tensor(out.ptr, DType::kBF16, b, s, h, d);
    a.lse = make_tensor(lse.ptr, DType::kFP32, b, h, s);
    a.causal = causal;
    ForwardArgs r = a;
    r.out = make_tensor(ref.ptr, DType::kBF16, b, s, h, d);
    r.lse = make_tensor(lse_ref.ptr, DType::kFP32, b, h, s);
    TOOL_CUDA_CHECK(cudaMemset(out.ptr, 0xFF, n * 2));  // poison: NaN everywhere until written
    Result res = forward(a);
    if (!res.ok()) {
      std::printf("forward failed: %s\n", res.message.c_str());
      return 1;
    }
    res = forward_reference_cuda(r);
    if (!res.ok()) {
      std::printf("reference failed: %s\n", res.message.c_str());
      return 1;
    }
    TOOL_CUDA_CHECK(cudaDeviceSynchronize());
    const double err = rel_l2(to_host_float(out.ptr, n), to_host_float(ref.ptr, n));
    cudaEvent_t e0, e1;
    TOOL_CUDA_CHECK(cudaEventCreate(&e0));
    TOOL_CUDA_CHECK(cudaEventCreate(&e1));
    const int iters = 20;
    forward(a);
    TOOL_CUDA_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) forward(a);
    TOOL_CUDA_CHECK(cudaEventRecord(e1));
    TOOL_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TOOL_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= iters;
    const double tflops = tools::attention_flops(b, h, s, s, d, causal) / (ms * 1e-3) / 1e12;
    const bool ok = std::isfinite(err) && err <= 1e-2;
    failures += !ok;
    std::printf("bf16 b=%lld s=%lld h=%lld d=%lld causal=%d: %.3f ms, %.1f TFLOP/s, rel err vs fp64 reference %.2e %s\n",
                (long long)b, (long long)s, (long long)h, (long long)d, causal, ms, tflops, err, ok ? "OK" : "FAIL");
  }
  return failures ? 1 : 0;
}

int run_cpu() {
  const int64_t b = 1, s = 128, h = 4, d = 64;
  const int64_t n = b * s * h * d;
  std::vector<float> q(n), k(n), v(n), out(n), lse(b * h * s);
  uint32_t state = 12345;
  auto rnd = [&] { state = state * 1664525u + 1013904223u; return (state >> 8) * (2.f / 16777216.f) - 1.f; };
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = rnd();
  ForwardArgs a;
  a.q = make_tensor(q.data(), DType::kFP32, b, s, h, d);
  a.k = make_tensor(k.data(), DType::kFP32, b, s, h, d);
  a.v = make_tensor(v.data(), DType::kFP32, b, s, h, d);
  a.out = make_tensor(out.data(), DType::kFP32, b, s, h, d);
  a.lse = make_tensor(lse.data(), DType::kFP32, b, h, s);
  a.causal = true;
  Result r = forward_cpu(a);
  if (!r.ok()) {
    std::printf("CPU reference failed: %s\n", r.message.c_str());
    return 1;
  }
  // Row 0 of a causal problem sees only key 0, so its output must equal v[0] exactly.
  double dev = 0;
  for (int64_t c = 0; c < d; ++c) dev = std::fmax(dev, std::fabs(out[c] - v[c]));
  double sum = 0;
  for (float x : out) sum += x;
  std::printf("CPU reference: fp32 b=%lld s=%lld h=%lld d=%lld causal: checksum %.6f, lse[0]=%.6f, |out[0]-v[0]|=%.1e %s\n",
              (long long)b, (long long)s, (long long)h, (long long)d, sum, lse[0], dev, dev < 1e-6 ? "OK" : "FAIL");
  return dev < 1e-6 ? 0 : 1;
}

}  // namespace

int main() {
  std::printf("hopattn %s (kernels: %s)\n", version(), build_instantiations());
  Result dev = check_device();
  if (!dev.ok()) {
    std::printf("No Hopper GPU found (%s).\nRunning the CPU reference on a small problem instead.\n", dev.message.c_str());
    return run_cpu();
  }
  cudaDeviceProp prop{};
  TOOL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  return run_gpu();
}
