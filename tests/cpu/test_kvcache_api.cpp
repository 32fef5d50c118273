// KV-cache decoding on the CPU: attention_with_kvcache_cpu against forward_cpu on each sequence's
// keys gathered by hand (bitwise: the same reference code), the in-place append (appended rows
// equal k_new/v_new, every other cache byte untouched), rows that see no key; one test per rule of
// validate_kvcache and of the index-value checks; the split planning (heuristic, clamps, workspace
// layout); and the C ABI entry points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "api/kvcache_problem.hpp"
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
};

std::string describe(const KvCase& c) {
  return std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : " full") + " sq=" + std::to_string(c.seqlen_q) +
         " new=" + std::to_string(c.seqlen_new) + " h=" + std::to_string(c.heads_q) + "/" + std::to_string(c.heads_kv) +
         (c.page_size ? " page=" + std::to_string(c.page_size) : " contiguous") + " pad=" + std::to_string(c.row_pad);
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

TEST(KvCacheValidation, LseScaleSplits) {
  expect_invalid([](ValidArgs& v) { v.a.lse.dtype = DType::kBF16; }, "lse: dtype must be fp32");
  expect_invalid([](ValidArgs& v) { v.a.lse.sizes[2] = 1; }, "lse.sizes[2]=1 but expected 2 (batch, heads_q, seqlen_q)");
  expect_invalid([](ValidArgs& v) { v.a.lse.strides[0] = 9; }, "lse must be contiguous: strides[0]=9");
  expect_invalid([](ValidArgs& v) { v.a.softmax_scale = -1.f; }, "softmax_scale must be finite and > 0");
  expect_invalid([](ValidArgs& v) { v.a.softmax_scale = INFINITY; }, "softmax_scale");
  expect_invalid([](ValidArgs& v) { v.a.num_splits = -1; }, "num_splits=-1 is negative");
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
  r = attention_with_kvcache(w.a, nullptr, 0);
  EXPECT_EQ(r.status, Status::kUnsupportedDevice) << r.message;
}

// ---- (c) planning: splits, row tiles, workspace ---------------------------------------------------

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
  // Never below 256 keys a split.
  EXPECT_EQ(choose_num_splits(8, 1024, slots, 0), 4);
  EXPECT_EQ(choose_num_splits(8, 300, slots, 0), 1);
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
  // Paged caches count every resident block (2 per SM at head_dim 128): 264 slots, where 31 splits
  // of 8 blocks fill 94% of the wave, within 95% of the best (32 splits, 97%).
  p.head_dim = 128;
  p.paged = true;
  EXPECT_EQ(sm90::decode::plan_decode(p, 132).num_splits, 31);
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

hopattn_tensor c_tensor(const TensorRef& t) {
  hopattn_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.ndim = t.ndim;
  for (int i = 0; i < 4; ++i) {
    c.sizes[i] = t.sizes[i];
    c.strides[i] = t.strides[i];
  }
  return c;
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
  setup(x, c, 31);
  setup(y, c, 31);
  ASSERT_TRUE(attention_with_kvcache_cpu(x.args).ok());
  hopattn_kvcache_args a{};
  const KvCacheArgs& k = y.args;
  a.q = c_tensor(k.q);
  a.k_cache = c_tensor(k.k_cache);
  a.v_cache = c_tensor(k.v_cache);
  a.cache_seqlens = c_tensor(k.cache_seqlens);
  a.page_table = c_tensor(k.page_table);
  a.k_new = c_tensor(k.k_new);
  a.v_new = c_tensor(k.v_new);
  a.out = c_tensor(k.out);
  a.lse = c_tensor(k.lse);
  a.causal = 1;
  ASSERT_EQ(hopattn_attention_with_kvcache_cpu(&a), HOPATTN_SUCCESS) << hopattn_last_error();
  EXPECT_TRUE(x.out == y.out);
  EXPECT_EQ(0, std::memcmp(x.lse.data(), y.lse.data(), x.lse.size() * 4));
  EXPECT_TRUE(x.k_cache == y.k_cache && x.v_cache == y.v_cache);

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

}  // namespace
}  // namespace hopattn::test
