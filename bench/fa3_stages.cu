// hopattn-fa3-stages: the FlashAttention-3 kernel (src/sm90/ws/) built once per schedule variant
// (stages and switches in tile_shape.hpp), each checked against a naive fp32 CUDA reference with
// NaN-poisoned outputs. `--grid [D]` then times every variant over the paper's grid (seqlen 512..16k,
// causal and not), interleaved per shape, so a schedule change is judged over the grid rather than
// one shape; `--profile NAME D CAUSAL SEQLEN` runs one variant on one shape (for ncu);
// `--loop NAME D CAUSAL SEQLEN N` times it N times back to back (to watch clocks meanwhile).
// Not part of the library's dispatch: build with -DHOPATTN_BUILD_STAGE_PROBE=ON (Release flags).
// Add -DWS_PROBE_QUICK to build only bf16 d128 D and E. Exit code 0 iff every case passes.

#include "sm90/ws/fwd_ws_launch.cuh"  // first: enables CuTe's extended WGMMA shapes

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using hopattn::AttnProblem;
using hopattn::DType;
namespace ws = hopattn::sm90::ws;

#define CHECK_CUDA(x)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, \
                  cudaGetErrorString(e_));                                                   \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

// ---- data and reference --------------------------------------------------------------------

__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(__half x) { return __half2float(x); }
template <class T>
__device__ T from_float(float x);
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __half from_float<__half>(float x) { return __float2half(x); }

// Deterministic pseudo-normal values (sum of 4 uniforms, variance 1).
template <class T>
__global__ void fill_kernel(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < 4; ++r) {
      uint32_t h = uint32_t(i) * 2654435761u ^ (seed + r * 0x9e3779b9u) ^ uint32_t(i >> 32);
      h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
      s += float(h) * (1.f / 4294967296.f) - 0.5f;
    }
    p[i] = from_float<T>(s * 1.7320508f);
  }
}

// One block per (query row, head, batch); fp32 throughout. Slow and obviously right.
template <class T>
__global__ void reference_kernel(AttnProblem pr, float* out, float* lse) {
  extern __shared__ float sm[];
  const int d = int(pr.head_dim), sk = int(pr.seqlen_k), sq = int(pr.seqlen_q);
  float* q = sm;            // d
  float* s = sm + d;        // sk
  __shared__ float red[32];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, hk = h / int(pr.group());
  const T* qp = static_cast<const T*>(pr.q) + b * pr.q_stride[0] + i * pr.q_stride[1] + h * pr.q_stride[2];
  const T* kp = static_cast<const T*>(pr.k) + b * pr.k_stride[0] + hk * pr.k_stride[2];
  const T* vp = static_cast<const T*>(pr.v) + b * pr.v_stride[0] + hk * pr.v_stride[2];
  for (int c = threadIdx.x; c < d; c += blockDim.x) q[c] = to_float(qp[c]);
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < sk; j += blockDim.x) {
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += q[c] * to_float(kp[j * pr.k_stride[1] + c]);
    acc *= pr.scale;
    if (pr.causal && j > i + sk - sq) acc = -INFINITY;
    s[j] = acc;
    mx = fmaxf(mx, acc);
  }
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < blockDim.x / 32; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < sk; j += blockDim.x) {
    const float p = mx == -INFINITY ? 0.f : expf(s[j] - mx);
    s[j] = p;
    sum += p;
  }
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(~0u, sum, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < blockDim.x / 32; ++w) sum += red[w];
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  float* op = out + ((size_t(b) * sq + i) * pr.heads_q + h) * d;  // contiguous (b, sq, hq, d)
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < sk; ++j) acc += s[j] * to_float(vp[j * pr.v_stride[1] + c]);
    op[c] = acc * inv;
  }
  if (threadIdx.x == 0) lse[(size_t(b) * pr.heads_q + h) * sq + i] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

// ---- one case ------------------------------------------------------------------------------

struct Case {
  const char* name;
  DType dtype;
  int d, b, hq, hkv, sq, sk;
  bool causal;
  bool packed_qkv;  // q/k/v as strided views into one (b, s, 3, h, d) buffer (needs sq == sk, hq == hkv)
};

