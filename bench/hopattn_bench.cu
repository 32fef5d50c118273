// hopattn-bench: times hopattn::forward with CUDA events (median of many runs after warm-up),
// rotating among enough input sets that L2 (60 MB on H200) cannot flatter the numbers.
// Usage: hopattn-bench [--batch B --seqlen S --seqlen-k SK --heads H --heads-kv HKV --hdim D
//                       --causal 0|1 --window-left L --window-right R --softcap C --dtype bf16|fp16 --iters N --fp8]
//                      | [--paper-grid]
// TFLOP/s: 4*b*h*sq*sk*d (halved when causal); with a window, 4*d per (query, key) pair a row sees.
// --fp8 times, per shape, the FP8 attention kernel alone (e4m3 inputs and V^T already in place),
// forward_fp8 (plus its V re-layout), forward_fp8 with the 16-bit v (the 16-bit P V kernel alone: V
// read in place), attention_fp8 from 16-bit inputs (plus rotate-and-quantise), and the 16-bit
// forward, all with the same input rotation.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/instantiations.hpp"
#include "api/problem.hpp"
#include "tool_util.cuh"

namespace {

struct Shape {
  int64_t batch = 4, seqlen_q = 4096, seqlen_k = 4096, heads = 16, heads_kv = 16, hdim = 128;
  bool causal = false;
  hopattn::DType dtype = hopattn::DType::kBF16;
  hopattn::Window window{};
  float softcap = 0.f;
};

// FLOPs: tools::attention_flops' figure, or with a window 4 * d per (query, key) pair a row sees,
// so a windowed run counts what it computes.
double counted_flops(const Shape& s) {
  if (s.window.left < 0 && s.window.right < 0)
    return tools::attention_flops(s.batch, s.heads, s.seqlen_q, s.seqlen_k, s.hdim, s.causal);
  const int64_t right = s.causal ? 0 : s.window.right;
  double pairs = 0;
  for (int64_t i = 0; i < s.seqlen_q; ++i) {
    const hopattn::KeyRange kr = hopattn::visible_keys(i, s.seqlen_q, s.seqlen_k, s.window.left, right);
    pairs += double(std::max<int64_t>(0, kr.end - kr.begin));
  }
  return 4.0 * double(s.batch * s.heads) * pairs * double(s.hdim);
}

// What one timed call runs (see the usage note).
enum class Mode { kForward, kFp8Kernel, kForwardFp8, kForwardFp8Pv16, kAttentionFp8 };

struct Timing {
  double median_ms = 0, tflops = 0;
  bool ok = false;
  std::string error;
};

Timing time_forward(const Shape& s, int iters, Mode mode = Mode::kForward) {
  using namespace hopattn;
  const int64_t q_elems = s.batch * s.seqlen_q * s.heads * s.hdim;
  const int64_t kv_elems = s.batch * s.seqlen_k * s.heads_kv * s.hdim;
  const std::size_t set_bytes = 2 * (2 * q_elems + 2 * kv_elems);  // q, out, k, v
  // Enough sets that one pass over them is 3x the L2; at most 8, at least 1 (huge shapes).
  int sets = static_cast<int>(std::min<std::size_t>(8, std::max<std::size_t>(1, 180ull * 1024 * 1024 / set_bytes + 1)));
  std::vector<std::unique_ptr<tools::DeviceBuffer>> bufs;
  std::vector<ForwardArgs> args(sets);
  for (int i = 0; i < sets; ++i) {
    auto q = std::make_unique<tools::DeviceBuffer>(q_elems * 2), k = std::make_unique<tools::DeviceBuffer>(kv_elems * 2),
         v = std::make_unique<tools::DeviceBuffer>(kv_elems * 2), o = std::make_unique<tools::DeviceBuffer>(q_elems * 2),
         l = std::make_unique<tools::DeviceBuffer>(s.batch * s.heads * s.seqlen_q * 4);
    tools::fill_random(q->ptr, s.dtype, q_elems, 3 * i + 1);
    tools::fill_random(k->ptr, s.dtype, kv_elems, 3 * i + 2);
    tools::fill_random(v->ptr, s.dtype, kv_elems, 3 * i + 3);
    args[i].q = make_tensor(q->ptr, s.dtype, s.batch, s.seqlen_q, s.heads, s.hdim);
    args[i].k = make_tensor(k->ptr, s.dtype, s.batch, s.seqlen_k, s.heads_kv, s.hdim);
    args[i].v = make_tensor(v->ptr, s.dtype, s.batch, s.seqlen_k, s.heads_kv, s.hdim);
    args[i].out = make_tensor(o->ptr, s.dtype, s.batch, s.seqlen_q, s.heads, s.hdim);
    args[i].lse = make_tensor(l->ptr, DType::kFP32, s.batch, s.heads, s.seqlen_q);
    args[i].causal = s.causal;
    args[i].window = s.window;
    args[i].softcap = s.softcap;
    for (auto* b : {&q, &k, &v, &o, &l}) bufs.push_back(std::move(*b));
  }

  // FP8: per set, attention_fp8's workspace (its e4m3 q/k, V^T and descales, filled once by a
  // warm-up call) doubles as the inputs of forward_fp8 and of the kernel alone.
  std::vector<Fp8AttentionArgs> fp8_args(sets);
  std::vector<Fp8ForwardArgs> fp8_fwd(sets), fp8_pv16(sets);
  std::vector<Fp8AttnProblem> fp8_prob(sets);
  std::vector<std::unique_ptr<tools::DeviceBuffer>> fp8_ws;
  const int64_t nq_blocks = (s.seqlen_q + 127) / 128, nk_blocks = (s.seqlen_k + 127) / 128;
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const std::size_t vt_bytes = up(std::size_t(s.batch * s.heads_kv * s.hdim * nk_blocks * 128));
  Timing t;
  if (mode != Mode::kForward) {
    for (int i = 0; i < sets; ++i) {
      Fp8AttentionArgs& a = fp8_args[i];
      a.q = args[i].q;
      a.k = args[i].k;
      a.v = args[i].v;
      a.out = args[i].out;
      a.lse = args[i].lse;
      a.causal = s.causal;
      const std::size_t bytes = attention_fp8_workspace_size(a);
      fp8_ws.push_back(std::make_unique<tools::DeviceBuffer>(bytes + 256 + vt_bytes));
      char* ws = static_cast<char*>(fp8_ws.back()->ptr);
      if (Result r = attention_fp8(a, ws, bytes); !r.ok()) {
        t.error = r.message;
        return t;
      }
      // The workspace layout of attention_fp8 (api_fp8.cpp): q8, k8, V^T, descales.
      const std::size_t q8 = 0, k8 = up(q_elems), vt = k8 + up(kv_elems);
      const std::size_t qd = vt + vt_bytes;
      const std::size_t kd = qd + up(4 * std::size_t(s.batch * s.heads * nq_blocks));
      const std::size_t vd = kd + up(4 * std::size_t(s.batch * s.heads_kv * nk_blocks));
      Fp8ForwardArgs& f = fp8_fwd[i];
      f.q = make_tensor(ws + q8, DType::kE4M3, s.batch, s.seqlen_q, s.heads, s.hdim);
      f.k = make_tensor(ws + k8, DType::kE4M3, s.batch, s.seqlen_k, s.heads_kv, s.hdim);
      f.v = f.k;  // any e4m3 tensor of V's shape: only the time of the re-layout matters here
      f.q_descale = make_tensor(ws + qd, DType::kFP32, s.batch, s.heads, nq_blocks);
      f.k_descale = make_tensor(ws + kd, DType::kFP32, s.batch, s.heads_kv, nk_blocks);
      f.v_descale = make_tensor(ws + vd, DType::kFP32, s.batch, s.heads_kv, 1);
      f.v_descale.ndim = 2;
      f.out = args[i].out;
      f.lse = args[i].lse;
      f.causal = s.causal;
      if (Result r = validate_forward_fp8(f, &fp8_prob[i]); !r.ok()) {
        t.error = r.message;
        return t;
      }
      fp8_prob[i].vt = ws + vt;
      // forward_fp8 with the set's 16-bit v (out's dtype): the 16-bit P V kernel on the same e4m3
      // q and k, V read in place, no v_descale and no workspace.
      Fp8ForwardArgs& g = fp8_pv16[i];
      g = f;
      g.v = args[i].v;
      g.v_descale = {};
    }
  }
  // forward_fp8 writes its V^T past attention_fp8's part of set 0's buffer.
  char* spare = mode != Mode::kForward ? static_cast<char*>(fp8_ws[0]->ptr) + fp8_ws[0]->bytes - vt_bytes - 256 : nullptr;
  auto call = [&](int i) -> Result {
    switch (mode) {
      case Mode::kForward: return forward(args[i]);
      case Mode::kAttentionFp8: return attention_fp8(fp8_args[i], fp8_ws[i]->ptr, fp8_ws[i]->bytes);
      case Mode::kForwardFp8: {
        // Its V^T goes to spare space, so the e4m3 inputs in the workspace stay intact.
        const std::size_t need = forward_fp8_workspace_size(fp8_fwd[i]);
        char* w = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(spare) + 255) / 256 * 256);
        return need <= vt_bytes ? forward_fp8(fp8_fwd[i], w, need) : Result{Status::kUnsupported, "spare too small"};
      }
      case Mode::kForwardFp8Pv16: return forward_fp8(fp8_pv16[i], nullptr, 0);
      case Mode::kFp8Kernel: {
        const cudaError_t e = find_fp8_kernel(fp8_prob[i].base.dtype, int(s.hdim))->launch(fp8_prob[i], nullptr);
        return e == cudaSuccess ? Result{} : Result{Status::kCudaError, cudaGetErrorString(e)};
      }
    }
    return {};
  };
  for (int i = 0; i < 3; ++i) {  // warm-up (module load, attribute setting)
    Result r = call(i % sets);
    if (!r.ok()) {
      t.error = r.message;
      return t;
    }
  }
  TOOL_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev) TOOL_CUDA_CHECK(cudaEventCreate(&e));
  TOOL_CUDA_CHECK(cudaEventRecord(ev[0]));
  for (int i = 0; i < iters; ++i) {
    call(i % sets);
    TOOL_CUDA_CHECK(cudaEventRecord(ev[i + 1]));
  }
  TOOL_CUDA_CHECK(cudaEventSynchronize(ev[iters]));
  TOOL_CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) TOOL_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  for (auto& e : ev) cudaEventDestroy(e);
  std::nth_element(ms.begin(), ms.begin() + iters / 2, ms.end());
  t.median_ms = ms[iters / 2];
  t.tflops = counted_flops(s) / (t.median_ms * 1e-3) / 1e12;
  t.ok = true;
  return t;
}

