// KV-cache decoding on the CPU: attention_with_kvcache_cpu against forward_cpu on each sequence's
// keys gathered by hand (bitwise: the same reference code), the in-place append (appended rows
// equal k_new/v_new, every other cache byte untouched), rows that see no key, sliding windows
// (also against a masked softmax written here from the window formula); one test per rule of
// validate_kvcache and of the index-value checks; the split planning (heuristic, clamps, workspace
// layout, the window's key bound); and the C ABI entry points (the struct layout too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../common/c_abi_util.hpp"
#include "../common/test_util.hpp"
#include "api/kvcache_problem.hpp"
#include "api/kvcache_route.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"
#include "sm90/decode/plan.hpp"

namespace hopattn::test {
namespace {

TensorRef int_tensor(std::vector<int32_t>& v, int64_t rows, int64_t cols = -1) {
  TensorRef t;
  t.data = v.data();
  t.dtype = DType::kInt32;
  if (cols < 0) {
    t.ndim = 1;
    t.sizes[0] = rows;
    t.strides[0] = 1;
  } else {
    t.ndim = 2;
    t.sizes[0] = rows;
    t.sizes[1] = cols;
    t.strides[0] = cols;
    t.strides[1] = 1;
  }
  return t;
}

// ---- (a) the reference against forward_cpu on hand-gathered keys --------------------------------

struct KvCase {
  std::vector<int> cached;  // cache_seqlens
  int64_t seqlen_q = 1, seqlen_new = 0, heads_q = 4, heads_kv = 2, head_dim = 16;
  int64_t capacity = 40;  // contiguous: max_seqlen_k; paged: max_pages * page_size (a multiple of it)
  int64_t page_size = 0;  // 0: contiguous
  int64_t extra_pages = 3;  // pages no sequence uses (must stay untouched)
  int64_t row_pad = 0;      // extra elements per cache row (a strided cache)
  DType dtype = DType::kFP32;
  bool causal = false;
  bool with_lse = true;
  Window window;  // default: none
  float softcap = 0.f;
};

std::string describe(const KvCase& c) {
  return std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : " full") + " window=(" +
         std::to_string(c.window.left) + "," + std::to_string(c.window.right) + ") sq=" + std::to_string(c.seqlen_q) +
         " new=" + std::to_string(c.seqlen_new) + " h=" + std::to_string(c.heads_q) + "/" + std::to_string(c.heads_kv) +
         (c.page_size ? " page=" + std::to_string(c.page_size) : " contiguous") + " pad=" + std::to_string(c.row_pad) +
         " softcap=" + std::to_string(c.softcap);
}

struct KvHost {
  KvCase c;
  int64_t batch = 0, es = 4, row = 0;  // row: elements per cache token row (heads_kv * d + pad)
  int64_t num_pages = 0, max_pages = 0;
  std::vector<uint8_t> q, k_cache, v_cache, k_new, v_new, out;
  std::vector<float> lse;
  std::vector<int32_t> seqlens, page_table;
  KvCacheArgs args;

  // Element offset of token `pos` of sequence b, kv head h (the address rule, written independently).
  int64_t token(int64_t b, int64_t h, int64_t pos) const {
    const int64_t block = c.page_size ? page_table[static_cast<size_t>(b * max_pages + pos / c.page_size)] : b;
    const int64_t rows_per_block = c.page_size ? c.page_size : c.capacity;
    const int64_t r = c.page_size ? pos % c.page_size : pos;
    return (block * rows_per_block + r) * row + h * c.head_dim;
  }
};

void setup(KvHost& x, const KvCase& c, uint64_t seed) {
  x.c = c;
  x.batch = static_cast<int64_t>(c.cached.size());
  x.es = static_cast<int64_t>(dtype_size(c.dtype));
  x.row = c.heads_kv * c.head_dim + c.row_pad;
  const int64_t b = x.batch, sq = c.seqlen_q, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  int64_t cache_rows = b * c.capacity;
  if (c.page_size) {
    x.max_pages = c.capacity / c.page_size;
    x.num_pages = b * x.max_pages + c.extra_pages;
    cache_rows = x.num_pages * c.page_size;
    std::vector<int32_t> perm(static_cast<size_t>(x.num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed + 7));
    x.page_table.assign(perm.begin(), perm.begin() + b * x.max_pages);
  }
  x.seqlens.assign(c.cached.begin(), c.cached.end());
  x.q = encode(random_values(static_cast<size_t>(b * sq * hq * d), seed, c.dtype, -2.f, 2.f), c.dtype);
  x.k_cache = encode(random_values(static_cast<size_t>(cache_rows * x.row), seed + 1, c.dtype), c.dtype);
  x.v_cache = encode(random_values(static_cast<size_t>(cache_rows * x.row), seed + 2, c.dtype), c.dtype);
  x.k_new = encode(random_values(static_cast<size_t>(b * c.seqlen_new * hkv * d), seed + 3, c.dtype), c.dtype);
  x.v_new = encode(random_values(static_cast<size_t>(b * c.seqlen_new * hkv * d), seed + 4, c.dtype), c.dtype);
  x.out.assign(x.q.size(), 0xFF);  // NaN
  x.lse.assign(static_cast<size_t>(b * hq * sq), std::nanf(""));

  KvCacheArgs& a = x.args;
  a = KvCacheArgs{};
  a.q = make_tensor(x.q.data(), c.dtype, b, sq, hq, d);
  const int64_t blocks = c.page_size ? x.num_pages : b, block_rows = c.page_size ? c.page_size : c.capacity;
  for (auto [t, data] : {std::pair{&a.k_cache, &x.k_cache}, std::pair{&a.v_cache, &x.v_cache}}) {
    *t = make_tensor(data->data(), c.dtype, blocks, block_rows, hkv, d);
    t->strides[1] = x.row;
    t->strides[0] = block_rows * x.row;
  }
  a.cache_seqlens = int_tensor(x.seqlens, b);
  if (c.page_size) a.page_table = int_tensor(x.page_table, b, x.max_pages);
  if (c.seqlen_new > 0) {
    a.k_new = make_tensor(x.k_new.data(), c.dtype, b, c.seqlen_new, hkv, d);
    a.v_new = make_tensor(x.v_new.data(), c.dtype, b, c.seqlen_new, hkv, d);
  }
  a.out = make_tensor(x.out.data(), c.dtype, b, sq, hq, d);
  if (c.with_lse) a.lse = make_tensor(x.lse.data(), DType::kFP32, b, hq, sq);
  a.causal = c.causal;
  a.window = c.window;
  a.softcap = c.softcap;
}

// Runs attention_with_kvcache_cpu on `c`, then checks: the cache (appended rows are k_new/v_new,
// every other byte as before), and out/lse of each sequence bitwise against forward_cpu on the
// sequence's keys gathered from the expected cache.
void check_against_gathered(const KvCase& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  KvHost x;
  setup(x, c, seed);
  std::vector<uint8_t> k_expect = x.k_cache, v_expect = x.v_cache;
  const int64_t es = x.es, d = c.head_dim, hkv = c.heads_kv, hq = c.heads_q, sq = c.seqlen_q;
  for (int64_t b = 0; b < x.batch; ++b)
    for (int64_t t = 0; t < c.seqlen_new; ++t)
      for (int64_t h = 0; h < hkv; ++h) {
        const size_t dst = static_cast<size_t>(x.token(b, h, x.seqlens[b] + t) * es);
        const size_t src = static_cast<size_t>(((b * c.seqlen_new + t) * hkv + h) * d * es);
        std::memcpy(&k_expect[dst], &x.k_new[src], static_cast<size_t>(d * es));
        std::memcpy(&v_expect[dst], &x.v_new[src], static_cast<size_t>(d * es));
      }

  const Result r = attention_with_kvcache_cpu(x.args);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(x.k_cache == k_expect) << "k_cache differs from the expected append";
  EXPECT_TRUE(x.v_cache == v_expect) << "v_cache differs from the expected append";

  for (int64_t b = 0; b < x.batch; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const int64_t len_k = x.seqlens[b] + c.seqlen_new;
    std::vector<uint8_t> k1(static_cast<size_t>(len_k * hkv * d * es)), v1(k1.size());
    for (int64_t j = 0; j < len_k; ++j)
      for (int64_t h = 0; h < hkv; ++h) {
        const size_t dst = static_cast<size_t>((j * hkv + h) * d * es), src = static_cast<size_t>(x.token(b, h, j) * es);
        std::memcpy(&k1[dst], &k_expect[src], static_cast<size_t>(d * es));
        std::memcpy(&v1[dst], &v_expect[src], static_cast<size_t>(d * es));
      }
    const size_t q_bytes = static_cast<size_t>(sq * hq * d * es);
    std::vector<uint8_t> out1(q_bytes, 0xFF);
    std::vector<float> lse1(static_cast<size_t>(hq * sq), 0.f);
    ForwardArgs f;
    f.q = make_tensor(x.q.data() + static_cast<size_t>(b) * q_bytes, c.dtype, 1, sq, hq, d);
    f.k = make_tensor(k1.data(), c.dtype, 1, len_k, hkv, d);
    f.v = make_tensor(v1.data(), c.dtype, 1, len_k, hkv, d);
    f.out = make_tensor(out1.data(), c.dtype, 1, sq, hq, d);
    f.lse = make_tensor(lse1.data(), DType::kFP32, 1, hq, sq);
    f.causal = c.causal;
    f.window = c.window;
    f.softcap = c.softcap;
    const Result fr = forward_cpu(f);
    ASSERT_TRUE(fr.ok()) << fr.message;
    if (q_bytes == 0) continue;
    EXPECT_EQ(0, std::memcmp(out1.data(), x.out.data() + static_cast<size_t>(b) * q_bytes, q_bytes)) << "out differs";
    if (c.with_lse)
      EXPECT_EQ(0, std::memcmp(lse1.data(), x.lse.data() + b * hq * sq, lse1.size() * 4)) << "lse differs";
  }
}

TEST(KvCacheCpu, MatchesForwardOnGatheredKeys) {
  uint64_t seed = 1;
  for (DType t : {DType::kFP32, DType::kBF16, DType::kFP16})
    for (int64_t page : {int64_t{0}, int64_t{1}, int64_t{4}, int64_t{16}})
      for (int64_t sq : {1, 3})
        for (bool causal : {false, true})
          for (int64_t seqlen_new : {0, 2}) {
            KvCase c;
            c.dtype = t;
            c.page_size = page;
            c.capacity = 48;
            c.seqlen_q = sq;
            c.causal = causal;
            c.seqlen_new = seqlen_new;
            c.cached = {0, 1, 17, 46 - static_cast<int>(seqlen_new), 5};  // the longest fills the cache
            check_against_gathered(c, seed++);
          }
}

TEST(KvCacheCpu, GqaGroupsStridedCacheAndNoLse) {
  uint64_t seed = 100;
  for (const auto& [hq, hkv] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {8, 1}})
    for (int64_t page : {int64_t{0}, int64_t{8}}) {
      KvCase c;
      c.heads_q = hq;
      c.heads_kv = hkv;
      c.page_size = page;
      c.capacity = 32;
      c.row_pad = 8;
      c.seqlen_q = 2;
      c.seqlen_new = 3;
      c.causal = true;
      c.with_lse = hq != 8 || hkv != 1;
      c.cached = {3, 0, 29};
      check_against_gathered(c, seed++);
    }
}

