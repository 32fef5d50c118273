// The sm90 KV-cache decoding path (hopattn::attention_with_kvcache) against the fp64 CUDA
// reference run on each sequence's keys gathered into a dense buffer (from a host copy of the cache
// with the append applied by hand). One grid over dtype x head dim x cache layout (contiguous,
// paged 16/64/256 with random page tables) x GQA group x seqlen_q x causal x append, with ragged
// cache lengths including 0, 1 and a full cache; then split counts 1..64 against one split,
// run-to-run bitwise determinism, a long cache, 64-bit offsets, strided caches, and the index-value
// checks (and the clamping without them); sliding windows (KvCacheWindowVsReference: each side
// alone, both, causal with a left bound, the diagonal, wider than the cache, over contiguous and
// paged caches, seqlen_q 1/4/17, with and without append, heuristic and forced splits; and
// Sm90KvCache.SlidingWindowOptions over dtypes, head dims and GQA groups); chunked prefill on the
// forward kernel (KvCachePrefillVsReference, KvCachePagedPrefillVsReference with pages that hold
// whole key tiles or not, Sm90KvCache.ChunkedPrefillOptionsAndRoutes: the route asserted through
// kvcache_route.hpp, NaN in every cache row past a sequence's keys). out/lse are
// NaN-poisoned before every call; after it the cache must hold k_new/v_new at the appended rows and
// be bitwise untouched everywhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"
#include "api/instantiations.hpp"
#include "api/kvcache_problem.hpp"
#include "api/kvcache_route.hpp"
#include "sm90/ws/key_tile.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {
namespace {

// n 16-bit elements uniform in [lo, hi), stored in dtype t.
std::vector<uint16_t> random_elements(size_t n, uint64_t seed, DType t, float lo, float hi) {
  std::vector<uint16_t> out(n);
  FastRng rng{seed};
  for (size_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(rng.next() >> 40) * (1.f / 16777216.f);
    const float x = lo + (hi - lo) * u;
    out[i] = t == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
  }
  return out;
}

bool is_nan_bits(uint16_t h, DType t) { return t == DType::kBF16 ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u; }

TensorRef int_tensor(void* data, int64_t rows, int64_t cols = -1) {
  TensorRef t;
  t.data = data;
  t.dtype = DType::kInt32;
  t.ndim = cols < 0 ? 1 : 2;
  t.sizes[0] = rows;
  t.strides[0] = cols < 0 ? 1 : cols;
  if (cols >= 0) {
    t.sizes[1] = cols;
    t.strides[1] = 1;
  }
  return t;
}

// ---- a decoding problem on the device ------------------------------------------------------------

struct DecCase {
  std::string name;
  DType dtype = DType::kBF16;
  int head_dim = 128;
  int64_t heads_q = 8, heads_kv = 2, seqlen_q = 1;
  bool causal = false;
  Window window;           // default: none
  float softcap = 0.f;     // 0: off
  int64_t page_size = 0;   // 0: contiguous
  int64_t capacity = 768;  // keys per sequence: max_seqlen_k, or max_pages * page_size
  std::vector<int> cached;  // cache_seqlens
  int64_t seqlen_new = 0;
  int num_splits = 0;
  int64_t row_pad = 0;  // extra elements per cache row (a strided cache)
  bool with_lse = true;
  int64_t extra_pages = 5;       // pages no sequence uses: must stay untouched
  int64_t min_block_stride = 0;  // the cache's dim-0 stride at least this many elements (64-bit offsets)
  int64_t first_page = 0;        // paged: page ids start here; pages below are never touched
  bool nan_tail = false;         // cache rows past each sequence's len_k hold NaN (never to be read)
};

// The cache is `blocks` blocks (sequence slabs or pages) of block_rows token rows; only the
// `tracked` ones hold data (all of them unless first_page / min_block_stride make it huge).
struct DecRun {
  DecCase c;
  int64_t batch = 0, row = 0, block_rows = 0, block_stride = 0, blocks = 0, max_pages = 0;
  std::vector<int64_t> tracked;  // block ids with data, in host order
  std::vector<uint16_t> k_host, v_host;  // tracked blocks back to back: the expected cache
  std::vector<uint16_t> q_host, k_new_host, v_new_host;
  std::vector<int32_t> seqlens, page_table;
  DeviceBuffer q, k_cache, v_cache, k_new, v_new, out, lse, seqlens_dev, page_table_dev;
  KvCacheArgs args;
  std::vector<float> ref_out, ref_lse;  // the reference, (batch, sq, hq, d) and (batch, hq, sq)

  int64_t block_elems() const { return block_rows * row; }
  int64_t len_k(int64_t b) const { return seqlens[static_cast<size_t>(b)] + c.seqlen_new; }
  // Index into k_host/v_host of token `pos` of sequence b, kv head h.
  size_t host_index(int64_t b, int64_t h, int64_t pos) const {
    int64_t block = b, r = pos;
    if (c.page_size) {
      block = page_table[static_cast<size_t>(b * max_pages + pos / c.page_size)];
      r = pos % c.page_size;
    }
    const int64_t slot = block - tracked.front();  // tracked blocks are one consecutive range
    return static_cast<size_t>(slot * block_elems() + r * row + h * c.head_dim);
  }
};

void setup(DecRun& x, const DecCase& c) {
  x.c = c;
  x.batch = static_cast<int64_t>(c.cached.size());
  const int64_t b = x.batch, d = c.head_dim, hq = c.heads_q, hkv = c.heads_kv, sq = c.seqlen_q;
  const uint64_t seed = std::hash<std::string>{}(c.name);
  x.row = hkv * d + c.row_pad;
  x.block_rows = c.page_size ? c.page_size : c.capacity;
  x.block_stride = std::max(x.block_rows * x.row, (c.min_block_stride + 7) / 8 * 8);
  if (c.page_size) {
    x.max_pages = c.capacity / c.page_size;
    const int64_t used = b * x.max_pages + c.extra_pages;
    x.blocks = c.first_page + used;
    for (int64_t p = c.first_page; p < x.blocks; ++p) x.tracked.push_back(p);
    std::vector<int32_t> perm(x.tracked.begin(), x.tracked.end());
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
    x.page_table.assign(perm.begin(), perm.begin() + b * x.max_pages);
  } else {
    x.blocks = b;
    for (int64_t i = 0; i < b; ++i) x.tracked.push_back(i);
  }
  x.seqlens.assign(c.cached.begin(), c.cached.end());
  const size_t tracked_elems = x.tracked.size() * static_cast<size_t>(x.block_elems());
  x.k_host = random_elements(tracked_elems, seed + 1, c.dtype, -1.f, 1.f);
  x.v_host = random_elements(tracked_elems, seed + 2, c.dtype, -1.f, 1.f);
  x.q_host = random_elements(static_cast<size_t>(b * sq * hq * d), seed + 3, c.dtype, -3.f, 3.f);
  x.k_new_host = random_elements(static_cast<size_t>(b * c.seqlen_new * hkv * d), seed + 4, c.dtype, -1.f, 1.f);
  x.v_new_host = random_elements(static_cast<size_t>(b * c.seqlen_new * hkv * d), seed + 5, c.dtype, -1.f, 1.f);
  if (c.nan_tail) {  // unused slots as a serving engine may leave them; 0 * NaN = NaN if read
    const uint16_t nan = c.dtype == DType::kBF16 ? 0x7FC0 : 0x7E00;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t pos = std::max<int64_t>(x.len_k(bi), 0); pos < c.capacity; ++pos)
        for (int64_t h = 0; h < hkv; ++h) {
          std::fill_n(&x.k_host[x.host_index(bi, h, pos)], d, nan);
          std::fill_n(&x.v_host[x.host_index(bi, h, pos)], d, nan);
        }
  }