void print_row(const Shape& s, const Timing& t) {
  if (!t.ok) {
    std::printf("%-5s d=%-3lld causal=%d b=%-3lld sq=%-6lld sk=%-6lld h=%-3lld hkv=%-3lld  ERROR: %s\n",
                hopattn::dtype_name(s.dtype), (long long)s.hdim, s.causal, (long long)s.batch, (long long)s.seqlen_q,
                (long long)s.seqlen_k, (long long)s.heads, (long long)s.heads_kv, t.error.c_str());
    return;
  }
  std::printf("%-5s d=%-3lld causal=%d b=%-3lld sq=%-6lld sk=%-6lld h=%-3lld hkv=%-3lld win=(%lld,%lld) cap=%g  %9.3f ms  %7.1f TFLOP/s\n",
              hopattn::dtype_name(s.dtype), (long long)s.hdim, s.causal, (long long)s.batch, (long long)s.seqlen_q,
              (long long)s.seqlen_k, (long long)s.heads, (long long)s.heads_kv, (long long)s.window.left,
              (long long)s.window.right, double(s.softcap), t.median_ms, t.tflops);
}

int64_t arg_int(int& i, int argc, char** argv) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "missing value for %s\n", argv[i]);
    std::exit(2);
  }
  return std::atoll(argv[++i]);
}

}  // namespace