TEST(KvCacheCpu, RowsThatSeeNoKey) {
  // No keys at all (cache_seqlens 0, nothing appended), and causal rows before the first key
  // (seqlen_q 4 > len_k 2): out 0, lse -inf.
  KvCase c;
  c.cached = {0, 2};
  c.seqlen_q = 4;
  c.causal = true;
  KvHost x;
  setup(x, c, 9);
  ASSERT_TRUE(attention_with_kvcache_cpu(x.args).ok());
  const std::vector<float> out = decode(x.out.data(), x.out.size() / 4, DType::kFP32);
  const int64_t hq = c.heads_q, sq = c.seqlen_q, d = c.head_dim;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const bool sees = b == 1 && i >= 2;  // key j <= i + 2 - 4
        const float l = x.lse[static_cast<size_t>((b * hq + h) * sq + i)];
        EXPECT_EQ(std::isinf(l) && l < 0, !sees) << "b=" << b << " i=" << i << " h=" << h;
        for (int64_t e = 0; e < d; ++e) {
          const float v = out[static_cast<size_t>(((b * sq + i) * hq + h) * d + e)];
          if (!sees) EXPECT_EQ(v, 0.f);
          else EXPECT_TRUE(std::isfinite(v));
        }
      }
}

TEST(KvCacheCpu, EmptyQueriesStillAppend) {
  KvCase c;
  c.cached = {1, 4};
  c.seqlen_q = 0;
  c.seqlen_new = 2;
  check_against_gathered(c, 77);
}

// The windows of the GPU tests (and their edge cases) through the gathered-keys comparison: the KV
// path hands forward_cpu the window with sk = len_k(b).
struct NamedWindow {
  const char* name;
  bool causal;
  Window w;
};
const NamedWindow kWindows[] = {
    {"left5", false, {5, -1}},          {"right2", false, {-1, 2}},    {"both6_1", false, {6, 1}},
    {"causal_left3", true, {3, -1}},    {"causal_left0", true, {0, 0}}, {"left0_right0", false, {0, 0}},
    {"wider_than_cache", false, {100, 100}}, {"causal_right_unbounded", true, {-1, -1}},
};

TEST(KvCacheCpu, SlidingWindowsMatchForwardOnGatheredKeys) {
  uint64_t seed = 500;
  for (const NamedWindow& nw : kWindows)
    for (int64_t page : {int64_t{0}, int64_t{4}})
      for (int64_t sq : {1, 4})
        for (int64_t seqlen_new : {0, 2}) {
          SCOPED_TRACE(nw.name);
          KvCase c;
          c.page_size = page;
          c.capacity = 48;
          c.seqlen_q = sq;
          c.causal = nw.causal;
          c.window = nw.w;
          c.seqlen_new = seqlen_new;
          c.cached = {0, 1, 17, 46 - static_cast<int>(seqlen_new), 3};
          check_against_gathered(c, seed++);
        }
}

// The reference's windows against a masked softmax written here from the formula: query i of
// sequence b (len_k keys after the append) sees key j iff 0 <= j < len_k,
// j >= i + len_k - sq - left (left >= 0) and j <= i + len_k - sq + right (right >= 0, causal: 0).
// fp32 data, double arithmetic: out and lse agree to fp32 rounding.
void check_window_formula(const KvCase& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  KvHost x;
  setup(x, c, seed);
  const Result r = attention_with_kvcache_cpu(x.args);  // appends in place: x's cache is then the expected one
  ASSERT_TRUE(r.ok()) << r.message;
  const int64_t hq = c.heads_q, hkv = c.heads_kv, sq = c.seqlen_q, d = c.head_dim, group = hq / hkv;
  const int64_t right = c.causal ? 0 : c.window.right;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const float* q = reinterpret_cast<const float*>(x.q.data());
  const float* kc = reinterpret_cast<const float*>(x.k_cache.data());
  const float* vc = reinterpret_cast<const float*>(x.v_cache.data());
  const float* out = reinterpret_cast<const float*>(x.out.data());
  int64_t rows_without_keys = 0, rows_with_keys = 0;
  for (int64_t b = 0; b < x.batch; ++b) {
    const int64_t len_k = x.seqlens[static_cast<size_t>(b)] + c.seqlen_new;
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const std::string where = "b=" + std::to_string(b) + " i=" + std::to_string(i) + " h=" + std::to_string(h);
        std::vector<double> w(static_cast<size_t>(len_k), 0.0);
        double mx = -INFINITY;
        std::vector<bool> seen(static_cast<size_t>(len_k), false);
        for (int64_t j = 0; j < len_k; ++j) {
          if (c.window.left >= 0 && j < i + len_k - sq - c.window.left) continue;
          if (right >= 0 && j > i + len_k - sq + right) continue;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += double(q[((b * sq + i) * hq + h) * d + e]) * double(kc[x.token(b, h / group, j) + e]);
          w[static_cast<size_t>(j)] = dot * scale;
          seen[static_cast<size_t>(j)] = true;
          mx = std::max(mx, dot * scale);
        }
        const float* o = out + ((b * sq + i) * hq + h) * d;
        const float l = x.lse[static_cast<size_t>((b * hq + h) * sq + i)];
        if (mx == -INFINITY) {  // no key in the window
          ++rows_without_keys;
          EXPECT_TRUE(std::isinf(l) && l < 0) << where << " lse " << l;
          for (int64_t e = 0; e < d; ++e) EXPECT_EQ(o[e], 0.f) << where;
          continue;
        }
        ++rows_with_keys;
        double sum = 0;
        std::vector<double> acc(static_cast<size_t>(d), 0.0);
        for (int64_t j = 0; j < len_k; ++j) {
          if (!seen[static_cast<size_t>(j)]) continue;
          const double p = std::exp(w[static_cast<size_t>(j)] - mx);
          sum += p;
          for (int64_t e = 0; e < d; ++e) acc[static_cast<size_t>(e)] += p * double(vc[x.token(b, h / group, j) + e]);
        }
        EXPECT_NEAR(l, mx + std::log(sum), 1e-5 * std::max(1.0, std::fabs(mx + std::log(sum)))) << where;
        for (int64_t e = 0; e < d; ++e) EXPECT_NEAR(o[e], acc[static_cast<size_t>(e)] / sum, 2e-6) << where << " e=" << e;
      }
  }
  EXPECT_GT(rows_with_keys, 0);
  (void)rows_without_keys;
}