using Launcher = cudaError_t (*)(const AttnProblem&, cudaStream_t);

template <DType kDType, int kD, unsigned kStage, int kBlockN = 0>
cudaError_t run_stage(const AttnProblem& pr, cudaStream_t s) {
  return ws::run_fwd_ws<kDType, kD, kStage, kBlockN>(pr, s);
}

static size_t elem_size(DType) { return 2; }

struct Buffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *qkv = nullptr, *out = nullptr;
  float *lse = nullptr, *ref_out = nullptr, *ref_lse = nullptr;
  ~Buffers() {
    for (void* p : {q, k, v, qkv, out}) cudaFree(p);
    for (float* p : {lse, ref_out, ref_lse}) cudaFree(p);
  }
};

template <class T>
static void fill(void* p, size_t n, uint32_t seed) {
  fill_kernel<T><<<1024, 256>>>(static_cast<T*>(p), n, seed);
  CHECK_CUDA(cudaGetLastError());
}

// Builds the problem (contiguous bshd, or packed qkv views) and allocates/fills its buffers.
static AttnProblem make_problem(const Case& c, Buffers& buf) {
  AttnProblem pr;
  pr.batch = c.b; pr.seqlen_q = c.sq; pr.seqlen_k = c.sk; pr.heads_q = c.hq; pr.heads_kv = c.hkv;
  pr.head_dim = c.d; pr.dtype = c.dtype; pr.causal = c.causal; pr.scale = 1.f / std::sqrt(float(c.d));
  const size_t es = elem_size(c.dtype);
  const size_t nq = size_t(c.b) * c.sq * c.hq * c.d, nk = size_t(c.b) * c.sk * c.hkv * c.d;
  auto filler = c.dtype == DType::kBF16 ? &fill<__nv_bfloat16> : &fill<__half>;
  if (c.packed_qkv) {
    const size_t n = size_t(c.b) * c.sq * 3 * c.hq * c.d;
    CHECK_CUDA(cudaMalloc(&buf.qkv, n * es));
    filler(buf.qkv, n, 1);
    char* base = static_cast<char*>(buf.qkv);
    pr.q = base; pr.k = base + size_t(c.hq) * c.d * es; pr.v = base + 2 * size_t(c.hq) * c.d * es;
    const int64_t st[3] = {int64_t(c.sq) * 3 * c.hq * c.d, int64_t(3) * c.hq * c.d, c.d};
    for (int i = 0; i < 3; ++i) pr.q_stride[i] = pr.k_stride[i] = pr.v_stride[i] = st[i];
  } else {
    CHECK_CUDA(cudaMalloc(&buf.q, nq * es));
    CHECK_CUDA(cudaMalloc(&buf.k, nk * es));
    CHECK_CUDA(cudaMalloc(&buf.v, nk * es));
    filler(buf.q, nq, 1); filler(buf.k, nk, 2); filler(buf.v, nk, 3);
    pr.q = buf.q; pr.k = buf.k; pr.v = buf.v;
    const int64_t sq_[3] = {int64_t(c.sq) * c.hq * c.d, int64_t(c.hq) * c.d, c.d};
    const int64_t sk_[3] = {int64_t(c.sk) * c.hkv * c.d, int64_t(c.hkv) * c.d, c.d};
    for (int i = 0; i < 3; ++i) { pr.q_stride[i] = sq_[i]; pr.k_stride[i] = pr.v_stride[i] = sk_[i]; }
  }
  CHECK_CUDA(cudaMalloc(&buf.out, nq * es));
  CHECK_CUDA(cudaMalloc(&buf.lse, size_t(c.b) * c.hq * c.sq * sizeof(float)));
  pr.out = buf.out; pr.lse = buf.lse;
  const int64_t so[3] = {int64_t(c.sq) * c.hq * c.d, int64_t(c.hq) * c.d, c.d};
  for (int i = 0; i < 3; ++i) pr.o_stride[i] = so[i];
  return pr;
}