int main(int argc, char** argv) {
  Shape s;
  bool paper_grid = false, seqlen_k_set = false, heads_kv_set = false;
  int iters = 50;
  bool fp8 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch") s.batch = arg_int(i, argc, argv);
    else if (a == "--seqlen") s.seqlen_q = arg_int(i, argc, argv);
    else if (a == "--seqlen-k") { s.seqlen_k = arg_int(i, argc, argv); seqlen_k_set = true; }
    else if (a == "--heads") s.heads = arg_int(i, argc, argv);
    else if (a == "--heads-kv") { s.heads_kv = arg_int(i, argc, argv); heads_kv_set = true; }
    else if (a == "--hdim") s.hdim = arg_int(i, argc, argv);
    else if (a == "--causal") s.causal = arg_int(i, argc, argv) != 0;
    else if (a == "--window-left") s.window.left = arg_int(i, argc, argv);
    else if (a == "--window-right") s.window.right = arg_int(i, argc, argv);
    else if (a == "--softcap" && i + 1 < argc) s.softcap = std::strtof(argv[++i], nullptr);
    else if (a == "--iters") iters = static_cast<int>(std::max<int64_t>(3, arg_int(i, argc, argv)));
    else if (a == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "bf16" && d != "fp16") { std::fprintf(stderr, "--dtype must be bf16 or fp16\n"); return 2; }
      s.dtype = d == "bf16" ? hopattn::DType::kBF16 : hopattn::DType::kFP16;
    } else if (a == "--paper-grid") paper_grid = true;
    else if (a == "--fp8") fp8 = true;
    else {
      std::fprintf(stderr, "unknown argument %s\nusage: %s [--batch B --seqlen S --seqlen-k SK --heads H "
                           "--heads-kv HKV --hdim D --causal 0|1 --window-left L --window-right R --softcap C --dtype bf16|fp16 --iters N] | "
                           "[--paper-grid]\n",
                   a.c_str(), argv[0]);
      return 2;
    }
  }
  if (!seqlen_k_set) s.seqlen_k = s.seqlen_q;
  if (!heads_kv_set) s.heads_kv = s.heads;
  if (hopattn::Result r = hopattn::check_device(); !r.ok()) {
    std::fprintf(stderr, "hopattn-bench needs a Hopper GPU: %s\n", r.message.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  TOOL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs), hopattn %s\n", prop.name, prop.multiProcessorCount, hopattn::version());
  auto run = [&](const Shape& shape) {
    if (!fp8) {
      print_row(shape, time_forward(shape, iters));
      return;
    }
    const Timing k = time_forward(shape, iters, Mode::kFp8Kernel), f = time_forward(shape, iters, Mode::kForwardFp8),
                 p = time_forward(shape, iters, Mode::kForwardFp8Pv16),
                 a = time_forward(shape, iters, Mode::kAttentionFp8), b = time_forward(shape, iters, Mode::kForward);
    if (!k.ok || !f.ok || !p.ok || !a.ok || !b.ok) {
      std::printf("d=%lld causal=%d s=%lld ERROR: %s%s%s%s%s\n", (long long)shape.hdim, shape.causal,
                  (long long)shape.seqlen_q, k.error.c_str(), f.error.c_str(), p.error.c_str(), a.error.c_str(),
                  b.error.c_str());
      return;
    }
    std::printf("fp8 d=%-3lld causal=%d b=%-3lld s=%-6lld h=%-3lld hkv=%-3lld  kernel %7.1f  forward_fp8 %7.1f  "
                "16-bit PV %7.1f  attention_fp8 %7.1f  bf16 %7.1f TFLOP/s  (kernel %.3f ms, quantise+relayout %.3f ms)\n",
                (long long)shape.hdim, shape.causal, (long long)shape.batch, (long long)shape.seqlen_q,
                (long long)shape.heads, (long long)shape.heads_kv, k.tflops, f.tflops, p.tflops, a.tflops, b.tflops,
                k.median_ms, a.median_ms - k.median_ms);
  };
  if (!paper_grid) {
    run(s);
    return 0;
  }
  // The FlashAttention-3 paper's grid: 16k tokens, hidden 2048.
  for (int64_t hdim : {64, 128, 256})
    for (int causal : {0, 1})
      for (int64_t seqlen : {512, 1024, 2048, 4096, 8192, 16384}) {
        Shape g = s;
        g.hdim = hdim;
        g.causal = causal;
        g.seqlen_q = g.seqlen_k = seqlen;
        g.batch = 16384 / seqlen;
        g.heads = g.heads_kv = 2048 / hdim;
        run(g);
      }
  return 0;
}