TEST(KvCacheCpu, SlidingWindowsMatchTheFormula) {
  uint64_t seed = 900;
  for (const NamedWindow& nw : kWindows)
    for (int64_t page : {int64_t{0}, int64_t{1}, int64_t{8}})
      for (int64_t sq : {1, 5})
        for (int64_t seqlen_new : {0, 3}) {
          SCOPED_TRACE(nw.name);
          KvCase c;
          c.heads_q = 4;
          c.heads_kv = 2;
          c.page_size = page;
          c.capacity = 40;
          c.seqlen_q = sq;
          c.causal = nw.causal;
          c.window = nw.w;
          c.seqlen_new = seqlen_new;
          // 0 and 1 cached keys (rows without a key in the window when sq > len_k), a full cache.
          c.cached = {0, 1, 19, 40 - static_cast<int>(seqlen_new)};
          check_window_formula(c, seed++);
        }
}

TEST(KvCacheCpu, WindowRowsThatSeeNoKey) {
  // Window (0, 1), 4 queries against 2 keys: query i sees keys i - 2 <= j <= i - 1, so row 0 none
  // (out 0, lse -inf) and rows 1..3 one or two.
  KvCase c;
  c.cached = {2};
  c.seqlen_q = 4;
  c.window = {0, 1};
  KvHost x;
  setup(x, c, 11);
  ASSERT_TRUE(attention_with_kvcache_cpu(x.args).ok());
  const int64_t hq = c.heads_q, sq = c.seqlen_q;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t h = 0; h < hq; ++h) {
      // Keys [max(0, i - 2), min(1, i - 1)]: none for i = 0, {0} for i = 1, {0, 1} for 2, {1} for 3.
      const bool sees = i >= 1;
      const float l = x.lse[static_cast<size_t>(h * sq + i)];
      EXPECT_EQ(std::isinf(l) && l < 0, !sees) << "i=" << i << " h=" << h;
    }
}

// ---- (b) validation rules ------------------------------------------------------------------------

alignas(256) unsigned char g_fake_memory[1024];  // validation never reads the attention data

// Real index arrays (the CPU path reads them) around fake tensors. Batch 3, seqlen_q 2, heads 4/2,
// head_dim 16; a paged cache of 10 pages of 8 tokens, 3 pages per sequence (capacity 24); 2 new
// tokens; cache_seqlens {5, 0, 22}.
struct ValidArgs {
  std::vector<int32_t> seqlens = {5, 0, 22};
  std::vector<int32_t> pages = {0, 1, 2, 3, -1, -1, 6, 7, 8};  // sequence 1 uses 1 page: -1 unread
  KvCacheArgs a;
  ValidArgs() {
    a.q = make_tensor(g_fake_memory, DType::kBF16, 3, 2, 4, 16);
    a.out = make_tensor(g_fake_memory, DType::kBF16, 3, 2, 4, 16);
    a.k_cache = make_tensor(g_fake_memory, DType::kBF16, 10, 8, 2, 16);
    a.v_cache = make_tensor(g_fake_memory, DType::kBF16, 10, 8, 2, 16);
    a.k_new = make_tensor(g_fake_memory, DType::kBF16, 3, 2, 2, 16);
    a.v_new = make_tensor(g_fake_memory, DType::kBF16, 3, 2, 2, 16);
    a.cache_seqlens = int_tensor(seqlens, 3);
    a.page_table = int_tensor(pages, 3, 3);
    a.lse = make_tensor(g_fake_memory, DType::kFP32, 3, 4, 2);
  }
  ValidArgs(const ValidArgs&) = delete;
  // The same call with a contiguous (3, 24, 2, 16) cache.
  void make_contiguous() {
    a.page_table = TensorRef{};
    a.k_cache = make_tensor(g_fake_memory, DType::kBF16, 3, 24, 2, 16);
    a.v_cache = make_tensor(g_fake_memory, DType::kBF16, 3, 24, 2, 16);
  }
};

using Mutation = std::function<void(ValidArgs&)>;

// Mutates valid args; checks validate_kvcache (kCpu) and attention_with_kvcache_cpu agree on the
// rejection, its status, and that the message holds `fragment`.
void expect_rejected(const Mutation& mutate, Status status, const std::string& fragment) {
  ValidArgs v;
  mutate(v);
  KvCacheProblem p;
  const Result r = validate_kvcache(v.a, Backend::kCpu, &p);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(status)) << r.message;
  EXPECT_NE(r.message.find(fragment), std::string::npos) << "message \"" << r.message << "\" lacks \"" << fragment << "\"";
  if (r.ok()) return;  // a valid call would read the fake pointers
  const Result api = attention_with_kvcache_cpu(v.a);
  EXPECT_EQ(api.status, r.status);
  EXPECT_EQ(api.message, r.message);
}

void expect_invalid(const Mutation& mutate, const std::string& fragment) {
  expect_rejected(mutate, Status::kInvalidArgument, fragment);
}

TEST(KvCacheValidation, ValidArgsFillTheProblem) {
  ValidArgs v;
  KvCacheProblem p;
  Result r = validate_kvcache(v.a, Backend::kCpu, &p);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.seqlen_q, 2);
  EXPECT_EQ(p.group(), 2);
  EXPECT_EQ(p.rows_per_kv_head(), 4);
  EXPECT_TRUE(p.paged);
  EXPECT_EQ(p.page_size, 8);
  EXPECT_EQ(p.num_pages, 10);
  EXPECT_EQ(p.max_pages, 3);
  EXPECT_EQ(p.capacity, 24);
  EXPECT_EQ(p.seqlen_new, 2);
  EXPECT_EQ(p.page_table_stride, 3);
  EXPECT_EQ(p.k_stride[0], 8 * 2 * 16);
  EXPECT_EQ(p.cache_seqlens, v.seqlens.data());
  EXPECT_FLOAT_EQ(p.scale, 0.25f);
  // Contiguous, no append, no lse.
  v.make_contiguous();
  v.a.k_new = v.a.v_new = v.a.lse = TensorRef{};
  r = validate_kvcache(v.a, Backend::kCpu, &p);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_FALSE(p.paged);
  EXPECT_EQ(p.capacity, 24);
  EXPECT_EQ(p.seqlen_new, 0);
  EXPECT_EQ(p.k_new, nullptr);
  EXPECT_EQ(p.page_table, nullptr);
  EXPECT_EQ(p.lse, nullptr);
}

TEST(KvCacheValidation, TensorLayouts) {
  expect_invalid([](ValidArgs& v) { v.a.q.ndim = 3; }, "q: expected 4 dims");
  expect_invalid([](ValidArgs& v) { v.a.k_cache.ndim = 3; }, "k_cache: expected 4 dims");
  expect_invalid([](ValidArgs& v) { v.a.v_cache.strides[3] = 2; }, "v_cache: last dim (head_dim) must be contiguous");
  expect_invalid([](ValidArgs& v) { v.a.k_new.strides[1] = -1; }, "k_new.strides[1] is negative");
  expect_invalid([](ValidArgs& v) { v.a.out.data = nullptr; }, "out.data is null");
  expect_invalid([](ValidArgs& v) { v.a.v_new.data = nullptr; }, "v_new.data is null");
}

TEST(KvCacheValidation, Dtypes) {
  expect_invalid([](ValidArgs& v) { v.a.k_cache.dtype = DType::kFP16; }, "k_cache: dtype fp16 differs from q's bf16");
  expect_invalid([](ValidArgs& v) { v.a.v_new.dtype = DType::kFP16; }, "v_new: dtype fp16 differs from q's bf16");
  expect_invalid([](ValidArgs& v) { v.a.out.dtype = DType::kInt32; }, "out: dtype int32 is not supported");
  expect_invalid([](ValidArgs& v) { v.a.q.dtype = DType::kE4M3; }, "q: dtype e4m3 is not supported");
}

TEST(KvCacheValidation, ShapesAgree) {
  expect_invalid([](ValidArgs& v) { v.a.out.sizes[2] = 2; }, "out.sizes[2]=2 but q.sizes[2]=4");
  expect_invalid([](ValidArgs& v) { v.a.k_cache.sizes[3] = v.a.v_cache.sizes[3] = 8; }, "k_cache.sizes[3] (head_dim)=8");
  expect_rejected([](ValidArgs& v) { v.a.v_cache.sizes[3] = 8; }, Status::kUnsupported, "v_cache.sizes[3] (head_dim)=8");
  expect_invalid([](ValidArgs& v) { v.a.v_cache.sizes[1] = 4; }, "v_cache.sizes[1]=4 but k_cache.sizes[1]=8");
  expect_invalid([](ValidArgs& v) { v.a.v_cache.sizes[0] = 9; }, "v_cache.sizes[0]=9 but k_cache.sizes[0]=10");
  expect_invalid([](ValidArgs& v) { v.a.q.sizes[3] = v.a.out.sizes[3] = 0; }, "k_cache.sizes[3] (head_dim)=16");
}