  const size_t cache_bytes = x.blocks == 0 ? 0 : static_cast<size_t>(((x.blocks - 1) * x.block_stride + x.block_elems()) * 2);
  x.k_cache = DeviceBuffer(cache_bytes);
  x.v_cache = DeviceBuffer(cache_bytes);
  for (size_t i = 0; i < x.tracked.size(); ++i) {
    const size_t off = static_cast<size_t>(x.tracked[i] * x.block_stride * 2), n = static_cast<size_t>(x.block_elems() * 2);
    HOPATTN_TEST_CUDA(cudaMemcpy(static_cast<uint8_t*>(x.k_cache.get()) + off, &x.k_host[i * x.block_elems()], n,
                                 cudaMemcpyHostToDevice));
    HOPATTN_TEST_CUDA(cudaMemcpy(static_cast<uint8_t*>(x.v_cache.get()) + off, &x.v_host[i * x.block_elems()], n,
                                 cudaMemcpyHostToDevice));
  }
  x.q = DeviceBuffer(x.q_host.size() * 2);
  x.q.upload(x.q_host);
  x.k_new = DeviceBuffer(x.k_new_host.size() * 2);
  x.k_new.upload(x.k_new_host);
  x.v_new = DeviceBuffer(x.v_new_host.size() * 2);
  x.v_new.upload(x.v_new_host);
  x.out = DeviceBuffer(x.q_host.size() * 2);
  x.lse = DeviceBuffer(static_cast<size_t>(b * hq * sq) * 4);
  x.seqlens_dev = DeviceBuffer(x.seqlens.size() * 4);
  x.seqlens_dev.upload(x.seqlens);
  if (c.page_size) {
    x.page_table_dev = DeviceBuffer(x.page_table.size() * 4);
    x.page_table_dev.upload(x.page_table);
  }

  KvCacheArgs& a = x.args;
  a = KvCacheArgs{};
  a.q = make_tensor(x.q.get(), c.dtype, b, sq, hq, d);
  for (auto [t, buf] : {std::pair{&a.k_cache, &x.k_cache}, std::pair{&a.v_cache, &x.v_cache}}) {
    *t = make_tensor(buf->get(), c.dtype, x.blocks, x.block_rows, hkv, d);
    t->strides[0] = x.block_stride;
    t->strides[1] = x.row;
  }
  a.cache_seqlens = int_tensor(x.seqlens_dev.get(), b);
  if (c.page_size) a.page_table = int_tensor(x.page_table_dev.get(), b, x.max_pages);
  if (c.seqlen_new > 0) {
    a.k_new = make_tensor(x.k_new.get(), c.dtype, b, c.seqlen_new, hkv, d);
    a.v_new = make_tensor(x.v_new.get(), c.dtype, b, c.seqlen_new, hkv, d);
  }
  a.out = make_tensor(x.out.get(), c.dtype, b, sq, hq, d);
  if (c.with_lse) a.lse = make_tensor(x.lse.get(), DType::kFP32, b, hq, sq);
  a.causal = c.causal;
  a.window = c.window;
  a.softcap = c.softcap;
  a.num_splits = c.num_splits;

  // The expected cache: k_new/v_new at rows cache_seqlens[b] + t.
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < c.seqlen_new; ++t)
      for (int64_t h = 0; h < hkv; ++h) {
        const size_t dst = x.host_index(bi, h, x.seqlens[static_cast<size_t>(bi)] + t);
        const size_t src = static_cast<size_t>(((bi * c.seqlen_new + t) * hkv + h) * d);
        std::copy_n(&x.k_new_host[src], d, &x.k_host[dst]);
        std::copy_n(&x.v_new_host[src], d, &x.v_host[dst]);
      }

  // The reference: each sequence's keys gathered dense, through the fp64 CUDA reference.
  std::vector<uint16_t> kg, vg;
  std::vector<int64_t> start(static_cast<size_t>(b) + 1, 0);
  for (int64_t bi = 0; bi < b; ++bi) {
    start[bi + 1] = start[bi] + x.len_k(bi);
    for (int64_t j = 0; j < x.len_k(bi); ++j)
      for (int64_t h = 0; h < hkv; ++h) {
        const size_t src = x.host_index(bi, h, j);
        kg.insert(kg.end(), &x.k_host[src], &x.k_host[src] + d);
        vg.insert(vg.end(), &x.v_host[src], &x.v_host[src] + d);
      }
  }
  DeviceBuffer kg_dev(kg.size() * 2 + 16), vg_dev(vg.size() * 2 + 16), out_ref(x.q_host.size() * 2 + 16),
      lse_ref(static_cast<size_t>(b * hq * sq) * 4 + 16);
  kg_dev.upload(kg);
  vg_dev.upload(vg);
  const int64_t q_seq = sq * hq * d;
  for (int64_t bi = 0; bi < b; ++bi) {
    ForwardArgs f;
    f.q = make_tensor(static_cast<uint16_t*>(x.q.get()) + bi * q_seq, c.dtype, 1, sq, hq, d);
    f.k = make_tensor(static_cast<uint16_t*>(kg_dev.get()) + start[bi] * hkv * d, c.dtype, 1, x.len_k(bi), hkv, d);
    f.v = make_tensor(static_cast<uint16_t*>(vg_dev.get()) + start[bi] * hkv * d, c.dtype, 1, x.len_k(bi), hkv, d);
    f.out = make_tensor(static_cast<uint16_t*>(out_ref.get()) + bi * q_seq, c.dtype, 1, sq, hq, d);
    f.lse = make_tensor(static_cast<float*>(lse_ref.get()) + bi * hq * sq, DType::kFP32, 1, hq, sq);
    f.causal = c.causal;
    f.window = c.window;  // bottom-right aligned on the gathered keys: sk = len_k(b)
    f.softcap = c.softcap;
    const Result r = forward_reference_cuda(f);
    ASSERT_TRUE(r.ok()) << "reference: " << r.message;
  }
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> ref_bits(x.q_host.size());
  out_ref.download(ref_bits.data(), ref_bits.size() * 2);
  x.ref_out = decode(ref_bits.data(), ref_bits.size(), c.dtype);
  x.ref_lse.resize(static_cast<size_t>(b * hq * sq));
  lse_ref.download(x.ref_lse.data(), x.ref_lse.size() * 4);
}