static float bits_to_float(uint16_t v, DType t) {
  uint32_t u;
  if (t == DType::kBF16) {
    u = uint32_t(v) << 16;
    float f; std::memcpy(&f, &u, 4); return f;
  }
  // fp16 -> fp32
  const uint32_t sign = (v >> 15) & 1, exp = (v >> 10) & 31, man = v & 1023;
  float f;
  if (exp == 0) f = std::ldexp(float(man), -24);
  else if (exp == 31) f = man ? NAN : INFINITY;
  else f = std::ldexp(float(man | 1024), int(exp) - 25);
  return sign ? -f : f;
}

static bool check_case(const Case& c, Launcher launch) {
  Buffers buf;
  AttnProblem pr = make_problem(c, buf);
  const size_t nq = size_t(c.b) * c.sq * c.hq * c.d, nl = size_t(c.b) * c.hq * c.sq;
  CHECK_CUDA(cudaMalloc(&buf.ref_out, nq * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&buf.ref_lse, nl * sizeof(float)));
  const size_t smem = (c.d + c.sk) * sizeof(float);
  if (smem > 48 * 1024) {
    auto k = c.dtype == DType::kBF16 ? &reference_kernel<__nv_bfloat16> : &reference_kernel<__half>;
    CHECK_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  dim3 grid(c.sq, c.hq, c.b);
  if (c.dtype == DType::kBF16) reference_kernel<__nv_bfloat16><<<grid, 128, smem>>>(pr, buf.ref_out, buf.ref_lse);
  else reference_kernel<__half><<<grid, 128, smem>>>(pr, buf.ref_out, buf.ref_lse);
  CHECK_CUDA(cudaGetLastError());
  // Poison: 0xFF bytes are NaN in bf16, fp16 and fp32; a row the kernel forgets shows up.
  CHECK_CUDA(cudaMemset(buf.out, 0xFF, nq * 2));
  CHECK_CUDA(cudaMemset(buf.lse, 0xFF, nl * sizeof(float)));
  const cudaError_t le = launch(pr, nullptr);
  const cudaError_t se = cudaDeviceSynchronize();
  if (le != cudaSuccess || se != cudaSuccess) {
    std::printf("  %-34s launch=%s sync=%s\n", c.name, cudaGetErrorName(le), cudaGetErrorName(se));
    if (se != cudaSuccess) std::exit(3);  // sticky error: nothing after this is meaningful
    return false;
  }
  std::vector<uint16_t> out(nq);
  std::vector<float> ref(nq), lse(nl), ref_lse(nl);
  CHECK_CUDA(cudaMemcpy(out.data(), buf.out, nq * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(ref.data(), buf.ref_out, nq * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lse.data(), buf.lse, nl * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(ref_lse.data(), buf.ref_lse, nl * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0, max_abs = 0;
  size_t nan = 0;
  for (size_t i = 0; i < nq; ++i) {
    const float o = bits_to_float(out[i], c.dtype);
    if (!std::isfinite(o)) { ++nan; continue; }
    num += double(o - ref[i]) * (o - ref[i]);
    den += double(ref[i]) * ref[i];
    max_abs = std::max(max_abs, double(std::fabs(o - ref[i])));
  }
  double lse_err = 0;
  size_t lse_bad = 0;
  for (size_t i = 0; i < nl; ++i) {
    if (std::isinf(ref_lse[i])) { lse_bad += !(std::isinf(lse[i]) && lse[i] < 0); continue; }
    if (!std::isfinite(lse[i])) { ++lse_bad; continue; }
    lse_err = std::max(lse_err, double(std::fabs(lse[i] - ref_lse[i])));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = nan == 0 && lse_bad == 0 && rel < 2e-2 && lse_err < 1e-2;
  std::printf("  %-34s rel_l2=%.2e max_abs=%.2e lse_max_err=%.2e nonfinite_out=%zu bad_lse=%zu  %s\n", c.name, rel,
              max_abs, lse_err, nan, lse_bad, ok ? "PASS" : "FAIL");
  return ok;
}

// Median over 7 batches of 10 back-to-back launches (launch latency hidden as in a model's
// stream of kernels), after 3 warm-up launches; L2 is not flushed.
static double time_case(const Case& c, Launcher launch) {
  Buffers buf;
  AttnProblem pr = make_problem(c, buf);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(launch(pr, nullptr));
  std::vector<float> ms;
  for (int i = 0; i < 7; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    for (int j = 0; j < 10; ++j) CHECK_CUDA(launch(pr, nullptr));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t / 10);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  double flops = 4.0 * c.b * c.hq * double(c.sq) * c.sk * c.d;
  if (c.causal) flops *= 0.5;  // ~half the score matrix is masked (sq == sk here)
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return flops / (med * 1e-3) / 1e12;
}

template <DType kDType, int kD, unsigned kStage, int kBlockN = 0>
Launcher L() {
  return &run_stage<kDType, kD, kStage, kBlockN>;
}

// A configuration with kM query rows per tile instead of the default (tile-size search: d64 causal
// with 128 rows, i.e. two consumer warpgroups of 240 registers and the folded order, against the
// default 192 rows and three of 160). Every member derived from kBlockM is redefined here.
template <class Base, int kM>
struct WithBlockM : Base {
  static constexpr int kBlockM = kM;
  static constexpr int kNumConsumerWG = kM / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWG * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  static constexpr int kProducerRegs = kNumConsumerWG == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kNumConsumerWG == 2 ? 240 : 160;
  static_assert(kM <= Base::kBlockM, "a smaller tile keeps the base's shared-memory decisions valid");
};

// A configuration with kS K/V pipeline stages instead of 2 (d64 has the shared memory for 3).
template <class Base, int kS>
struct WithStages : Base {
  static constexpr int kStages = kS;
};

template <class Cfg>
cudaError_t run_cfg(const AttnProblem& pr, cudaStream_t s) {
  if (pr.causal != Cfg::kCausalMask) return cudaErrorInvalidValue;
  return ws::launch_ws_config<Cfg>(pr, pr, s);
}

struct Variant {
  const char* name;
  int d;
  Launcher fn;
  int snake = -1;  // heuristics::FwdTuning::snake override; < 0 keeps the library's heuristic
  int fold = -1;   // heuristics::FwdTuning::fold override (HOPATTN_WS_FOLD); < 0 keeps the heuristic
  bool causal_only = false;  // a causal-only configuration: skip non-causal shapes and checks
};

// The schedule variants, all bf16. Stage letters as in tile_shape.hpp: D = overlap + ping-pong +
// persistent + separate O; E = D + early Q release + K loads leading V + snake round-robin where
// the library's heuristic picks it (the library's default), with d128 non-causal's key tile
// picked by seqlen; "nosnake" forces the plain round-robin; N176 pins d128's old key tile.
static const std::vector<Variant>& variants() {
  constexpr DType BF = DType::kBF16;
  using namespace ws;
  static const std::vector<Variant> v = {
#if defined(WS_PROBE_D64B)
      {"E", 64, L<BF, 64, kStageE>()},
      {"E noPP", 64, L<BF, 64, kStageE & ~kBitPingPong>()},
      {"E st3", 64, &run_cfg<WithStages<FwdWsConfig<BF, 64, true, kStageE>, 3>>, -1, -1, true},
      {"noPP st3", 64, &run_cfg<WithStages<FwdWsConfig<BF, 64, true, kStageE & ~kBitPingPong>, 3>>, -1, -1, true},
#elif defined(WS_PROBE_D64)
      {"E", 64, L<BF, 64, kStageE>()},
      {"E fold", 64, L<BF, 64, kStageE>(), -1, 1},
      {"E M128", 64, &run_cfg<WithBlockM<FwdWsConfig<BF, 64, true, kStageE>, 128>>, -1, -1, true},
      {"M128 nofold", 64, &run_cfg<WithBlockM<FwdWsConfig<BF, 64, true, kStageE>, 128>>, -1, 0, true},
#elif defined(WS_PROBE_QUICK)
      {"D", 128, L<BF, 128, kStageD>()},
      {"E", 128, L<BF, 128, kStageE>()},
#else
      {"D", 128, L<BF, 128, kStageD>()},
      {"E", 128, L<BF, 128, kStageE>()},
      {"E nosnake", 128, L<BF, 128, kStageE>(), 0},
      {"E N176", 128, L<BF, 128, kStageE, 176>()},
      {"D", 64, L<BF, 64, kStageD>()},
      {"E", 64, L<BF, 64, kStageE>()},
      {"E nosnake", 64, L<BF, 64, kStageE>(), 0},
      {"D", 256, L<BF, 256, kStageD>()},
      {"E", 256, L<BF, 256, kStageE>()},
      {"E nosnake", 256, L<BF, 256, kStageE>(), 0},
#endif
  };
  return v;
}

static void apply_tuning(const Variant& v) {
  hopattn::heuristics::fwd_tuning().snake = v.snake;
  hopattn::heuristics::fwd_tuning().fold = v.fold;
}

static std::vector<Case> check_cases(int d) {
  constexpr DType BF = DType::kBF16;
  if (d == 128) {
    return {
        {"bf16 d128 b2 h4 s1000", BF, 128, 2, 4, 4, 1000, 1000, false, false},
        {"bf16 d128 b2 h4 s1000 causal", BF, 128, 2, 4, 4, 1000, 1000, true, false},
        {"bf16 d128 b1 h4 s4096 causal", BF, 128, 1, 4, 4, 4096, 4096, true, false},
        {"bf16 d128 sq700 sk1500", BF, 128, 2, 4, 4, 700, 1500, false, false},
        {"bf16 d128 sq700 sk1500 causal", BF, 128, 2, 4, 4, 700, 1500, true, false},
        {"bf16 d128 sq1500 sk700 causal", BF, 128, 2, 4, 4, 1500, 700, true, false},  // rows with no key
        {"bf16 d128 sq1 sk777 causal", BF, 128, 3, 4, 4, 1, 777, true, false},
        {"bf16 d128 gqa 8/2 s1000 causal", BF, 128, 2, 8, 2, 1000, 1000, true, false},
        {"bf16 d128 packed qkv s777 causal", BF, 128, 2, 4, 4, 777, 777, true, true},
        {"bf16 d128 b1 h1 s17", BF, 128, 1, 1, 1, 17, 17, false, false},
        // Many tiles per CTA (snake rounds), some with no visible key.
        {"bf16 d128 b3 h40 q2048 k512 causal", BF, 128, 3, 40, 40, 2048, 512, true, false},
        {"bf16 d128 b5 h40 s1000", BF, 128, 5, 40, 40, 1000, 1000, false, false},
        {"bf16 d128 b2 h20 s4097 causal", BF, 128, 2, 20, 20, 4097, 4097, true, false},
        {"bf16 d128 b2 h8 q3000 k6000", BF, 128, 2, 8, 8, 3000, 6000, false, false},
        {"bf16 d128 b2 h8 q3000 k2500", BF, 128, 2, 8, 8, 3000, 2500, false, false},
    };
  }
  return {
      {"b2 h4 s1000", BF, d, 2, 4, 4, 1000, 1000, false, false},
      {"b2 h4 s1000 causal", BF, d, 2, 4, 4, 1000, 1000, true, false},
      {"sq1500 sk700 causal gqa", BF, d, 2, 8, 2, 1500, 700, true, false},
      {"sq700 sk1500 causal", BF, d, 2, 4, 4, 700, 1500, true, false},
      {"b3 h40 q2048 k512 causal", BF, d, 3, 40, 40, 2048, 512, true, false},
  };
}

// --grid: every variant over the paper's grid (16k tokens, hidden 2048), variants interleaved per
// shape and swept twice in opposite orders so clock drift does not favour one.
static void time_grid(const char* only_d) {
  std::printf("grid: TFLOP/s, back-to-back launches (no L2 flush), median of 7x10, best of 2 sweeps\n");
  for (int d : {64, 128, 256}) {
    if (only_d && std::atoi(only_d) != d) continue;
    std::vector<const Variant*> vs;
    for (const Variant& v : variants())
      if (v.d == d) vs.push_back(&v);
    if (vs.empty()) continue;
    std::printf("%-4s %-6s %-6s", "d", "causal", "seqlen");
    for (const Variant* v : vs) std::printf(" %10s", v->name);
    std::printf("\n");
    for (bool causal : {false, true}) {
      for (int s = 512; s <= 16384; s *= 2) {
        const Case c{"", DType::kBF16, d, 16384 / s, 2048 / d, 2048 / d, s, s, causal, false};
        std::vector<double> best(vs.size(), 0.0);
        for (int sweep = 0; sweep < 2; ++sweep) {
          for (size_t j = 0; j < vs.size(); ++j) {
            const size_t k = sweep == 0 ? j : vs.size() - 1 - j;
            if (vs[k]->causal_only && !causal) continue;
            apply_tuning(*vs[k]);
            best[k] = std::max(best[k], time_case(c, vs[k]->fn));
          }
        }
        std::printf("%-4d %-6s %-6d", d, causal ? "yes" : "no", s);
        for (double t : best) std::printf(" %10.1f", t);
        std::printf("\n");
      }
    }
  }
}

int main(int argc, char** argv) {
  int dev = 0;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  // --profile NAME D CAUSAL SEQLEN: run one variant on one grid shape 5 times (for ncu / nsys).
  if (argc == 6 && std::strcmp(argv[1], "--profile") == 0) {
    const int d = std::atoi(argv[3]), s = std::atoi(argv[5]);
    for (const Variant& v : variants()) {
      if (v.d != d || std::strcmp(v.name, argv[2]) != 0) continue;
      const Case c{"", DType::kBF16, d, 16384 / s, 2048 / d, 2048 / d, s, s, std::atoi(argv[4]) != 0, false};
      apply_tuning(v);
      std::printf("%s d%d causal=%d s=%d: %.1f TFLOP/s\n", v.name, d, c.causal, s, time_case(c, v.fn));
      return 0;
    }
    std::printf("no variant %s at d%d\n", argv[2], d);
    return 2;
  }
  // --loop NAME D CAUSAL SEQLEN SECONDS: back-to-back launches on one set of buffers for a while
  // (watch clocks and power with nvidia-smi meanwhile); prints TFLOP/s per batch of 50 launches.
  if (argc == 7 && std::strcmp(argv[1], "--loop") == 0) {
    const int d = std::atoi(argv[3]), s = std::atoi(argv[5]), secs = std::atoi(argv[6]);
    for (const Variant& v : variants()) {
      if (v.d != d || std::strcmp(v.name, argv[2]) != 0) continue;
      const Case c{"", DType::kBF16, d, 16384 / s, 2048 / d, 2048 / d, s, s, std::atoi(argv[4]) != 0, false};
      apply_tuning(v);
      Buffers buf;
      const AttnProblem pr = make_problem(c, buf);
      const double flops = 4.0 * c.b * c.hq * double(c.sq) * c.sk * c.d * (c.causal ? 0.5 : 1.0);
      cudaEvent_t e0, e1;
      CHECK_CUDA(cudaEventCreate(&e0));
      CHECK_CUDA(cudaEventCreate(&e1));
      float total_ms = 0.f;
      for (int batch = 0; total_ms < secs * 1000.f; ++batch) {
        CHECK_CUDA(cudaEventRecord(e0));
        for (int j = 0; j < 50; ++j) CHECK_CUDA(v.fn(pr, nullptr));
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float ms;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        total_ms += ms;
        std::printf("%s d%d causal=%d s=%d batch %d: %.1f TFLOP/s\n", v.name, d, c.causal, s, batch,
                    flops * 50 / (ms * 1e-3) / 1e12);
      }
      return 0;
    }
    return 2;
  }
  bool all_ok = true;
  for (const Variant& v : variants()) {
    std::printf("variant %s d%d:\n", v.name, v.d);
    apply_tuning(v);
    for (const Case& c : check_cases(v.d))
      if (c.causal || !v.causal_only) all_ok &= check_case(c, v.fn);
  }
  if (argc >= 2 && std::strcmp(argv[1], "--grid") == 0) time_grid(argc >= 3 ? argv[2] : nullptr);
  std::printf("%s\n", all_ok ? "ALL PASS" : "SOME FAILED");
  return all_ok ? 0 : 1;
}