TEST(KvCacheValidation, Heads) {
  expect_invalid([](ValidArgs& v) { v.a.k_cache.sizes[2] = v.a.v_cache.sizes[2] = 3; },
                 "heads_q=4 is not a multiple of heads_kv=3");
  expect_invalid([](ValidArgs& v) { v.a.k_cache.sizes[2] = v.a.v_cache.sizes[2] = 0; }, "k_cache.sizes[2] (heads_kv) is 0");
  expect_invalid(
      [](ValidArgs& v) {
        for (TensorRef* t : {&v.a.q, &v.a.out, &v.a.k_cache, &v.a.v_cache, &v.a.k_new, &v.a.v_new}) t->sizes[3] = 0;
      },
      "q.sizes[3] (head_dim) is 0");
}

TEST(KvCacheValidation, CacheSeqlensForm) {
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens.dtype = DType::kFP32; }, "cache_seqlens: dtype must be int32, got fp32");
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens.ndim = 2; }, "cache_seqlens: expected 1 dim (batch)");
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens.sizes[0] = 2; }, "cache_seqlens.sizes[0]=2 but q has batch 3");
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens.strides[0] = 2; }, "cache_seqlens: last dim must be contiguous");
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens.data = nullptr; }, "cache_seqlens.data is null");
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens.data = g_fake_memory + 2; }, "cache_seqlens.data is not 4-byte aligned");
  expect_invalid([](ValidArgs& v) { v.a.cache_seqlens = TensorRef{}; }, "cache_seqlens: dtype must be int32");
}

TEST(KvCacheValidation, PageTableForm) {
  expect_invalid([](ValidArgs& v) { v.a.page_table.dtype = DType::kBF16; }, "page_table: dtype must be int32, got bf16");
  expect_invalid([](ValidArgs& v) { v.a.page_table.ndim = 1; }, "page_table: expected 2 dims (batch, max_pages)");
  expect_invalid([](ValidArgs& v) { v.a.page_table.sizes[0] = 4; }, "page_table.sizes[0]=4 but q has batch 3");
  expect_invalid([](ValidArgs& v) { v.a.page_table.strides[1] = 3; }, "page_table: last dim must be contiguous");
  expect_invalid([](ValidArgs& v) { v.a.page_table.strides[0] = -3; }, "page_table.strides[0] is negative");
  expect_invalid([](ValidArgs& v) { v.a.page_table.data = nullptr; }, "page_table.data is null");
  expect_invalid([](ValidArgs& v) { v.a.k_cache.sizes[1] = v.a.v_cache.sizes[1] = 0; }, "k_cache.sizes[1] (page_size) is 0");
  expect_invalid([](ValidArgs& v) { v.a.k_cache.sizes[0] = v.a.v_cache.sizes[0] = 0; }, "k_cache.sizes[0] (num_pages) is 0");
  expect_invalid(
      [](ValidArgs& v) {
        v.a.k_cache.sizes[1] = v.a.v_cache.sizes[1] = int64_t{1} << 30;
        v.a.page_table.sizes[1] = 2;
      },
      "exceeds 2^31-1 tokens per sequence");
}

TEST(KvCacheValidation, ContiguousCacheBatch) {
  expect_invalid(
      [](ValidArgs& v) {
        v.make_contiguous();
        v.a.k_cache.sizes[0] = v.a.v_cache.sizes[0] = 4;
      },
      "k_cache.sizes[0] (batch)=4 but q has batch 3");
}

TEST(KvCacheValidation, NewKeysAndValues) {
  expect_invalid([](ValidArgs& v) { v.a.v_new = TensorRef{}; }, "k_new and v_new must be given together, but only k_new is");
  expect_invalid([](ValidArgs& v) { v.a.k_new = TensorRef{}; }, "only v_new is");
  expect_invalid([](ValidArgs& v) { v.a.k_new.sizes[0] = 2; }, "k_new.sizes[0] (batch)=2 but the cache/q has batch 3");
  expect_invalid([](ValidArgs& v) { v.a.k_new.sizes[2] = 1; }, "k_new.sizes[2] (heads_kv)=1");
  expect_invalid([](ValidArgs& v) { v.a.k_new.sizes[3] = 8; }, "k_new.sizes[3] (head_dim)=8");
  expect_invalid([](ValidArgs& v) { v.a.v_new.sizes[1] = 3; }, "v_new.sizes[1] (seqlen_new)=3 but k_new has seqlen_new 2");
  expect_invalid(
      [](ValidArgs& v) {
        v.a.k_new.sizes[1] = v.a.v_new.sizes[1] = 25;
        v.seqlens = {0, 0, 0};
      },
      "k_new.sizes[1] (seqlen_new)=25 exceeds the cache capacity 24 (max_pages * page_size)");
  expect_invalid(
      [](ValidArgs& v) {
        v.make_contiguous();
        v.a.k_new.sizes[1] = v.a.v_new.sizes[1] = 25;
      },
      "exceeds the cache capacity 24 (max_seqlen_k = k_cache.sizes[1])");
}

TEST(KvCacheValidation, WrittenTensorsMustNotOverlap) {
  // out is written; so is the cache when k_new/v_new are appended.
  expect_invalid([](ValidArgs& v) { v.a.out.strides[0] = 0; }, "out: strides (0, ");
  expect_invalid([](ValidArgs& v) { v.a.k_cache.strides[0] = 0; }, "k_cache: strides (0, ");
  expect_invalid([](ValidArgs& v) { v.a.v_cache.strides[2] = 8; }, "v_cache: strides");
  // Without an append the cache is only read: a broadcast cache is accepted.
  ValidArgs v;
  v.a.k_new = v.a.v_new = TensorRef{};
  v.a.k_cache.strides[0] = v.a.v_cache.strides[0] = 0;
  KvCacheProblem p;
  const Result r = validate_kvcache(v.a, Backend::kCpu, &p);
  EXPECT_TRUE(r.ok()) << r.message;
  // Only the CPU reference and the sm90 kernels take a KV cache.
  EXPECT_EQ(validate_kvcache(v.a, Backend::kCudaReference, &p).status, Status::kUnsupported);
  // Extents beyond int64 are caught by the shared layout rules.
  expect_invalid([](ValidArgs& v) { v.a.k_new.strides[0] = int64_t{1} << 62; }, "reach beyond 2^63 bytes");
}

TEST(KvCacheValidation, LseScaleSplits) {
  expect_invalid([](ValidArgs& v) { v.a.lse.dtype = DType::kBF16; }, "lse: dtype must be fp32");
  expect_invalid([](ValidArgs& v) { v.a.lse.sizes[2] = 1; }, "lse.sizes[2]=1 but expected 2 (batch, heads_q, seqlen_q)");
  expect_invalid([](ValidArgs& v) { v.a.lse.strides[0] = 9; }, "lse must be contiguous: strides[0]=9");
  expect_invalid([](ValidArgs& v) { v.a.softmax_scale = -1.f; }, "softmax_scale must be finite and > 0");
  expect_invalid([](ValidArgs& v) { v.a.softmax_scale = INFINITY; }, "softmax_scale");
  expect_invalid([](ValidArgs& v) { v.a.num_splits = -1; }, "num_splits=-1 is negative");
}

TEST(KvCacheValidation, Window) {
  expect_invalid([](ValidArgs& v) { v.a.window = {-2, -1}; }, "window.left=-2 must be >= 0, or -1 for unbounded");
  expect_invalid([](ValidArgs& v) { v.a.window = {4, -3}; }, "window.right=-3 must be >= 0, or -1 for unbounded");
  expect_invalid(
      [](ValidArgs& v) {
        v.a.causal = true;
        v.a.window = {-1, 1};
      },
      "window.right=1 with causal: causal is window.right = 0 (pass -1 or 0)");
  // The same rules on the GPU backend (form checks, no values read).
  ValidArgs g;
  g.a.window = {-7, 0};
  KvCacheProblem p;
  Result r = validate_kvcache(g.a, Backend::kSm90, &p);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("window.left=-7"), std::string::npos) << r.message;
  // Normalised bounds in the problem: -1 or >= 0, causal is right = 0.
  struct Norm { bool causal; Window w; int64_t left, right; };
  for (const Norm& n : {Norm{false, {-1, -1}, -1, -1}, Norm{true, {-1, -1}, -1, 0}, Norm{true, {5, 0}, 5, 0},
                        Norm{false, {0, 3}, 0, 3}, Norm{false, {int64_t{1} << 40, -1}, int64_t{1} << 40, -1}}) {
    ValidArgs v;
    v.a.causal = n.causal;
    v.a.window = n.w;
    r = validate_kvcache(v.a, Backend::kCpu, &p);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(p.window_left, n.left);
    EXPECT_EQ(p.window_right, n.right);
  }
}

TEST(KvCacheValidation, Softcap) {
  expect_invalid([](ValidArgs& v) { v.a.softcap = -1.f; }, "softcap must be finite and >= 0 (0: off), got -1");
  expect_invalid([](ValidArgs& v) { v.a.softcap = NAN; }, "softcap must be finite and >= 0");
  expect_invalid([](ValidArgs& v) { v.a.softcap = INFINITY; }, "softcap must be finite and >= 0");
  // The same rule on the GPU backend, and a valid cap reaches the problem.
  ValidArgs g;
  g.a.softcap = -0.5f;
  KvCacheProblem p;
  Result r = validate_kvcache(g.a, Backend::kSm90, &p);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_NE(r.message.find("softcap"), std::string::npos) << r.message;
  ValidArgs v;
  v.a.softcap = 30.f;
  r = validate_kvcache(v.a, Backend::kCpu, &p);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(p.softcap, 30.f);
}

