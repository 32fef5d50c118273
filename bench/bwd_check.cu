// hopattn-bwd-check: the backward kernel on its own, for kernel work. Two modes:
//   --check: a grid of small awkward shapes, each gradient against the CPU reference (double),
//            outputs poisoned first; prints rel-L2 errors and exits non-zero on a failure.
//   --time:  the benchmark grid (16k tokens, hidden 2048), median of CUDA-event timings,
//            TFLOP/s counted as 2.5 x the forward FLOPs (FlashAttention's convention).
// It calls the dispatch table and the reference directly, so it works before the public API does.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../tests/common/test_util.hpp"
#include "api/instantiations.hpp"
#include "api/problem.hpp"
#include "reference/reference.hpp"
#include "sm90/bwd/workspace.hpp"
#include "tool_util.cuh"

namespace {
using namespace hopattn;

struct Case {
  int d;
  bool causal;
  int64_t b, hq, hkv, sq, sk;
  bool deterministic = false;
};

// Contiguous (batch, seq, heads, head_dim) views of the case's buffers.
ForwardArgs forward_args(const Case& c, DType t, void* q, void* k, void* v, void* o, void* lse) {
  ForwardArgs a;
  a.q = make_tensor(q, t, c.b, c.sq, c.hq, c.d);
  a.k = make_tensor(k, t, c.b, c.sk, c.hkv, c.d);
  a.v = make_tensor(v, t, c.b, c.sk, c.hkv, c.d);
  a.out = make_tensor(o, t, c.b, c.sq, c.hq, c.d);
  a.lse = make_tensor(lse, DType::kFP32, c.b, c.hq, c.sq);
  a.causal = c.causal;
  return a;
}

// The validated backward problem over the case's device buffers (out and lse come from forward).
AttnBackwardProblem make_problem(const Case& c, DType t, void* q, void* k, void* v, void* o, void* lse, void* dout,
                                 void* dq, void* dk, void* dv) {
  const ForwardArgs a = forward_args(c, t, q, k, v, o, lse);
  AttnBackwardProblem bp;
  Result r = validate_forward(a, Backend::kSm90, &bp.fwd);
  if (!r.ok()) {
    std::fprintf(stderr, "validate: %s\n", r.message.c_str());
    std::exit(2);
  }
  bp.dout = dout;
  bp.dq = dq;
  bp.dk = dk;
  bp.dv = dv;
  bp.grad_dtype = t;
  bp.deterministic = c.deterministic;
  for (int i = 0; i < 3; ++i) {
    bp.do_stride[i] = a.out.strides[i];
    bp.dq_stride[i] = a.q.strides[i];
    bp.dk_stride[i] = a.k.strides[i];
    bp.dv_stride[i] = a.v.strides[i];
  }
  return bp;
}

bool check_case(const Case& c, DType t, uint64_t seed) {
  using namespace hopattn::test;
  const size_t nq = c.b * c.sq * c.hq * c.d, nk = c.b * c.sk * c.hkv * c.d;
  auto hq = random_values(nq, seed + 1, t), hk = random_values(nk, seed + 2, t), hv = random_values(nk, seed + 3, t),
       hdo = random_values(nq, seed + 4, t);
  tools::DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), o(nq * 2), lse(c.b * c.hq * c.sq * 4 + 4), dout(nq * 2),
      dq(nq * 2), dk(nk * 2), dv(nk * 2);
  auto up = [](tools::DeviceBuffer& d, const std::vector<float>& h, DType t) {
    auto bytes = encode(h, t);
    TOOL_CUDA_CHECK(cudaMemcpy(d.ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  };
  up(q, hq, t), up(k, hk, t), up(v, hv, t), up(dout, hdo, t);
  for (auto* g : {&dq, &dk, &dv}) TOOL_CUDA_CHECK(cudaMemset(g->ptr, 0xFF, g->bytes));
  AttnBackwardProblem bp = make_problem(c, t, q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, dout.ptr, dq.ptr, dk.ptr, dv.ptr);
  const ForwardArgs fa = forward_args(c, t, q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr);
  Result r = forward(fa);
  if (!r.ok()) {
    std::printf("forward failed: %s\n", r.message.c_str());
    return false;
  }
  tools::DeviceBuffer ws(sm90::bwd::workspace_bytes(bp.fwd) + 256);
  TOOL_CUDA_CHECK(cudaMemset(ws.ptr, 0xFF, ws.bytes));  // the kernels must not rely on zeroed scratch
  const BwdKernelEntry* e = find_backward_kernel(t, c.d);
  if (e == nullptr) {
    std::printf("no backward kernel for d=%d\n", c.d);
    return false;
  }
  TOOL_CUDA_CHECK(e->launch(bp, ws.ptr, nullptr));
  TOOL_CUDA_CHECK(cudaDeviceSynchronize());
  auto down = [](tools::DeviceBuffer& d, size_t n, DType t) {
    std::vector<uint8_t> bytes(n * 2);
    TOOL_CUDA_CHECK(cudaMemcpy(bytes.data(), d.ptr, bytes.size(), cudaMemcpyDeviceToHost));
    return decode(bytes.data(), n, t);
  };
  auto gdq = down(dq, nq, t), gdk = down(dk, nk, t), gdv = down(dv, nk, t);

  // Reference on the same (rounded) inputs, fp32 host copies, gradients in fp32.
  std::vector<float> rdq(nq), rdk(nk), rdv(nk);
  AttnBackwardProblem hp = bp;
  hp.fwd.dtype = DType::kFP32;
  hp.fwd.q = hq.data(), hp.fwd.k = hk.data(), hp.fwd.v = hv.data(), hp.fwd.out = nullptr, hp.fwd.lse = nullptr;
  hp.dout = hdo.data(), hp.dq = rdq.data(), hp.dk = rdk.data(), hp.dv = rdv.data();
  hp.grad_dtype = DType::kFP32;
  reference::backward_cpu(hp);
  const double edq = rel_l2_error(gdq, rdq), edk = rel_l2_error(gdk, rdk), edv = rel_l2_error(gdv, rdv);
  const double tol = 2e-2;
  const bool ok = edq <= tol && edk <= tol && edv <= tol;  // NaN fails every comparison
  std::printf("%-5s d=%-3d causal=%d b=%lld h=%lldx%lld q=%-5lld k=%-5lld det=%d  dq %.2e  dk %.2e  dv %.2e  %s\n",
              dtype_name(t), c.d, int(c.causal), (long long)c.b, (long long)c.hq, (long long)c.hkv, (long long)c.sq,
              (long long)c.sk, int(c.deterministic), edq, edk, edv, ok ? "ok" : "FAIL");
  return ok;
}

double time_case(const Case& c, DType t, int iters) {
  const size_t nq = c.b * c.sq * c.hq * c.d, nk = c.b * c.sk * c.hkv * c.d;
  tools::DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), o(nq * 2), lse(c.b * c.hq * c.sq * 4), dout(nq * 2), dq(nq * 2),
      dk(nk * 2), dv(nk * 2);
  tools::fill_random(q.ptr, t, nq, 1), tools::fill_random(k.ptr, t, nk, 2), tools::fill_random(v.ptr, t, nk, 3);
  tools::fill_random(dout.ptr, t, nq, 4);
  AttnBackwardProblem bp = make_problem(c, t, q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, dout.ptr, dq.ptr, dk.ptr, dv.ptr);
  const ForwardArgs fa = forward_args(c, t, q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr);
  if (!forward(fa).ok()) return -1;
  tools::DeviceBuffer ws(sm90::bwd::workspace_bytes(bp.fwd));
  const BwdKernelEntry* e = find_backward_kernel(t, c.d);
  for (int i = 0; i < 3; ++i) TOOL_CUDA_CHECK(e->launch(bp, ws.ptr, nullptr));
  std::vector<float> ms;
  cudaEvent_t a, b;
  TOOL_CUDA_CHECK(cudaEventCreate(&a));
  TOOL_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < iters; ++i) {
    TOOL_CUDA_CHECK(cudaEventRecord(a));
    TOOL_CUDA_CHECK(e->launch(bp, ws.ptr, nullptr));
    TOOL_CUDA_CHECK(cudaEventRecord(b));
    TOOL_CUDA_CHECK(cudaEventSynchronize(b));
    float x;
    TOOL_CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tf = 2.5 * tools::attention_flops(c.b, c.hq, c.sq, c.sk, c.d, c.causal) / (med * 1e-3) / 1e12;
  std::printf("bwd bf16 d=%-3d causal=%d b=%-2lld h=%-2lld s=%-5lld  %.3f ms  %.1f TFLOP/s%s\n", c.d, int(c.causal),
              (long long)c.b, (long long)c.hq, (long long)c.sq, med, tf, c.deterministic ? "  (deterministic)" : "");
  return tf;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "--check";
  std::vector<int> dims = {64, 128};
  if (argc > 2) dims = {std::atoi(argv[2])};
  if (mode == "--check") {
    int fails = 0, n = 0;
    const int64_t sl[][2] = {{1, 1}, {17, 17}, {64, 64}, {127, 255}, {255, 127}, {300, 300}, {513, 1000}};
    const int64_t hh[][2] = {{2, 2}, {4, 1}};
    for (DType t : {DType::kBF16, DType::kFP16})
      for (int d : dims)
        for (bool causal : {false, true})
          for (const auto& s : sl)
            for (const auto& h : hh) {
              if (find_backward_kernel(t, d) == nullptr) continue;  // not in this build
              ++n;
              fails += !check_case({d, causal, 1, h[0], h[1], s[0], s[1]}, t, 17 * n);
            }
    for (int d : dims) {  // batch > 1, deterministic
      fails += !check_case({d, true, 2, 4, 2, 200, 333, true}, DType::kBF16, 999);
      fails += !check_case({d, false, 3, 2, 2, 129, 129, false}, DType::kBF16, 998);
      n += 2;
    }
    std::printf("bwd check: %d of %d cases failed\n", fails, n);
    return fails ? 1 : 0;
  }
  if (mode == "--time") {
    for (int d : dims)
      for (bool causal : {false, true})
        for (int64_t s : {1024, 2048, 4096, 8192, 16384}) {
          const int64_t h = 2048 / d, b = 16384 / s;
          time_case({d, causal, b, h, h, s, s}, DType::kBF16, 20);
        }
    time_case({128, false, 4, 16, 16, 4096, 4096, true}, DType::kBF16, 20);
    return 0;
  }
  std::fprintf(stderr, "usage: hopattn-bwd-check [--check|--time] [head_dim]\n");
  return 2;
}