struct Outputs {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// One call on NaN-poisoned out/lse with a fresh workspace of the size asked for.
Outputs run(DecRun& x, int num_splits) {
  x.args.num_splits = num_splits;
  x.out.fill(0xFF);
  x.lse.fill(0xFF);
  DeviceBuffer ws(attention_with_kvcache_workspace_size(x.args));
  const Result r = attention_with_kvcache(x.args, ws.get(), ws.bytes());
  EXPECT_TRUE(r.ok()) << x.c.name << ": " << r.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  Outputs o;
  o.out.resize(x.q_host.size());
  x.out.download(o.out.data(), o.out.size() * 2);
  o.lse.resize(x.ref_lse.size());
  x.lse.download(o.lse.data(), o.lse.size() * 4);
  return o;
}

// Collects a case's problems and reports the first few in one failure.
struct Problems {
  explicit Problems(std::string n) : name(std::move(n)) {}
  Problems(const Problems&) = delete;
  Problems& operator=(const Problems&) = delete;
  std::string name, text;
  int count = 0;
  void add(const std::string& m) {
    if (count++ < 10) text += "\n  " + m;
  }
  ~Problems() {
    if (count > 0) ADD_FAILURE() << name << ": " << count << " problem(s):" << text;
  }
};

// The tracked blocks of the device cache against the expected cache, bit for bit.
void check_cache(const DecRun& x, Problems& p) {
  const size_t n = static_cast<size_t>(x.block_elems());
  std::vector<uint16_t> got(n);
  int64_t bad_k = 0, bad_v = 0;
  for (size_t i = 0; i < x.tracked.size(); ++i) {
    const size_t off = static_cast<size_t>(x.tracked[i] * x.block_stride * 2);
    HOPATTN_TEST_CUDA(cudaMemcpy(got.data(), static_cast<const uint8_t*>(x.k_cache.get()) + off, n * 2, cudaMemcpyDeviceToHost));
    bad_k += !std::equal(got.begin(), got.end(), x.k_host.begin() + static_cast<std::ptrdiff_t>(i * n));
    HOPATTN_TEST_CUDA(cudaMemcpy(got.data(), static_cast<const uint8_t*>(x.v_cache.get()) + off, n * 2, cudaMemcpyDeviceToHost));
    bad_v += !std::equal(got.begin(), got.end(), x.v_host.begin() + static_cast<std::ptrdiff_t>(i * n));
  }
  if (bad_k) p.add(std::to_string(bad_k) + " k_cache blocks differ from the expected append");
  if (bad_v) p.add(std::to_string(bad_v) + " v_cache blocks differ from the expected append");
}

// Relative L2 error of lse over entries finite in both, relative to max(rms, 1); `mismatch` on a
// NaN or a differing -inf pattern.
double lse_error(const float* got, const float* ref, size_t n, bool* mismatch) {
  double diff = 0, norm = 0;
  size_t finite = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i]) || std::isinf(got[i]) != std::isinf(ref[i]) ||
        (std::isinf(got[i]) && got[i] != ref[i])) {
      *mismatch = true;
      continue;
    }
    if (std::isinf(ref[i])) continue;
    diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
    ++finite;
  }
  return finite == 0 ? 0.0 : std::sqrt(diff / std::max(norm, static_cast<double>(finite)));
}

// out/lse of one call against the reference, sequence by sequence.
void check_outputs(const DecRun& x, const Outputs& o, Problems& p) {
  const DType t = x.c.dtype;
  const int64_t sq = x.c.seqlen_q, hq = x.c.heads_q, d = x.c.head_dim, per_seq = sq * hq * d;
  const double out_tol = t == DType::kBF16 ? 1e-2 : 3e-3;  // as test_forward.cpp
  for (int64_t b = 0; b < x.batch; ++b) {
    const std::string seq = "seq " + std::to_string(b) + " (cached " + std::to_string(x.seqlens[static_cast<size_t>(b)]) +
                            ", len_k " + std::to_string(x.len_k(b)) + ")";
    const size_t o0 = static_cast<size_t>(b * per_seq), n = static_cast<size_t>(per_seq);
    int64_t unwritten = 0, nonzero_no_key = 0;
    for (size_t e = o0; e < o0 + n; ++e) unwritten += is_nan_bits(o.out[e], t);
    const std::vector<float> got = decode(&o.out[o0], n, t);
    const std::vector<float> ref(x.ref_out.begin() + static_cast<std::ptrdiff_t>(o0), x.ref_out.begin() + static_cast<std::ptrdiff_t>(o0 + n));
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h)
        if (std::isinf(x.ref_lse[static_cast<size_t>((b * hq + h) * sq + i)]))
          for (int64_t e = 0; e < d; ++e) nonzero_no_key += got[static_cast<size_t>((i * hq + h) * d + e)] != 0.f;
    if (unwritten) p.add(seq + ": " + std::to_string(unwritten) + " out elements left unwritten (NaN)");
    if (nonzero_no_key) p.add(seq + ": " + std::to_string(nonzero_no_key) + " nonzero out elements in rows that see no key");
    const double err = rel_l2_error(got, ref);
    if (!(err <= out_tol)) p.add(seq + ": out rel_l2 " + std::to_string(err) + " > " + std::to_string(out_tol));
    if (x.c.with_lse) {
      const size_t l0 = static_cast<size_t>(b * hq * sq);
      bool mismatch = false;
      const double lerr = lse_error(&o.lse[l0], &x.ref_lse[l0], static_cast<size_t>(hq * sq), &mismatch);
      if (mismatch) p.add(seq + ": lse NaN or -inf pattern differs from the reference");
      if (!(lerr <= 1e-4)) p.add(seq + ": lse rel_l2 " + std::to_string(lerr) + " > 1e-4");
    }
  }
}

// Sets up, runs once with the case's num_splits, checks cache and outputs; returns the outputs.
Outputs run_and_check(DecRun& x, const DecCase& c) {
  SCOPED_TRACE(c.name);
  setup(x, c);
  Problems p{c.name};
  if (::testing::Test::HasFatalFailure()) return {};
  Outputs o = run(x, c.num_splits);
  check_cache(x, p);
  check_outputs(x, o, p);
  return o;
}

// ---- the grid ------------------------------------------------------------------------------------

struct GridCase {
  DType dtype;
  int head_dim;
  int64_t page_size;  // 0: contiguous
  int64_t group, seqlen_q;
  bool causal, append;
};