TEST(KvCacheValidation, IndexValuesOnTheCpu) {
  expect_invalid([](ValidArgs& v) { v.seqlens[1] = -1; }, "cache_seqlens[1]=-1 is negative");
  expect_invalid([](ValidArgs& v) { v.seqlens[2] = 23; },
                 "cache_seqlens[2]=23 plus seqlen_new=2 exceeds the cache capacity 24 (max_pages * page_size)");
  expect_invalid(
      [](ValidArgs& v) {
        v.make_contiguous();
        v.seqlens[0] = 24;
      },
      "cache_seqlens[0]=24 plus seqlen_new=2 exceeds the cache capacity 24 (max_seqlen_k = k_cache.sizes[1])");
  expect_invalid([](ValidArgs& v) { v.pages[0] = 10; }, "page_table[0][0]=10 is outside [0, num_pages=10) (k_cache.sizes[0])");
  expect_invalid([](ValidArgs& v) { v.pages[8] = -1; }, "page_table[2][2]=-1 is outside [0, num_pages=10)");
  // Sequence 1 holds 0 + 2 tokens: only its first page is read, so its unused entries may be -1;
  // with 7 more tokens the second one is read.
  expect_invalid([](ValidArgs& v) { v.seqlens[1] = 7; }, "page_table[1][1]=-1 is outside");
}

TEST(KvCacheValidation, ValueChecksAreCpuOnly) {
  // The GPU path cannot read device-side indices without a copy: form checks only (values under
  // check_index_values / HOPATTN_DEBUG_CHECKS, at the call).
  ValidArgs v;
  v.seqlens[0] = -5;
  v.pages[0] = 99;
  for (TensorRef* t : {&v.a.q, &v.a.out, &v.a.k_cache, &v.a.v_cache, &v.a.k_new, &v.a.v_new}) t->sizes[3] = 64;
  v.a.q.strides[2] = v.a.out.strides[2] = 64;
  v.a.q.strides[1] = v.a.out.strides[1] = 256;
  v.a.q.strides[0] = v.a.out.strides[0] = 512;
  for (TensorRef* t : {&v.a.k_cache, &v.a.v_cache, &v.a.k_new, &v.a.v_new}) {
    t->strides[2] = 64;
    t->strides[1] = 128;
    t->strides[0] = 128 * t->sizes[1];
  }
  KvCacheProblem p;
  const Result gpu = validate_kvcache(v.a, Backend::kSm90, &p);
  EXPECT_TRUE(gpu.ok()) << gpu.message;
  EXPECT_FALSE(validate_kvcache(v.a, Backend::kCpu, &p).ok());
  v.a.cache_seqlens.sizes[0] = 2;  // form rules still apply on the GPU
  EXPECT_EQ(validate_kvcache(v.a, Backend::kSm90, &p).status, Status::kInvalidArgument);
}

TEST(KvCacheValidation, CheckIndexValuesOnHostCopies) {
  // The function the GPU's check_index_values runs on its dense host copy of the page table.
  ValidArgs v;
  KvCacheProblem p;
  ASSERT_TRUE(validate_kvcache(v.a, Backend::kCpu, &p).ok());
  std::vector<int32_t> dense = {0, 1, 2, 3, 4, 5, 6, 7, 9};
  EXPECT_TRUE(check_kvcache_index_values(p, v.seqlens.data(), dense.data(), 3).ok());
  dense[6] = 12;
  const Result r = check_kvcache_index_values(p, v.seqlens.data(), dense.data(), 3);
  EXPECT_NE(r.message.find("page_table[2][0]=12 is outside [0, num_pages=10)"), std::string::npos) << r.message;
}

TEST(KvCacheValidation, GpuOnlyRules) {
  ValidArgs v;
  KvCacheProblem p;
  // head_dim 16 has no kernel; fp32 is CPU-only; GPU tensors need 16-byte alignment.
  Result r = validate_kvcache(v.a, Backend::kSm90, &p);
  EXPECT_EQ(r.status, Status::kUnsupported);
  EXPECT_NE(r.message.find("head_dim 16 has no sm90 KV-cache kernel"), std::string::npos) << r.message;
  for (TensorRef* t : {&v.a.q, &v.a.out, &v.a.k_cache, &v.a.v_cache, &v.a.k_new, &v.a.v_new}) t->dtype = DType::kFP32;
  r = validate_kvcache(v.a, Backend::kSm90, &p);
  EXPECT_EQ(r.status, Status::kUnsupported);
  EXPECT_NE(r.message.find("q: dtype fp32 is not supported by this backend (bf16, fp16)"), std::string::npos) << r.message;
  ValidArgs w;
  w.a.k_cache.data = g_fake_memory + 8;
  r = validate_kvcache(w.a, Backend::kSm90, &p);
  EXPECT_NE(r.message.find("k_cache.data is not 16-byte aligned"), std::string::npos) << r.message;
}

TEST(KvCacheApi, GpuEntryPointWithoutDevice) {
  // Validation comes before the device check, so a bad argument is reported on any machine; a
  // valid call without a Hopper GPU is kUnsupportedDevice, and the workspace query still answers.
  ValidArgs v;
  v.a.num_splits = -2;
  Result r = attention_with_kvcache(v.a, nullptr, 0);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_EQ(attention_with_kvcache_workspace_size(v.a), 0u);  // invalid args
  if (has_sm90()) GTEST_SKIP() << "a Hopper GPU is present: the GPU tests cover the call";
  ValidArgs w;
  for (TensorRef* t : {&w.a.q, &w.a.out, &w.a.k_cache, &w.a.v_cache, &w.a.k_new, &w.a.v_new}) {
    t->sizes[3] = 64;
    *t = make_tensor(g_fake_memory, DType::kBF16, t->sizes[0], t->sizes[1], t->sizes[2], 64);
  }
  // The workspace is checked before the device too: give the call what it asks for (never touched).
  const std::size_t bytes = attention_with_kvcache_workspace_size(w.a);
  r = attention_with_kvcache(w.a, bytes ? g_fake_memory : nullptr, bytes);
  EXPECT_EQ(r.status, Status::kUnsupportedDevice) << r.message;
}

TEST(KvCacheApi, DecodeLimitsAndWorkspaceBeforeTheDevice) {
  // The decode kernels' limits and the workspace are host facts: reported on any machine, and
  // before a launch on one with a GPU (none of these calls reaches the device).
  auto to_64 = [](ValidArgs& v) {
    for (TensorRef* t : {&v.a.q, &v.a.out, &v.a.k_cache, &v.a.v_cache, &v.a.k_new, &v.a.v_new})
      *t = make_tensor(g_fake_memory, DType::kBF16, t->sizes[0], t->sizes[1], t->sizes[2], 64);
  };
  {  // 2^27 + 1 pages of 8 tokens per sequence: 2^30 + 8 tokens, within 2^31-1 but not the decode limit
    ValidArgs v;
    to_64(v);
    v.a.page_table.sizes[1] = (int64_t{1} << 27) + 1;  // declared only: the GPU path does not read it here
    v.a.page_table.strides[0] = v.a.page_table.sizes[1];
    const Result r = attention_with_kvcache(v.a, nullptr, 0);
    EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
    EXPECT_NE(r.message.find("exceeds the decode kernels' limit of 2^30"), std::string::npos) << r.message;
  }
  {  // 2^28 + 1 query rows x 4 heads per kv head on the decode route (a paged cache of 8-token pages)
    ValidArgs v;
    to_64(v);
    for (TensorRef* t : {&v.a.q, &v.a.out}) *t = make_tensor(g_fake_memory, DType::kBF16, 3, (int64_t{1} << 28) + 1, 4, 64);
    v.a.lse = TensorRef{};
    v.a.k_new = v.a.v_new = TensorRef{};
    v.a.k_cache = make_tensor(g_fake_memory, DType::kBF16, 10, 8, 1, 64);
    v.a.v_cache = make_tensor(g_fake_memory, DType::kBF16, 10, 8, 1, 64);
    const Result r = attention_with_kvcache(v.a, nullptr, 0);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << r.message;  // first: 3 x 4 x (2^28 + 1) rows > 2^31-1
    EXPECT_NE(r.message.find("query rows, more than 2^31-1"), std::string::npos) << r.message;
    // One sequence: 2^30 + 4 rows in all (within 2^31-1), all of them on the one kv head (beyond 2^30).
    for (TensorRef* t : {&v.a.q, &v.a.out}) *t = make_tensor(g_fake_memory, DType::kBF16, 1, (int64_t{1} << 28) + 1, 4, 64);
    v.a.cache_seqlens.sizes[0] = 1;
    v.a.page_table.sizes[0] = 1;
    const Result r2 = attention_with_kvcache(v.a, nullptr, 0);
    EXPECT_EQ(r2.status, Status::kUnsupported) << r2.message;
    EXPECT_NE(r2.message.find("seqlen_q * heads_q / heads_kv"), std::string::npos) << r2.message;
  }
  {  // a split plan needs a workspace: asking without one is an argument error, device or not
    ValidArgs v;
    to_64(v);
    v.make_contiguous();  // a 4096-token contiguous cache: room for 4 splits of the keys
    v.a.k_cache = make_tensor(g_fake_memory, DType::kBF16, 3, 4096, 2, 64);
    v.a.v_cache = make_tensor(g_fake_memory, DType::kBF16, 3, 4096, 2, 64);
    v.a.num_splits = 4;
    ASSERT_GT(attention_with_kvcache_workspace_size(v.a), 0u);
    const Result r = attention_with_kvcache(v.a, nullptr, 0);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << r.message;
    EXPECT_NE(r.message.find("attention_with_kvcache_workspace_size"), std::string::npos) << r.message;
  }
}

