// hopattn-decode-probe: the split-KV decode kernels (src/sm90/decode/) with their pipeline depth,
// split count and combine launch varied side by side, on issue 6's decode shape (seqlen_q 1, 32 query
// heads on 8 KV heads, head_dim 128, bf16, every cache full), contiguous and paged (64-token pages,
// a shuffled page table). Every variant's output is checked against the unsplit 3-stage kernel's
// (NaN-poisoned before each variant). Timing follows bench/decode.py's protocol: a 256 MB memset
// flushes L2 before each call, CUDA events around the call, median of the repetitions. A plain read
// of the same bytes (`read floor`) gives what any kernel could reach at that size.
// Not part of the library's dispatch: build with -DHOPATTN_BUILD_DECODE_PROBE=ON.
//
//   hopattn-decode-probe [reps]      (-DDECODE_PROBE_STAGES adds the 4- and 6-stage pipelines)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "sm90/decode/launch.cuh"
#include "tools/tool_util.cuh"

namespace dec = hopattn::sm90::decode;
using Element = __nv_bfloat16;

namespace {

constexpr int kHeadsQ = 32, kHeadsKv = 8, kHeadDim = 128, kPage = 64;

// Reads the n 16-byte words of k and then of v once (the bytes a decode step reads), in one launch:
// the bandwidth floor at this size.
__global__ void read_floor(const uint4* k, const uint4* v_words, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < 2 * n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(i < n ? k + i : v_words + (i - n));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

struct Case {
  int batch;
  int cache;
  bool paged;
};

struct Buffers {
  Element *q = nullptr, *out = nullptr, *k = nullptr, *v = nullptr;
  float *lse = nullptr, *work = nullptr;
  int32_t *seqlens = nullptr, *pages = nullptr;
  int64_t kv_elems = 0;
};

hopattn::KvCacheProblem make_problem(const Case& c, const Buffers& buf) {
  hopattn::KvCacheProblem p;
  p.batch = c.batch;
  p.seqlen_q = 1;
  p.heads_q = kHeadsQ;
  p.heads_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  p.capacity = c.cache;
  p.paged = c.paged;
  p.dtype = hopattn::DType::kBF16;
  p.scale = 1.f / std::sqrt(float(kHeadDim));
  p.q = buf.q;
  p.out = buf.out;
  p.lse = buf.lse;
  p.k_cache = buf.k;
  p.v_cache = buf.v;
  p.cache_seqlens = buf.seqlens;
  const int64_t row = int64_t(kHeadsKv) * kHeadDim;
  p.q_stride[0] = p.o_stride[0] = int64_t(kHeadsQ) * kHeadDim;
  p.q_stride[1] = p.o_stride[1] = int64_t(kHeadsQ) * kHeadDim;
  p.q_stride[2] = p.o_stride[2] = kHeadDim;
  if (c.paged) {
    p.page_size = kPage;
    p.max_pages = c.cache / kPage;
    p.num_pages = int64_t(c.batch) * p.max_pages;
    p.page_table = buf.pages;
    p.page_table_stride = p.max_pages;
    p.k_stride[0] = p.v_stride[0] = kPage * row;
  } else {
    p.k_stride[0] = p.v_stride[0] = int64_t(c.cache) * row;
  }
  p.k_stride[1] = p.v_stride[1] = row;
  p.k_stride[2] = p.v_stride[2] = kHeadDim;
  return p;
}

using SplitLaunch = cudaError_t (*)(const dec::DecodeParams&, int64_t, cudaStream_t);
struct Variant {
  const char* name;
  SplitLaunch split;
  int smem;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  const Variant variants[] = {
      {"st3", &dec::launch_split<Element, kHeadDim, 1, false, 3>, dec::TileConfig<kHeadDim, 1, 3>::kSmemBytes},
#ifdef DECODE_PROBE_STAGES  // the pipeline-depth comparison of perf-notes "decode v3"
      {"st4", &dec::launch_split<Element, kHeadDim, 1, false, 4>, dec::TileConfig<kHeadDim, 1, 4>::kSmemBytes},
      {"st6", &dec::launch_split<Element, kHeadDim, 1, false, 6>, dec::TileConfig<kHeadDim, 1, 6>::kSmemBytes},
#endif
  };
  const Case cases[] = {{1, 1024, false},  {1, 8192, false},  {1, 32768, false}, {1, 131072, false},
                        {8, 1024, false},  {8, 8192, false},  {8, 32768, false}, {8, 131072, false},
                        {1, 1024, true},   {1, 8192, true},   {1, 32768, true},  {1, 131072, true},
                        {8, 1024, true},   {8, 8192, true},   {8, 32768, true},  {8, 131072, true}};
  int sms = 0;
  TOOL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t stream;
  TOOL_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  TOOL_CUDA_CHECK(cudaEventCreate(&e0));
  TOOL_CUDA_CHECK(cudaEventCreate(&e1));
  void* flush = nullptr;
  constexpr size_t kFlushBytes = size_t(256) << 20;
  TOOL_CUDA_CHECK(cudaMalloc(&flush, kFlushBytes));
  unsigned* sink = nullptr;
  TOOL_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));