std::string grid_name(const GridCase& g) {
  return std::string(dtype_name(g.dtype)) + "_d" + std::to_string(g.head_dim) +
         (g.page_size ? "_paged" + std::to_string(g.page_size) : std::string("_contig")) + "_g" +
         std::to_string(g.group) + "_q" + std::to_string(g.seqlen_q) + (g.causal ? "_causal" : "_full") +
         (g.append ? "_append" : "");
}

std::vector<GridCase> grid_cases() {
  std::vector<GridCase> v;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      for (int64_t page : {0, 16, 64, 256})
        for (int64_t group : {1, 4, 8})
          for (int64_t sq : {1, 2, 7})
            for (bool causal : {false, true})
              for (bool append : {false, true}) v.push_back({t, d, page, group, sq, causal, append});
  return v;
}

class KvCacheVsReference : public ::testing::TestWithParam<GridCase> {};

// Capacity 768 (3 pages of 256, 12 of 64, 48 of 16); five sequences with 0, 1, 300, a full cache
// and 40 keys (3 appended, from ragged positions, with `append`). Without append the heuristic
// split count (3 here) runs the combine kernel, including on the sequence with no key; with it,
// one split writes out directly.
TEST_P(KvCacheVsReference, MatchesGatheredFp64Reference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const GridCase g = GetParam();
  DecCase c;
  c.name = grid_name(g);
  c.dtype = g.dtype;
  c.head_dim = g.head_dim;
  c.page_size = g.page_size;
  c.heads_kv = 2;
  c.heads_q = 2 * g.group;
  c.seqlen_q = g.seqlen_q;
  c.causal = g.causal;
  c.seqlen_new = g.append ? 3 : 0;
  c.cached = g.append ? std::vector<int>{0, 1, 300, 765, 40} : std::vector<int>{0, 1, 300, 768, 40};
  c.num_splits = g.append ? 1 : 0;
  DecRun x;
  run_and_check(x, c);
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvCacheVsReference, ::testing::ValuesIn(grid_cases()),
                         [](const ::testing::TestParamInfo<GridCase>& info) { return grid_name(info.param); });

// ---- chunked prefill: the forward-kernel route ----------------------------------------------------

// Sets HOPATTN_KV_KERNEL for one scope (null: unset), restoring the previous value.
struct KvKernelOverride {
  std::string saved;
  bool had;
  explicit KvKernelOverride(const char* value) {
    const char* old = std::getenv("HOPATTN_KV_KERNEL");
    had = old != nullptr;
    if (had) saved = old;
    if (value) setenv("HOPATTN_KV_KERNEL", value, 1);
    else unsetenv("HOPATTN_KV_KERNEL");
  }
  ~KvKernelOverride() {
    if (had) setenv("HOPATTN_KV_KERNEL", saved.c_str(), 1);
    else unsetenv("HOPATTN_KV_KERNEL");
  }
};

// The kernel the library will run for x's call (the same host function it uses).
KvKernel route_of(const DecRun& x) {
  KvCacheProblem p;
  const Result r = validate_kvcache(x.args, Backend::kSm90, &p);
  EXPECT_TRUE(r.ok()) << r.message;
  return choose_kv_kernel(p, std::getenv("HOPATTN_KV_KERNEL"));
}

// The forward route needs the forward kernel of the case's dtype and head dim, which a build with a
// restricted instantiation list (HOPATTN_DTYPES / HOPATTN_HEAD_DIMS) may lack; the call then fails by
// design ("no forward kernel was built"), which is not what these tests check.
bool route_built(const DecCase& c, KvKernel route) {
  return route != KvKernel::kForward || has_forward_kernel(c.dtype, c.head_dim);
}

// Sets up and checks one case on the expected route.
void run_on_route(const DecCase& c, KvKernel expected) {
  SCOPED_TRACE(c.name);
  DecRun x;
  setup(x, c);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(route_of(x), expected) << c.name;
  Problems p{c.name};
  const Outputs o = run(x, c.num_splits);
  check_cache(x, p);
  check_outputs(x, o, p);
}

struct PrefillCase {
  DType dtype;
  int head_dim;
  int64_t group, seqlen_q;
  bool causal, append;
};

std::string prefill_name(const PrefillCase& g) {
  return std::string(dtype_name(g.dtype)) + "_d" + std::to_string(g.head_dim) + "_g" + std::to_string(g.group) + "_q" +
         std::to_string(g.seqlen_q) + (g.causal ? "_causal" : "_full") + (g.append ? "_append" : "");
}

std::vector<PrefillCase> prefill_cases() {
  std::vector<PrefillCase> v;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      for (int64_t group : {1, 4, 8})
        for (int64_t sq : {kKvForwardMinSeqlenQ, int64_t{300}})
          for (bool causal : {false, true})
            for (bool append : {false, true}) v.push_back({t, d, group, sq, causal, append});
  return v;
}

// One chunked-prefill case: 2 * group query heads on 2 KV heads; key counts 0, 1 (causal: rows
// before the keys see none), 300, a full cache, 40 (under one key tile) and 129 (one past a 128-key
// tile), 3 of them appended with `append`; every cache row past a sequence's keys is NaN, so a
// kernel that multiplies one (with P = 0) writes NaN.
DecCase prefill_case(std::string name, DType t, int head_dim, int64_t page_size, int64_t capacity, int64_t group,
                     int64_t seqlen_q, bool causal, bool append) {
  DecCase c;
  c.name = std::move(name);
  c.dtype = t;
  c.head_dim = head_dim;
  c.page_size = page_size;
  c.capacity = capacity;
  c.heads_kv = 2;
  c.heads_q = 2 * group;
  c.seqlen_q = seqlen_q;
  c.causal = causal;
  c.seqlen_new = append ? 3 : 0;
  const int full = static_cast<int>(capacity);
  c.cached = append ? std::vector<int>{0, 1, 297, full - 3, 37, 126} : std::vector<int>{0, 1, 300, full, 40, 129};
  c.nan_tail = true;
  return c;
}

class KvCachePrefillVsReference : public ::testing::TestWithParam<PrefillCase> {};

// Chunked prefill (seqlen_q >= kKvForwardMinSeqlenQ) on a contiguous cache of capacity 768 runs the
// forward kernel (prefill_case: the key counts and the NaN tails).
TEST_P(KvCachePrefillVsReference, MatchesGatheredFp64Reference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const KvKernelOverride automatic{nullptr};
  const PrefillCase g = GetParam();
  const DecCase c =
      prefill_case("prefill_" + prefill_name(g), g.dtype, g.head_dim, 0, 768, g.group, g.seqlen_q, g.causal, g.append);
  if (!route_built(c, KvKernel::kForward)) GTEST_SKIP() << "not built: " << build_instantiations();
  run_on_route(c, KvKernel::kForward);
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvCachePrefillVsReference, ::testing::ValuesIn(prefill_cases()),
                         [](const ::testing::TestParamInfo<PrefillCase>& info) { return prefill_name(info.param); });