// ---- (c) planning: the kernel route, splits, row tiles, workspace ----------------------------------

// Which kernel a call runs: the forward kernel for chunked prefill (>= kKvForwardMinSeqlenQ query
// rows, a contiguous cache TMA can address), the decode kernel otherwise; the environment override.
TEST(KvCacheRoute, ForwardKernelForChunkedPrefill) {
  alignas(256) static uint8_t memory[256];
  KvCacheProblem p;
  p.batch = 4; p.seqlen_q = kKvForwardMinSeqlenQ; p.heads_q = 32; p.heads_kv = 8; p.head_dim = 128;
  p.capacity = 8192;
  p.q = p.out = p.k_cache = p.v_cache = memory;
  const int64_t q_strides[3] = {p.seqlen_q * 32 * 128, 32 * 128, 128};
  const int64_t kv_strides[3] = {8192 * 8 * 128, 8 * 128, 128};
  std::copy_n(q_strides, 3, p.q_stride);
  std::copy_n(q_strides, 3, p.o_stride);
  std::copy_n(kv_strides, 3, p.k_stride);
  std::copy_n(kv_strides, 3, p.v_stride);
  EXPECT_EQ(choose_kv_kernel(p, nullptr), KvKernel::kForward);
  EXPECT_EQ(choose_kv_kernel(p, "decode"), KvKernel::kDecode);
  EXPECT_EQ(choose_kv_kernel(p, "other"), KvKernel::kForward);  // unknown values: the automatic choice

  KvCacheProblem few = p;  // decoding: few query rows
  few.seqlen_q = kKvForwardMinSeqlenQ - 1;
  EXPECT_EQ(choose_kv_kernel(few, nullptr), KvKernel::kDecode);
  EXPECT_EQ(choose_kv_kernel(few, "forward"), KvKernel::kForward);
  few.seqlen_q = 1;
  EXPECT_EQ(choose_kv_kernel(few, "forward"), KvKernel::kForward);

  // What keeps the decode kernel even when forced: a page size that is not a multiple of the key
  // tile, a split request, no queries, a layout TMA cannot address (each pointer and stride),
  // indices past the 32-bit range.
  std::vector<std::pair<const char*, KvCacheProblem>> decode_only;
  auto add = [&](const char* what, auto&& change) {
    KvCacheProblem x = p;
    change(x);
    decode_only.emplace_back(what, x);
  };
  const auto paged = [](KvCacheProblem& x, int64_t page_size) {  // (pages, page_size, 8, 128) strides
    x.paged = true;
    x.page_size = page_size;
    x.num_pages = 64;
    x.max_pages = x.capacity / page_size;
    const int64_t strides[3] = {page_size * 8 * 128, 8 * 128, 128};
    std::copy_n(strides, 3, x.k_stride);
    std::copy_n(strides, 3, x.v_stride);
  };
  add("paged, page 64 (key tile 176)", [&](KvCacheProblem& x) { paged(x, 64); });
  add("paged, page 256 (key tile 176)", [&](KvCacheProblem& x) { paged(x, 256); });
  add("paged causal, page 64 (key tile 128)", [&](KvCacheProblem& x) { paged(x, 64); x.causal = true; });
  add("paged causal, page 176 (key tile 128)", [&](KvCacheProblem& x) { paged(x, 176); x.causal = true; });
  add("paged d256 causal, page 256 (key tile 80)", [&](KvCacheProblem& x) {
    paged(x, 256);
    x.causal = true;
    x.head_dim = 256;
  });
  add("paged causal, no pages", [&](KvCacheProblem& x) { paged(x, 128); x.causal = true; x.num_pages = 0; });
  add("num_splits 2", [](KvCacheProblem& x) { x.num_splits = 2; });
  add("no queries", [](KvCacheProblem& x) { x.batch = 0; });
  add("q 8-byte aligned", [](KvCacheProblem& x) { x.q = memory + 8; });
  add("out 8-byte aligned", [](KvCacheProblem& x) { x.out = memory + 8; });
  add("k_cache 8-byte aligned", [](KvCacheProblem& x) { x.k_cache = memory + 8; });
  add("v_cache 8-byte aligned", [](KvCacheProblem& x) { x.v_cache = memory + 8; });
  for (int i = 0; i < 3; ++i) {
    add("q stride", [i](KvCacheProblem& x) { x.q_stride[i] += 4; });
    add("out stride", [i](KvCacheProblem& x) { x.o_stride[i] += 4; });
    add("k_cache stride", [i](KvCacheProblem& x) { x.k_stride[i] += 4; });
    add("v_cache stride", [i](KvCacheProblem& x) { x.v_stride[i] += 4; });
  }
  add("capacity 2^30", [](KvCacheProblem& x) { x.capacity = int64_t{1} << 30; });
  add("empty cache", [](KvCacheProblem& x) { x.capacity = 0; });
  add("seqlen_q 2^30", [](KvCacheProblem& x) { x.seqlen_q = int64_t{1} << 30; });
  add("tiles past 2^29", [](KvCacheProblem& x) { x.batch = 1 << 20; x.seqlen_q = 1 << 12; });
  for (const auto& [what, x] : decode_only) {
    EXPECT_EQ(choose_kv_kernel(x, nullptr), KvKernel::kDecode) << what;
    EXPECT_EQ(choose_kv_kernel(x, "forward"), KvKernel::kDecode) << what;
  }
  KvCacheProblem one_split = p;  // one split asked: no split either way
  one_split.num_splits = 1;
  EXPECT_EQ(choose_kv_kernel(one_split, nullptr), KvKernel::kForward);

  // Paged caches whose pages hold whole key tiles: one TMA box per tile, the forward kernel.
  std::vector<std::pair<const char*, KvCacheProblem>> paged_forward;
  auto add_paged = [&](const char* what, auto&& change) {
    KvCacheProblem x = p;
    change(x);
    paged_forward.emplace_back(what, x);
  };
  add_paged("causal d128, page 128", [&](KvCacheProblem& x) { paged(x, 128); x.causal = true; });
  add_paged("causal d128, page 256", [&](KvCacheProblem& x) { paged(x, 256); x.causal = true; });
  add_paged("window d128, page 128", [&](KvCacheProblem& x) { paged(x, 128); x.window_left = 100; });
  add_paged("softcap d128, page 384", [&](KvCacheProblem& x) { paged(x, 384); x.softcap = 30.f; });
  add_paged("d64, page 128", [&](KvCacheProblem& x) { paged(x, 128); x.head_dim = 64; });
  add_paged("d128, page 176", [&](KvCacheProblem& x) { paged(x, 176); });
  add_paged("d256, page 160", [&](KvCacheProblem& x) { paged(x, 160); x.head_dim = 256; });
  for (const auto& [what, x] : paged_forward) {
    EXPECT_EQ(x.page_size % kv_forward_key_tile(x), 0) << what;
    EXPECT_EQ(choose_kv_kernel(x, nullptr), KvKernel::kForward) << what;
    EXPECT_EQ(choose_kv_kernel(x, "decode"), KvKernel::kDecode) << what;
  }
  // The key tiles the rule uses are the kernel configurations' (tile_shape.hpp reads the same
  // function): 128 at d64 and masked d128, 176 at plain d128, 80 at d256.
  KvCacheProblem t = p;
  EXPECT_EQ(kv_forward_key_tile(t), 176);
  t.causal = true;
  EXPECT_EQ(kv_forward_key_tile(t), 128);
  t.head_dim = 64;
  EXPECT_EQ(kv_forward_key_tile(t), 128);
  t.head_dim = 256;
  EXPECT_EQ(kv_forward_key_tile(t), 80);
}