  // Times `launch` with an L2 flush before each call; returns the median in microseconds.
  const auto time_us = [&](auto&& launch) {
    std::vector<float> t;
    for (int r = 0; r < reps + 3; ++r) {
      TOOL_CUDA_CHECK(cudaMemsetAsync(flush, r & 0xff, kFlushBytes, stream));
      TOOL_CUDA_CHECK(cudaEventRecord(e0, stream));
      launch();
      TOOL_CUDA_CHECK(cudaEventRecord(e1, stream));
      TOOL_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      TOOL_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 3) t.push_back(ms * 1e3f);
    }
    return median(t);
  };

  int failures = 0;
  std::printf("| batch | cache | layout | variant | splits | combine | us | GB/s | max |diff| |\n|---:|---:|---|---|---:|---|---:|---:|---:|\n");
  for (const Case& c : cases) {
    Buffers buf;
    buf.kv_elems = int64_t(c.batch) * c.cache * kHeadsKv * kHeadDim;
    const int64_t q_elems = int64_t(c.batch) * kHeadsQ * kHeadDim;
    TOOL_CUDA_CHECK(cudaMalloc(&buf.q, q_elems * sizeof(Element)));
    TOOL_CUDA_CHECK(cudaMalloc(&buf.out, q_elems * sizeof(Element)));
    TOOL_CUDA_CHECK(cudaMalloc(&buf.k, buf.kv_elems * sizeof(Element)));
    TOOL_CUDA_CHECK(cudaMalloc(&buf.v, buf.kv_elems * sizeof(Element)));
    TOOL_CUDA_CHECK(cudaMalloc(&buf.lse, c.batch * kHeadsQ * sizeof(float)));
    TOOL_CUDA_CHECK(cudaMalloc(&buf.work, dec::workspace_bytes(c.batch * kHeadsQ, kHeadDim, dec::kMaxSplits)));
    TOOL_CUDA_CHECK(cudaMalloc(&buf.seqlens, c.batch * sizeof(int32_t)));
    tools::fill_random(buf.q, hopattn::DType::kBF16, q_elems, 1);  // legacy stream: ordered before `stream`
    tools::fill_random(buf.k, hopattn::DType::kBF16, buf.kv_elems, 2 + c.cache);
    tools::fill_random(buf.v, hopattn::DType::kBF16, buf.kv_elems, 3 + c.cache);
    std::vector<int32_t> seqlens(c.batch, c.cache);
    TOOL_CUDA_CHECK(cudaMemcpy(buf.seqlens, seqlens.data(), c.batch * sizeof(int32_t), cudaMemcpyHostToDevice));
    if (c.paged) {
      std::vector<int32_t> pages(int64_t(c.batch) * (c.cache / kPage));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
      TOOL_CUDA_CHECK(cudaMalloc(&buf.pages, pages.size() * sizeof(int32_t)));
      TOOL_CUDA_CHECK(cudaMemcpy(buf.pages, pages.data(), pages.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    const double bytes = 2.0 * buf.kv_elems * sizeof(Element);
    const hopattn::KvCacheProblem p = make_problem(c, buf);
    const char* layout = c.paged ? "paged64" : "contig";

    // The read floor over K and V, one launch.
    {
      const int64_t words = buf.kv_elems * int64_t(sizeof(Element)) / 16;
      const float us = time_us([&] {
        read_floor<<<sms * 4, 512, 0, stream>>>(reinterpret_cast<const uint4*>(buf.k),
                                                reinterpret_cast<const uint4*>(buf.v), words, sink);
      });
      std::printf("| %d | %d | %s | read floor | - | - | %.1f | %.0f | - |\n", c.batch, c.cache, layout, us,
                  bytes / us / 1e3);
    }

    std::vector<Element> ref(q_elems), got(q_elems);
    // At 1k, 8 and 16 splits go below the heuristic's 256 keys per split (kMinKeysPerSplit).
    const std::vector<int> split_list = c.batch == 1 ? (c.cache <= 1024 ? std::vector<int>{2, 4, 8, 16}
                                                                        : std::vector<int>{8, 12, 16, 24, 32})
                                                     : std::vector<int>{1, 2, 3, 4};
    bool have_ref = false;
    for (const Variant& var : variants) {
      for (int splits : split_list) {
        for (int pdl = 0; pdl < 2; ++pdl) {
          if (splits == 1 && pdl == 1) continue;
          dec::DecodeParams params;
          params.p = p;
          params.num_splits = splits;
          params.rows_per_block = 16;
          params.row_blocks = 1;
          if (splits > 1) {
            params.partial_o = buf.work;
            params.partial_lse = reinterpret_cast<float*>(
                reinterpret_cast<char*>(buf.work) + dec::partial_o_bytes(c.batch * kHeadsQ, kHeadDim, splits));
          }
          const int64_t blocks = int64_t(c.batch) * kHeadsKv * splits;
          const auto run = [&] {
            TOOL_CUDA_CHECK(var.split(params, blocks, stream));
            if (splits > 1) TOOL_CUDA_CHECK((dec::launch_combine<Element, kHeadDim>(params, stream, pdl != 0)));
          };
          if (!have_ref) {  // the unsplit 3-stage kernel as the reference output
            dec::DecodeParams one = params;
            one.num_splits = 1;
            one.partial_o = one.partial_lse = nullptr;
            TOOL_CUDA_CHECK((dec::launch_split<Element, kHeadDim, 1, false, 3>(one, int64_t(c.batch) * kHeadsKv, stream)));
            TOOL_CUDA_CHECK(cudaMemcpyAsync(ref.data(), buf.out, q_elems * sizeof(Element), cudaMemcpyDeviceToHost, stream));
            TOOL_CUDA_CHECK(cudaStreamSynchronize(stream));
            have_ref = true;
          }
          TOOL_CUDA_CHECK(cudaMemsetAsync(buf.out, 0xff, q_elems * sizeof(Element), stream));  // NaN poison
          run();
          TOOL_CUDA_CHECK(cudaMemcpyAsync(got.data(), buf.out, q_elems * sizeof(Element), cudaMemcpyDeviceToHost, stream));
          TOOL_CUDA_CHECK(cudaStreamSynchronize(stream));
          float diff = 0;
          for (int64_t i = 0; i < q_elems; ++i) {
            const float d = std::fabs(__bfloat162float(got[i]) - __bfloat162float(ref[i]));
            diff = std::isnan(d) ? INFINITY : std::max(diff, d);
          }
          const bool ok = diff <= 4e-3f;
          failures += !ok;
          const float us = time_us(run);
          std::printf("| %d | %d | %s | %s | %d | %s | %.1f | %.0f | %.1e%s |\n", c.batch, c.cache, layout, var.name, splits,
                      splits == 1 ? "-" : (pdl ? "pdl" : "plain"), us, bytes / us / 1e3, diff, ok ? "" : " FAIL");
        }
      }
    }
    std::fflush(stdout);
    TOOL_CUDA_CHECK(cudaFree(buf.q));
    TOOL_CUDA_CHECK(cudaFree(buf.out));
    TOOL_CUDA_CHECK(cudaFree(buf.k));
    TOOL_CUDA_CHECK(cudaFree(buf.v));
    TOOL_CUDA_CHECK(cudaFree(buf.lse));
    TOOL_CUDA_CHECK(cudaFree(buf.work));
    TOOL_CUDA_CHECK(cudaFree(buf.seqlens));
    if (buf.pages) TOOL_CUDA_CHECK(cudaFree(buf.pages));
  }
  std::printf("failures: %d\n", failures);
  return failures == 0 ? 0 : 1;
}