// Chunked prefill on paged caches. Pages that hold whole key tiles run the forward kernel (one TMA
// box per tile, the page looked up per tile); the others keep the decode kernel. Each head dim
// has a page size of each kind: d64 128/256 (key tile 128), d128 causal 128/256 (128), d128
// non-causal 176 (its 176-key tile) and 256 (decode), d256 causal 160 and non-causal 80 (80).
struct PagedPrefillCase {
  DType dtype;
  int head_dim;
  int64_t page_size;
  bool causal;
  int64_t group, seqlen_q;
  bool append;
};

std::string paged_prefill_name(const PagedPrefillCase& g) {
  return std::string(dtype_name(g.dtype)) + "_d" + std::to_string(g.head_dim) + "_page" + std::to_string(g.page_size) +
         (g.causal ? "_causal" : "_full") + "_g" + std::to_string(g.group) + "_q" + std::to_string(g.seqlen_q) +
         (g.append ? "_append" : "");
}

std::vector<PagedPrefillCase> paged_prefill_cases() {
  struct Layout { int head_dim; int64_t page_size; bool causal; };
  const Layout layouts[] = {{64, 128, false}, {64, 256, true},   {128, 128, true}, {128, 256, true},
                            {128, 176, false}, {128, 256, false}, {256, 160, true}, {256, 80, false}};
  std::vector<PagedPrefillCase> v;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (const Layout& l : layouts)
      for (int64_t group : {1, 8})
        for (int64_t sq : {kKvForwardMinSeqlenQ, int64_t{300}})
          for (bool append : {false, true}) v.push_back({t, l.head_dim, l.page_size, l.causal, group, sq, append});
  return v;
}

class KvCachePagedPrefillVsReference : public ::testing::TestWithParam<PagedPrefillCase> {};

// Capacity: the multiple of page_size from 768 up; prefill_case's key counts and NaN in every unused
// row of every page, and random page tables with pages no sequence uses.
TEST_P(KvCachePagedPrefillVsReference, MatchesGatheredFp64Reference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const KvKernelOverride automatic{nullptr};
  const PagedPrefillCase g = GetParam();
  const int64_t capacity = (768 + g.page_size - 1) / g.page_size * g.page_size;
  const int key_tile = sm90::ws::default_key_tile(g.head_dim, g.causal);
  const DecCase c = prefill_case("paged_prefill_" + paged_prefill_name(g), g.dtype, g.head_dim, g.page_size, capacity,
                                 g.group, g.seqlen_q, g.causal, g.append);
  const KvKernel route = g.page_size % key_tile == 0 ? KvKernel::kForward : KvKernel::kDecode;
  if (!route_built(c, route)) GTEST_SKIP() << "not built: " << build_instantiations();
  run_on_route(c, route);
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvCachePagedPrefillVsReference, ::testing::ValuesIn(paged_prefill_cases()),
                         [](const ::testing::TestParamInfo<PagedPrefillCase>& info) {
                           return paged_prefill_name(info.param);
                         });

// ---- sliding windows ------------------------------------------------------------------------------

struct WindowCase {
  const char* window_name;
  bool causal;
  Window window;
  int64_t page_size;  // 0: contiguous
  int64_t seqlen_q;
  bool append;
};

std::string window_case_name(const WindowCase& w) {
  return std::string(w.window_name) + (w.page_size ? "_paged" + std::to_string(w.page_size) : std::string("_contig")) +
         "_q" + std::to_string(w.seqlen_q) + (w.append ? "_append" : "");
}

std::vector<WindowCase> window_cases() {
  struct Named { const char* name; bool causal; Window w; };
  const Named windows[] = {
      {"left64", false, {64, -1}},             // left only
      {"left700", false, {700, -1}},           // left only, across several splits
      {"right3", false, {-1, 3}},              // right only (non-causal): rows before the keys see none
      {"both40_7", false, {40, 7}},            // both sides
      {"causal_left100", true, {100, -1}},     // causal with a left bound (right normalised to 0)
      {"causal_left0", true, {0, 0}},          // the diagonal only
      {"wider_than_cache", false, {5000, 5000}},
  };
  std::vector<WindowCase> v;
  for (const Named& n : windows)
    for (int64_t page : {0, 16, 64})
      for (int64_t sq : {1, 4, 17})
        for (bool append : {false, true}) v.push_back({n.name, n.causal, n.w, page, sq, append});
  return v;
}

class KvCacheWindowVsReference : public ::testing::TestWithParam<WindowCase> {};

// bf16, head_dim 128, GQA 8/2 (17 queries: 68 rows, three 32-row blocks, so blocks of one sequence
// start their keys at different window edges). Capacity 2048; sequences of 0, 1, 300, a full cache
// and 1500 keys (3 appended with `append`). The heuristic's split count first, then 5 forced splits
// (a 64-key window leaves most of them empty) and 1, each against the reference.
TEST_P(KvCacheWindowVsReference, MatchesGatheredFp64Reference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const WindowCase w = GetParam();
  DecCase c;
  c.name = "window_" + window_case_name(w);
  c.page_size = w.page_size;
  c.capacity = 2048;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seqlen_q = w.seqlen_q;
  c.causal = w.causal;
  c.window = w.window;
  c.seqlen_new = w.append ? 3 : 0;
  c.cached = w.append ? std::vector<int>{0, 1, 300, 2045, 1500} : std::vector<int>{0, 1, 300, 2048, 1500};
  c.num_splits = 0;
  DecRun x;
  run_and_check(x, c);
  if (::testing::Test::HasFatalFailure()) return;
  for (int splits : {5, 1}) {
    SCOPED_TRACE(c.name + " num_splits=" + std::to_string(splits));
    Problems p{c.name + " num_splits=" + std::to_string(splits)};
    const Outputs o = run(x, splits);
    check_cache(x, p);  // the repeated append writes the same rows again
    check_outputs(x, o, p);
  }
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvCacheWindowVsReference, ::testing::ValuesIn(window_cases()),
                         [](const ::testing::TestParamInfo<WindowCase>& info) { return window_case_name(info.param); });

// One option case of the tests below: shape, layout, window, softcap, split count (seqlen_new 2).
struct OptionVariant {
  const char* name; DType t; int d; int64_t page, hq, hkv, sq; bool causal; Window w; int64_t capacity;
  std::vector<int> cached; int splits; int64_t pad; bool lse; float cap;
};

DecCase option_case(const OptionVariant& v, const std::string& prefix) {
  DecCase c;
  c.name = prefix + v.name;
  c.dtype = v.t;
  c.head_dim = v.d;
  c.page_size = v.page;
  c.heads_q = v.hq;
  c.heads_kv = v.hkv;
  c.seqlen_q = v.sq;
  c.causal = v.causal;
  c.window = v.w;
  c.softcap = v.cap;
  c.capacity = v.capacity;
  c.cached = v.cached;
  c.seqlen_new = 2;
  c.num_splits = v.splits;
  c.row_pad = v.pad;
  c.with_lse = v.lse;
  return c;
}