// The workspace follows the route: the forward kernel needs the key counts after an append only.
TEST(KvCacheRoute, WorkspaceFollowsTheRoute) {
  ValidArgs v;
  v.make_contiguous();
  const auto head_dim_64 = [](const TensorRef& t, int64_t rows) {
    return make_tensor(g_fake_memory, DType::kBF16, t.sizes[0], rows, t.sizes[2], 64);
  };
  v.a.q = v.a.out = head_dim_64(v.a.q, kKvForwardMinSeqlenQ);
  v.a.k_cache = v.a.v_cache = head_dim_64(v.a.k_cache, 24);
  v.a.k_new = v.a.v_new = head_dim_64(v.a.k_new, 2);
  v.a.lse = TensorRef{};
  KvCacheProblem p;
  ASSERT_TRUE(validate_kvcache(v.a, Backend::kSm90, &p).ok());
  ASSERT_EQ(choose_kv_kernel(p, nullptr), KvKernel::kForward);
  ASSERT_GT(p.seqlen_new, 0);
  EXPECT_EQ(attention_with_kvcache_workspace_size(v.a), 256u);  // batch int32 counts, 256-byte rounded
  v.a.k_new = v.a.v_new = TensorRef{};
  EXPECT_EQ(attention_with_kvcache_workspace_size(v.a), 0u);  // the kernel reads cache_seqlens itself
}

TEST(KvCachePlan, BlocksPerSm) {
  using sm90::decode::blocks_per_sm;
  EXPECT_EQ(blocks_per_sm(64, 1), 3);
  EXPECT_EQ(blocks_per_sm(64, 2), 3);
  EXPECT_EQ(blocks_per_sm(128, 1), 2);
  EXPECT_EQ(blocks_per_sm(128, 2), 2);
  EXPECT_EQ(blocks_per_sm(256, 1), 1);
}

TEST(KvCachePlan, SplitHeuristic) {
  using sm90::decode::choose_num_splits;
  const int64_t slots = 132;  // one block per SM (plan_decode)
  // Few (batch, kv head) pairs and a long cache: the fewest splits within 95% of the best wave
  // efficiency (16 splits fill 97% of the wave; 15 only 91%).
  EXPECT_EQ(choose_num_splits(8, 131072, slots, 0), 16);
  EXPECT_EQ(choose_num_splits(1, 131072, slots, 0), 122);  // under one wave even at 128 splits
  // Never below one 64-key block step a split: a 1k cache takes 16 splits (97% of the wave), 300
  // keys 4 (the whole steps of 300 keys), 64 keys none.
  EXPECT_EQ(choose_num_splits(8, 1024, slots, 0), 16);
  EXPECT_EQ(choose_num_splits(8, 300, slots, 0), 4);
  EXPECT_EQ(choose_num_splits(8, 64, slots, 0), 1);
  // 80% of a wave already: no split; 100 blocks (76%) take 9 splits (97% of 7 waves).
  EXPECT_EQ(choose_num_splits(512, 131072, slots, 0), 1);
  EXPECT_EQ(choose_num_splits(106, 131072, slots, 0), 1);
  EXPECT_EQ(choose_num_splits(100, 131072, slots, 0), 9);
  // Forced counts clamp to the 64-key steps of the capacity and to 128.
  EXPECT_EQ(choose_num_splits(8, 1024, slots, 3), 3);
  EXPECT_EQ(choose_num_splits(8, 100, slots, 64), 2);
  EXPECT_EQ(choose_num_splits(8, 1 << 20, slots, 1000), 128);
  EXPECT_EQ(choose_num_splits(8, 0, slots, 5), 1);
  EXPECT_EQ(choose_num_splits(0, 4096, slots, 0), 1);
  EXPECT_EQ(choose_num_splits(8, 4096, 0, 0), 1);  // no slots known: treated as 1, a full wave
}

// A left-bounded window caps the keys the kernel splits per sequence at seqlen_q + left (the last
// query's window ends at len_k), which the heuristic and the forced-count clamp use.
TEST(KvCachePlan, WindowBoundsTheKeysPerSequence) {
  KvCacheProblem p;
  p.batch = 1; p.seqlen_q = 1; p.heads_q = 32; p.heads_kv = 8; p.head_dim = 128; p.capacity = 131072;
  EXPECT_EQ(p.max_window_keys(), 131072);
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 16);  // 8 blocks a split (SplitHeuristic)
  p.window_right = 0;  // a right bound alone does not cap the keys
  EXPECT_EQ(p.max_window_keys(), 131072);
  p.window_left = 511;  // 512 keys: at most 8 splits of one 64-key step
  EXPECT_EQ(p.max_window_keys(), 512);
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 8);
  p.window_left = 4095;  // 4096 keys
  EXPECT_EQ(p.max_window_keys(), 4096);
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 16);
  p.seqlen_q = 4;
  EXPECT_EQ(p.max_window_keys(), 4099);
  p.window_left = 255;
  p.seqlen_q = 1;
  p.num_splits = 64;  // forced: clamped to the window's 4 steps of 64 keys
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 4);
  p.window_left = 131071;  // as wide as the cache, or wider: the capacity
  EXPECT_EQ(p.max_window_keys(), 131072);
  p.window_left = int64_t{1} << 62;
  EXPECT_EQ(p.max_window_keys(), 131072);
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 64);
  p.window_left = 0;  // the diagonal only
  EXPECT_EQ(p.max_window_keys(), 1);
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 1);
}

// The decode kernel's key ranges, replayed on the host: its per-row bounds (window_key_begin/end,
// shared with the kernel) against visible_keys, and its split and block cuts (the sequence's
// [key_lo, len_k) shared by the splits, each block's share cut to its first and last rows, then the
// per-element mask over the 16-key chunks of the 4 warps, as kernel.cuh does): every row must see
// exactly its window's keys, each once, across splits and row blocks, and nothing outside [0, len_k).
TEST(KvCachePlan, KernelKeyRangesCoverEachWindowOnce) {
  using namespace sm90::decode;
  int64_t checked = 0, bad = 0;
  for (int len_k : {0, 1, 5, 64, 65, 300, 777})
    for (int sq : {1, 4, 17})
      for (int group : {1, 4})
        for (int64_t left : {int64_t{-1}, int64_t{0}, int64_t{5}, int64_t{64}, int64_t{700}, int64_t{1} << 62})
          for (int64_t right : {int64_t{-1}, int64_t{0}, int64_t{3}, int64_t{1} << 62})
            for (int splits : {1, 2, 5})
              for (int block_rows : {16, 32}) {
                const int rows = sq * group;
                const auto row_begin = [&](int r) { return window_key_begin(r / group, sq, len_k, left); };
                const auto row_end = [&](int r) { return window_key_end(r / group, sq, len_k, right); };
                std::vector<int> seen(static_cast<size_t>(rows * std::max(len_k, 1)), 0);
                for (int row0 = 0; row0 < rows; row0 += block_rows)
                  for (int split = 0; split < splits; ++split) {
                    const int row_last = std::min(row0 + block_rows, rows) - 1;
                    const int key_lo = row_begin(0);
                    const int share = keys_per_split(len_k - key_lo, splits);
                    const int split_begin = key_lo + split * share;
                    const int key_begin = std::max(split_begin, row_begin(row0));
                    const int key_end = std::min(split_begin + share, row_end(row_last));
                    const int steps = key_end > key_begin ? (key_end - key_begin + kStepKeys - 1) / kStepKeys : 0;
                    for (int r = row0; r <= row_last; ++r) {
                      const int first = row_begin(r), count = std::max(std::min(row_end(r), key_end) - first, 0);
                      for (int step = 0; step < steps; ++step)
                        for (int warp = 0; warp < kWarps; ++warp) {
                          const int key0 = key_begin + step * kStepKeys + warp * kChunkKeys;
                          if (key0 >= key_end) continue;
                          for (int key = key0; key < key0 + kChunkKeys; ++key) {
                            if (!(static_cast<unsigned>(key - first) < static_cast<unsigned>(count))) continue;
                            if (key < 0 || key >= len_k) ++bad;
                            else ++seen[static_cast<size_t>(r * len_k + key)];
                          }
                        }
                    }
                  }
                for (int r = 0; r < rows; ++r) {
                  const KeyRange kr = visible_keys(r / group, sq, len_k, left, right);
                  EXPECT_EQ(row_begin(r), std::min<int64_t>(kr.begin, len_k));
                  EXPECT_EQ(row_end(r), std::max<int64_t>(kr.end, 0));
                  for (int j = 0; j < len_k; ++j, ++checked)
                    bad += seen[static_cast<size_t>(r * len_k + j)] != (j >= kr.begin && j < kr.end ? 1 : 0);
                }
                ASSERT_EQ(bad, 0) << "len_k " << len_k << " sq " << sq << " group " << group << " left " << left
                                  << " right " << right << " splits " << splits << " block rows " << block_rows;
              }
  EXPECT_GT(checked, 0);
}