// Windows over the other dtypes, head dims and GQA shapes (MQA, no GQA, a 16-query group), a long
// cache with a window much shorter than it (the split heuristic sizes for the window), and a
// window on a strided cache without lse.
TEST(Sm90KvCache, SlidingWindowOptions) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const OptionVariant variants[] = {
      {"fp16_d64_mqa_left33", DType::kFP16, 64, 0, 8, 1, 3, false, {33, -1}, 768, {700, 0, 65, 766}, 0, 0, true, 0.f},
      {"fp16_d256_both20_5", DType::kFP16, 256, 64, 4, 2, 2, false, {20, 5}, 768, {766, 1, 200}, 3, 0, true, 0.f},
      {"bf16_d64_nogqa_causal_left9", DType::kBF16, 64, 16, 4, 4, 17, true, {9, 0}, 768, {0, 766, 17}, 0, 0, true, 0.f},
      {"bf16_d256_group16_right1", DType::kBF16, 256, 0, 16, 1, 4, false, {-1, 1}, 768, {3, 766, 400}, 2, 0, true, 0.f},
      {"bf16_d128_long_left4095", DType::kBF16, 128, 256, 32, 8, 1, true, {4095, -1}, 65536, {65534, 30000}, 0, 0, true, 0.f},
      {"bf16_d128_long_left4095_forced16", DType::kBF16, 128, 0, 32, 8, 1, false, {4095, -1}, 65536, {65534, 5000}, 16, 0, true, 0.f},
      {"fp16_d128_strided_nolse_left50", DType::kFP16, 128, 48, 8, 2, 4, true, {50, -1}, 960, {958, 2, 500}, 0, 24, false, 0.f},
  };
  for (const OptionVariant& v : variants) {
    DecRun x;
    run_and_check(x, option_case(v, "window_"));
  }
}

// Softcap (Gemma 2's 50, and 2, where capping changes almost every weight) over dtypes, head dims,
// GQA shapes, paged and contiguous caches, an append, split counts, causal and a window, each
// against the fp64 reference with the same cap; and the cap visibly changes the result.
TEST(Sm90KvCache, Softcap) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::vector<int> cached = {700, 0, 65, 766};
  const OptionVariant variants[] = {
      {"bf16_d128_gqa4_cap50", DType::kBF16, 128, 0, 32, 8, 1, false, {}, 768, cached, 0, 0, true, 50.f},
      {"bf16_d128_paged64_cap2_splits5", DType::kBF16, 128, 64, 8, 2, 1, false, {}, 768, cached, 5, 0, true, 2.f},
      {"fp16_d64_paged16_causal_q4_cap2", DType::kFP16, 64, 16, 8, 2, 4, true, {}, 768, cached, 0, 0, true, 2.f},
      {"fp16_d256_mqa_q3_cap30", DType::kFP16, 256, 0, 4, 1, 3, false, {}, 768, cached, 1, 8, false, 30.f},
      {"bf16_d64_causal_left40_cap2", DType::kBF16, 64, 0, 8, 8, 17, true, {40, 0}, 768, cached, 3, 0, true, 2.f},
  };
  for (const OptionVariant& v : variants) {
    DecRun x;
    const Outputs capped = run_and_check(x, option_case(v, "softcap_"));
    if (v.cap <= 2.f) {  // q entries of +-3 give scores far past 2: the cap must show in the output
      x.args.softcap = 0.f;  // the same problem (appending the same rows again writes the same bytes)
      const Outputs plain = run(x, v.splits);
      EXPECT_FALSE(plain.out == capped.out) << v.name << ": softcap did not change the output";
    }
  }
}

// The route's options: windows (each side, both, causal with a left bound), softcap, no lse, a long
// cache with a long chunk, contiguous and paged with pages of whole key tiles; the forced forward
// kernel at a decode's few rows; and the cases that keep the decode kernel at many rows (pages
// smaller than the key tile, even when forced; a split request; the forced decode kernel), all on
// NaN tails.
TEST(Sm90KvCache, ChunkedPrefillOptionsAndRoutes) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  struct Variant {
    const char* forced; KvKernel route; int64_t seqlen_new; OptionVariant v;
  };
  const std::vector<int> cached = {700, 0, 65, 766, 129};
  const KvKernel fwd = KvKernel::kForward, dec = KvKernel::kDecode;
  const Variant variants[] = {
      {nullptr, fwd, 2, {"left100_causal", DType::kBF16, 128, 0, 8, 2, 128, true, {100, -1}, 768, cached, 0, 0, true, 0.f}},
      {nullptr, fwd, 2, {"right3", DType::kFP16, 64, 0, 8, 2, 100, false, {-1, 3}, 768, cached, 0, 0, true, 0.f}},
      {nullptr, fwd, 0, {"both40_7", DType::kBF16, 256, 0, 4, 1, 77, false, {40, 7}, 768, cached, 0, 0, true, 0.f}},
      {nullptr, fwd, 2, {"softcap2_causal", DType::kBF16, 64, 0, 8, 8, 200, true, {}, 768, cached, 0, 0, true, 2.f}},
      {nullptr, fwd, 0, {"softcap30_left50", DType::kFP16, 128, 0, 8, 2, 64, true, {50, -1}, 768, cached, 0, 0, true, 30.f}},
      {nullptr, fwd, 2, {"no_lse_strided_rows", DType::kFP16, 128, 0, 8, 2, 96, true, {}, 768, cached, 0, 8, false, 0.f}},
      {nullptr, fwd, 100, {"long_chunk", DType::kBF16, 128, 0, 32, 8, 1000, true, {}, 8192, {7000, 3000}, 0, 0, true, 0.f}},
      {"forward", fwd, 2, {"forced_forward_q1", DType::kBF16, 128, 0, 8, 2, 1, false, {}, 768, cached, 0, 0, true, 0.f}},
      {"forward", fwd, 0, {"forced_forward_q17", DType::kFP16, 256, 0, 16, 2, 17, true, {}, 768, cached, 0, 0, true, 0.f}},
      {nullptr, fwd, 2, {"paged128_left100_causal", DType::kBF16, 128, 128, 8, 2, 128, true, {100, -1}, 768, cached, 0, 0, true, 0.f}},
      {nullptr, fwd, 0, {"paged256_softcap30", DType::kFP16, 64, 256, 8, 2, 64, false, {}, 768, cached, 0, 0, true, 30.f}},
      {nullptr, fwd, 2, {"paged128_no_lse_strided_rows", DType::kFP16, 128, 128, 8, 2, 96, true, {}, 768, cached, 0, 8, false, 0.f}},
      {nullptr, fwd, 100, {"paged256_long_chunk", DType::kBF16, 128, 256, 32, 8, 1000, true, {}, 8192, {7000, 3000}, 0, 0, true, 0.f}},
      {nullptr, dec, 2, {"paged64", DType::kBF16, 128, 64, 8, 2, 128, true, {}, 768, cached, 0, 0, true, 0.f}},
      {"forward", dec, 2, {"forced_forward_paged64", DType::kBF16, 128, 64, 8, 2, 128, true, {}, 768, cached, 0, 0, true, 0.f}},
      {nullptr, dec, 0, {"split_request", DType::kBF16, 64, 0, 8, 2, 128, false, {}, 768, cached, 3, 0, true, 0.f}},
      {"decode", dec, 2, {"forced_decode", DType::kFP16, 128, 0, 8, 2, 300, true, {}, 768, cached, 0, 0, true, 0.f}},
  };
  int ran = 0;
  for (const Variant& v : variants) {
    const KvKernelOverride env{v.forced};
    DecCase c = option_case(v.v, "prefill_");
    c.seqlen_new = v.seqlen_new;
    c.nan_tail = true;
    if (!route_built(c, v.route)) continue;  // this variant's kernel is not in a restricted build
    run_on_route(c, v.route);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "not built: " << build_instantiations();
  if (ran < static_cast<int>(std::size(variants)))
    std::printf("[ NOTE     ] %d of %zu variants ran; the others' kernels are not built (%s)\n", ran, std::size(variants),
                build_instantiations());
}

// A window gives bitwise identical results run to run, with and without splits.
TEST(Sm90KvCache, SlidingWindowRepeatRunsAreBitwiseIdentical) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (int splits : {0, 1, 7}) {
    DecCase c;
    c.name = "window_determinism_splits" + std::to_string(splits);
    c.page_size = 16;
    c.capacity = 2048;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.seqlen_q = 4;
    c.causal = true;
    c.window = {300, -1};
    c.seqlen_new = 1;
    c.num_splits = splits;
    c.cached = {2047, 5, 1000, 0};
    DecRun x;
    const Outputs first = run_and_check(x, c);
    for (int rep = 0; rep < 2; ++rep) {
      const Outputs again = run(x, splits);
      EXPECT_TRUE(again.out == first.out) << c.name << ": out differs on run " << rep + 2;
      EXPECT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << c.name << ": lse differs";
    }
  }
}

// ---- splits, determinism, long caches, offsets, layouts -------------------------------------------

// Every split count gives the reference's result, and one split's to the dtype's precision:
// relative L2 <= 2 eps on out (P's rounding depends on the split), 1e-5 relative on lse.
TEST(Sm90KvCache, SplitCountsAgree) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (int64_t page : {0, 64})
    for (int64_t sq : {1, 7}) {
      DecCase c;
      c.name = std::string("splits_") + (page ? "paged64" : "contig") + "_q" + std::to_string(sq);
      c.page_size = page;
      c.capacity = 4096;  // 64 key steps: up to 64 splits
      c.heads_q = 8;
      c.heads_kv = 2;
      c.seqlen_q = sq;
      c.causal = sq > 1;
      c.seqlen_new = 2;
      c.cached = {0, 1, 100, 4094, 2500, 63};
      DecRun x;
      const Outputs one = run_and_check(x, c);
      for (int splits : {2, 3, 5, 8, 16, 33, 64, 0}) {
        SCOPED_TRACE(c.name + " num_splits=" + std::to_string(splits));
        Problems p{c.name + " num_splits=" + std::to_string(splits)};
        const Outputs o = run(x, splits);
        check_cache(x, p);  // the repeated append writes the same rows again
        check_outputs(x, o, p);
        const std::vector<float> a = decode(o.out.data(), o.out.size(), c.dtype), b = decode(one.out.data(), one.out.size(), c.dtype);
        // P is rounded to the 16-bit dtype relative to each split's running max, so splits change
        // which products round which way: out agrees to the dtype's precision (relative L2 within
        // a few epsilons), not bitwise; lse is combined in fp32 and agrees to fp32 rounding.
        double diff2 = 0, ref2 = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          if (!std::isfinite(a[i])) { diff2 = INFINITY; break; }
          diff2 += double(a[i] - b[i]) * double(a[i] - b[i]);
          ref2 += double(b[i]) * double(b[i]);
        }
        const double rel = std::sqrt(diff2 / std::max(ref2, 1e-30));
        const double eps = c.dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
        int64_t far_lse = 0;
        for (size_t i = 0; i < o.lse.size(); ++i)
          far_lse += !(o.lse[i] == one.lse[i] || std::fabs(o.lse[i] - one.lse[i]) <= 1e-5f * std::max(1.f, std::fabs(one.lse[i])));
        if (!(rel <= 2 * eps)) p.add("out differs from num_splits=1 by relative L2 " + std::to_string(rel) + " > 2 eps");
        if (far_lse) p.add(std::to_string(far_lse) + " lse entries differ from num_splits=1 beyond fp32 rounding");
      }
    }
}

TEST(Sm90KvCache, RepeatRunsAreBitwiseIdentical) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (int splits : {0, 1, 16}) {
    DecCase c;
    c.name = "determinism_splits" + std::to_string(splits);
    c.page_size = 16;
    c.capacity = 2048;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.seqlen_q = 2;
    c.causal = true;
    c.seqlen_new = 1;
    c.num_splits = splits;
    c.cached = {2047, 5, 1000, 0};
    DecRun x;
    const Outputs first = run_and_check(x, c);
    for (int rep = 0; rep < 3; ++rep) {
      const Outputs again = run(x, splits);
      EXPECT_TRUE(again.out == first.out) << c.name << ": out differs on run " << rep + 2;
      EXPECT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << c.name << ": lse differs";
    }
  }
}

// Long caches: many splits of many keys (the heuristic's 128-split cap with one sequence), GQA 4.
TEST(Sm90KvCache, LongCache) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (int64_t page : {0, 256}) {
    DecCase c;
    c.name = std::string("long_") + (page ? "paged256" : "contig");
    c.page_size = page;
    c.capacity = 65536;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.cached = {65535, 40000};
    c.seqlen_new = 1;
    DecRun x;
    run_and_check(x, c);
  }
}

// Element offsets past 2^31: a contiguous cache whose second sequence starts 2^31 + elements in,
// and a paged cache whose page ids times the page stride pass 2^31 (8.6 GB of cache in all).
TEST(Sm90KvCache, SixtyFourBitOffsets) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const int64_t past = (int64_t{1} << 31) + 4096;
  {
    DecCase c;
    c.name = "offsets64_contig";
    c.capacity = 1024;
    c.cached = {1000, 700};
    c.seqlen_new = 3;
    c.seqlen_q = 2;
    c.causal = true;
    c.min_block_stride = past;
    DecRun x;
    run_and_check(x, c);
  }
  {
    DecCase c;
    c.name = "offsets64_paged";
    c.page_size = 64;
    c.capacity = 1024;
    c.cached = {1000, 700, 3};
    c.seqlen_new = 3;
    c.first_page = past / (64 * 2 * 128) + 1;  // 64 rows x 2 heads x 128 dims per page
    DecRun x;
    run_and_check(x, c);
  }
}