TEST(KvCachePlan, KeysPerSplitCoverTheSequence) {
  using sm90::decode::keys_per_split;
  for (int len : {0, 1, 63, 64, 65, 1000, 4096, 131071})
    for (int splits : {1, 2, 3, 7, 64, 128}) {
      const int share = keys_per_split(len, splits);
      EXPECT_EQ(share % sm90::decode::kStepKeys, 0);
      EXPECT_GE(static_cast<int64_t>(share) * splits, len) << len << " / " << splits;
      EXPECT_LT(share, len / splits + 1 + sm90::decode::kStepKeys) << len << " / " << splits;
    }
}

TEST(KvCachePlan, RowTilesBlocksAndWorkspace) {
  KvCacheProblem p;
  p.batch = 2; p.seqlen_q = 3; p.heads_q = 32; p.heads_kv = 4; p.head_dim = 128; p.capacity = 8192;
  sm90::decode::DecodePlan plan = sm90::decode::plan_decode(p, 132);
  // 24 rows per kv head: one 32-row block at head_dim 128.
  EXPECT_EQ(plan.row_tiles, 2);
  EXPECT_EQ(plan.row_blocks, 1);
  EXPECT_EQ(plan.num_splits, 16);  // 8 blocks a split, 132 slots: 128 blocks fill 97% of the wave
  EXPECT_EQ(plan.blocks, 8 * 16);
  const std::size_t rows = 2 * 32 * 3;
  EXPECT_EQ(plan.workspace, sm90::decode::align256(16 * rows * 128 * 4) + sm90::decode::align256(16 * rows * 4));
  p.head_dim = 256;  // one 16-row tile per block, one block per SM
  plan = sm90::decode::plan_decode(p, 132);
  EXPECT_EQ(plan.row_tiles, 1);
  EXPECT_EQ(plan.row_blocks, 2);
  EXPECT_EQ(plan.num_splits, 8);  // 16 blocks a split on 132 slots: 128 blocks fill 97% of the wave
  // Paged caches count every resident block (2 per SM at head_dim 128): 264 slots, where 32 splits
  // of 8 blocks fill 97% of the wave, within 95% of the best (33 splits, 100%; 31 fill 94%).
  p.head_dim = 128;
  p.paged = true;
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 32);
  p.paged = false;
  p.head_dim = 256;
  p.num_splits = 1;
  plan = sm90::decode::plan_decode(p, 132);
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_EQ(plan.workspace, 0u);
  p.seqlen_q = 0;  // only the append runs
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).blocks, 0);
}

// ---- (d) the C ABI --------------------------------------------------------------------------------


// The C ABI struct with the tensors of a C++ KvCacheArgs (options left at zero: the caller sets them).
hopattn_kvcache_args c_tensors_of(const KvCacheArgs& k) {
  hopattn_kvcache_args a{};
  a.q = to_c(k.q);
  a.k_cache = to_c(k.k_cache);
  a.v_cache = to_c(k.v_cache);
  a.cache_seqlens = to_c(k.cache_seqlens);
  a.page_table = to_c(k.page_table);
  a.k_new = to_c(k.k_new);
  a.v_new = to_c(k.v_new);
  a.out = to_c(k.out);
  a.lse = to_c(k.lse);
  return a;
}

// Runs c through attention_with_kvcache_cpu (into x) and, on the same inputs, through the C entry
// point with the options `set` writes into the struct (into y); expects the same out, lse and
// caches. Returns the struct, for further calls.
hopattn_kvcache_args expect_c_call_matches(const KvCase& c, uint64_t seed, KvHost& x, KvHost& y,
                                           const std::function<void(hopattn_kvcache_args&)>& set) {
  setup(x, c, seed);
  setup(y, c, seed);
  EXPECT_TRUE(attention_with_kvcache_cpu(x.args).ok());
  hopattn_kvcache_args a = c_tensors_of(y.args);
  set(a);
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_TRUE(x.out == y.out);
  EXPECT_EQ(0, std::memcmp(x.lse.data(), y.lse.data(), x.lse.size() * 4));
  EXPECT_TRUE(x.k_cache == y.k_cache && x.v_cache == y.v_cache);
  return a;
}

TEST(KvCacheCAbi, CpuCallMatchesTheCppApi) {
  KvCase c;
  c.cached = {3, 0, 9};
  c.page_size = 4;
  c.capacity = 16;
  c.seqlen_q = 2;
  c.seqlen_new = 1;
  c.causal = true;
  KvHost x, y;
  hopattn_kvcache_args a = expect_c_call_matches(c, 31, x, y, [](hopattn_kvcache_args& s) { s.causal = 1; });

  // Optional tensors left out (data NULL, ndim 0), and the library's messages.
  a.k_new = a.v_new = a.lse = hopattn_tensor{};
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_SUCCESS) << hopattn_last_error();
  a.num_splits = -1;
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("num_splits=-1"), std::string::npos);
  EXPECT_EQ(hopattn_attention_with_kvcache_workspace_size(&a), 0u);
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hopattn_last_error()), "args is null");
  a.num_splits = 0;
  a.k_new.dtype = 99;
  a.k_new.data = g_fake_memory;
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("k_new: unknown dtype code 99"), std::string::npos);
}

// The struct as of ABI 8 (unchanged in 9), field by field (x86-64 / LP64 offsets; the Python
// package's ctypes mirror).
TEST(KvCacheCAbi, StructLayout) {
  static_assert(sizeof(hopattn_tensor) == 80);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, q), 0u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, lse), 8 * 80u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, causal), 720u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, has_softmax_scale), 724u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, softmax_scale), 728u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, num_splits), 732u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, check_index_values), 736u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, has_window), 740u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, window_left), 744u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, window_right), 752u);
  EXPECT_EQ(offsetof(hopattn_kvcache_args, softcap), 760u);
  EXPECT_EQ(sizeof(hopattn_kvcache_args), 768u);
  EXPECT_GE(hopattn_abi_version(), 8);
}

TEST(KvCacheCAbi, WindowMatchesTheCppApi) {
  KvCase c;
  c.cached = {3, 0, 9};
  c.page_size = 4;
  c.capacity = 16;
  c.seqlen_q = 3;
  c.seqlen_new = 1;
  c.window = {2, 1};
  KvHost x, y;
  hopattn_kvcache_args a = expect_c_call_matches(c, 41, x, y, [](hopattn_kvcache_args& s) {
    s.has_window = 1;
    s.window_left = 2;
    s.window_right = 1;
  });
  // The window changes the result (so the fields are read) ...
  KvHost z;
  c.window = {};
  setup(z, c, 41);
  ASSERT_TRUE(attention_with_kvcache_cpu(z.args).ok());
  EXPECT_FALSE(z.out == x.out);
  // ... only with has_window: bounds that would be invalid are ignored without it.
  a.has_window = 0;
  a.window_left = -5;
  a.window_right = -9;
  a.k_new = a.v_new = hopattn_tensor{};  // appending again would be harmless, but keep the cache
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_SUCCESS) << hopattn_last_error();
  a.has_window = 1;
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("window.left=-5"), std::string::npos) << hopattn_last_error();
  a.window_left = 3;
  a.window_right = 2;
  a.causal = 1;
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("window.right=2 with causal"), std::string::npos)
      << hopattn_last_error();
  EXPECT_EQ(hopattn_attention_with_kvcache_workspace_size(&a), 0u);
}

// Softcap through the gathered-keys comparison (forward_cpu with the same cap): caps 0.5 and 30,
// every dtype, contiguous and paged, causal, an append, a window.
TEST(KvCacheCpu, SoftcapMatchesForwardOnGatheredKeys) {
  uint64_t seed = 900;
  for (DType t : {DType::kFP32, DType::kBF16, DType::kFP16})
    for (float cap : {0.5f, 30.f})
      for (int64_t page : {int64_t{0}, int64_t{4}})
        for (bool causal : {false, true}) {
          KvCase c;
          c.dtype = t;
          c.page_size = page;
          c.capacity = 48;
          c.seqlen_q = 3;
          c.causal = causal;
          c.seqlen_new = 2;
          c.softcap = cap;
          c.window = causal ? Window{5, 0} : Window{};
          c.cached = {0, 17, 45};
          check_against_gathered(c, seed++);
        }
}

// hopattn_kvcache_args.softcap reaches the reference (the CPU entry point), and changes the result.
TEST(KvCacheCAbi, SoftcapMatchesTheCppApi) {
  KvCase c;
  c.cached = {3, 0, 9};
  c.page_size = 4;
  c.capacity = 16;
  c.seqlen_q = 3;
  c.softcap = 0.5f;
  KvHost x, y, z;
  hopattn_kvcache_args a = expect_c_call_matches(c, 43, x, y, [](hopattn_kvcache_args& s) { s.softcap = 0.5f; });
  c.softcap = 0.f;
  setup(z, c, 43);
  ASSERT_TRUE(attention_with_kvcache_cpu(z.args).ok());
  EXPECT_FALSE(z.out == x.out);
  a.softcap = -2.f;
  EXPECT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("softcap"), std::string::npos) << hopattn_last_error();
  EXPECT_EQ(hopattn_attention_with_kvcache_workspace_size(&a), 0u);
}

}  // namespace
}  // namespace hopattn::test