// Strided cache rows, no lse, MQA, an odd page size, head dims 64/256 with splits.
TEST(Sm90KvCache, LayoutsAndOptions) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  struct Variant { const char* name; int d; int64_t page, hq, hkv, sq, pad; bool lse; int splits; };
  const Variant variants[] = {
      {"strided_rows_contig", 128, 0, 8, 2, 1, 8, true, 0},  {"strided_rows_paged48", 128, 48, 8, 2, 3, 24, true, 0},
      {"mqa_no_lse", 128, 16, 16, 1, 4, 0, false, 5},        {"d64_many_rows", 64, 64, 32, 1, 2, 0, true, 7},
      {"d256_many_rows", 256, 64, 32, 2, 3, 0, true, 7},     {"page1", 64, 1, 4, 2, 1, 0, true, 0},
  };
  for (DType t : {DType::kBF16, DType::kFP16})
    for (const Variant& v : variants) {
      DecCase c;
      c.name = std::string(v.name) + "_" + dtype_name(t);
      c.dtype = t;
      c.head_dim = v.d;
      c.page_size = v.page;
      c.capacity = v.page == 48 ? 960 : 768;
      c.heads_q = v.hq;
      c.heads_kv = v.hkv;
      c.seqlen_q = v.sq;
      c.causal = v.sq > 1;
      c.row_pad = v.pad;
      c.with_lse = v.lse;
      c.num_splits = v.splits;
      c.seqlen_new = 2;
      c.cached = {5, 0, static_cast<int>(c.capacity) - 2, 129};
      DecRun x;
      run_and_check(x, c);
    }
}

// check_index_values reports bad values by name; without it the same values must not fault
// (lengths and pages clamp, appends past the capacity are dropped) and every row is still written.
TEST(Sm90KvCache, IndexValueChecksAndClamping) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  struct Bad { const char* name; int64_t page; std::function<void(DecRun&)> corrupt; const char* message; };
  const Bad cases[] = {
      {"negative_len", 0, [](DecRun& x) { x.seqlens[1] = -7; }, "cache_seqlens[1]=-7 is negative"},
      {"len_past_capacity", 0, [](DecRun& x) { x.seqlens[0] = 767; }, "cache_seqlens[0]=767 plus seqlen_new=2"},
      {"paged_len_past_capacity", 128, [](DecRun& x) { x.seqlens[2] = 100000; }, "cache_seqlens[2]=100000"},
      {"page_out_of_range", 128, [](DecRun& x) { x.page_table[3] = 1 << 30; }, "page_table[0][3]=1073741824 is outside"},
      {"negative_page", 128, [](DecRun& x) { x.page_table[12] = -1; }, "page_table[2][0]=-1 is outside"},
  };
  // seqlen_q 2 decodes; 2 * kKvForwardMinSeqlenQ takes the forward kernel, where the key counts
  // are clamped to [0, capacity] by launch_key_counts and the kernel, and a page outside the cache
  // is outside the TMA view (zeros are read). The paged cases are causal with 128-token pages, so
  // that their key tiles (128) fit the pages and the forward kernel runs them.
  for (const Bad& bad : cases)
  for (const int64_t sq : {int64_t{2}, 2 * kKvForwardMinSeqlenQ}) {
    SCOPED_TRACE(std::string(bad.name) + " seqlen_q " + std::to_string(sq));
    DecCase c;
    c.name = std::string("bad_") + bad.name + "_q" + std::to_string(sq);
    c.page_size = bad.page;
    c.causal = bad.page > 0;
    c.capacity = 768;
    c.cached = {700, 300, 5};
    c.seqlen_new = 2;
    c.seqlen_q = sq;
    DecRun x;
    setup(x, c);
    const KvKernel route = route_of(x);
    EXPECT_EQ(route, sq > 2 ? KvKernel::kForward : KvKernel::kDecode);
    if (!route_built(c, route)) continue;  // a restricted build without the d128 forward kernel
    bad.corrupt(x);
    x.seqlens_dev.upload(x.seqlens);
    if (c.page_size) x.page_table_dev.upload(x.page_table);
    x.args.check_index_values = true;
    DeviceBuffer ws(attention_with_kvcache_workspace_size(x.args));
    Result r = attention_with_kvcache(x.args, ws.get(), ws.bytes());
    EXPECT_EQ(r.status, Status::kInvalidArgument);
    EXPECT_NE(r.message.find(bad.message), std::string::npos) << r.message;
    // Unchecked: runs to completion, no fault, no NaN in out.
    x.args.check_index_values = false;
    x.out.fill(0xFF);
    r = attention_with_kvcache(x.args, ws.get(), ws.bytes());
    EXPECT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the unchecked call faulted";
    std::vector<uint16_t> out(x.q_host.size());
    x.out.download(out.data(), out.size() * 2);
    int64_t unwritten = 0;
    for (uint16_t h : out) unwritten += is_nan_bits(h, c.dtype);
    EXPECT_EQ(unwritten, 0);
  }
}

TEST(Sm90KvCache, WorkspaceAndEmptyProblems) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  DecCase c;
  c.name = "workspace";
  c.cached = {700, 300};
  c.num_splits = 4;
  DecRun x;
  setup(x, c);
  const size_t need = attention_with_kvcache_workspace_size(x.args);
  EXPECT_GT(need, 0u);
  Result r = attention_with_kvcache(x.args, nullptr, 0);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("workspace is null"), std::string::npos) << r.message;
  DeviceBuffer ws(need + 256);
  r = attention_with_kvcache(x.args, static_cast<uint8_t*>(ws.get()) + 16, need);
  EXPECT_NE(r.message.find("workspace is not 256-byte aligned"), std::string::npos) << r.message;
  r = attention_with_kvcache(x.args, ws.get(), need - 1);
  EXPECT_NE(r.message.find("workspace_bytes="), std::string::npos) << r.message;
  x.args.num_splits = 1;
  EXPECT_EQ(attention_with_kvcache_workspace_size(x.args), 0u);
  EXPECT_TRUE(attention_with_kvcache(x.args, nullptr, 0).ok());
  // No query rows: only the append runs.
  DecCase e = c;
  e.name = "no_queries";
  e.seqlen_q = 0;
  e.seqlen_new = 4;
  DecRun y;
  setup(y, e);
  EXPECT_TRUE(attention_with_kvcache(y.args, nullptr, 0).ok());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  Problems p{e.name};
  check_cache(y, p);
}

}  // namespace
}  // namespace hopattn::test
