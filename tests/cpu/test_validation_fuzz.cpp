// Randomised argument validation: valid forward, backward, KV-cache and varlen arguments with one to
// three random mutations (sizes, strides, ndim, dtype, pointers, scale, window, softcap; extreme values
// among them), thousands of cases per entry point. Each case must end in one of two ways:
//   rejected: a message that names an argument;
//   accepted: arguments a kernel can index safely (every tensor's extent fits in 64-bit bytes, no
//             output aliases itself, the row counts fit the kernels' 32-bit tile counters).
// The workspace-size queries run on every case too. Under scripts/host-sanitize.sh (ASan + UBSan,
// part of CI) any overflow or out-of-bounds access in validation fails the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "valid_forward_args.hpp"
#include "../common/varlen_util.hpp"
#include "api/kvcache_problem.hpp"
#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {
namespace {

alignas(256) unsigned char g_fake[1024];  // a stand-in address; nothing reads or writes it

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// Values that sit on the edges validation has to handle.
int64_t edge_value(std::mt19937_64& rng) {
  static const int64_t pool[] = {-1, 0, 1, 2, 3, 7, 8, 17, 64, 127, 128, 4097,
                                 (int64_t{1} << 31) - 1, int64_t{1} << 31, int64_t{1} << 32, int64_t{1} << 40,
                                 int64_t{1} << 62, kI64Max, std::numeric_limits<int64_t>::min()};
  if (rng() % 4 == 0) return static_cast<int64_t>(rng() % 100000);
  return pool[rng() % (sizeof(pool) / sizeof(pool[0]))];
}

// The largest byte offset + 1 a tensor can touch, or -1 when that overflows int64 (or the tensor is
// empty: 0). Computed with overflow checks, so the test itself stays defined for any input.
int64_t extent_bytes(const TensorRef& t) {
  int64_t last = 0;  // largest element offset
  for (int i = 0; i < t.ndim && i < 4; ++i) {
    if (t.sizes[i] == 0) return 0;
    int64_t term;
    if (__builtin_mul_overflow(t.sizes[i] - 1, t.strides[i], &term) || __builtin_add_overflow(last, term, &last)) return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, int64_t{1}, &last) ||
      __builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(t.dtype)), &bytes))
    return -1;
  return bytes;
}

// True when no two index tuples of t map to one element: dims of size > 1 sorted by stride, each
// stride at least the extent of the dims inside it (a sufficient test; the layouts torch makes pass).
bool never_aliases(const TensorRef& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int i = 0; i < t.ndim && i < 4; ++i) {
    if (t.sizes[i] == 0) return true;
    if (t.sizes[i] > 1) dims.push_back({t.strides[i], t.sizes[i]});
  }
  std::sort(dims.begin(), dims.end());
  int64_t inner = 1;  // elements spanned by the dims already placed
  for (const auto& [stride, size] : dims) {
    if (stride < inner) return false;
    if (__builtin_mul_overflow(size - 1, stride, &inner) || __builtin_add_overflow(inner, int64_t{1}, &inner)) return false;
  }
  return true;
}

bool names_an_argument(const std::string& msg) {
  static const char* names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "softmax_scale",
                                "window", "softcap", "head_dim", "heads_q", "backward", "k_cache", "v_cache",
                                "k_new", "v_new", "cache_seqlens", "page_table", "num_splits", "cu_seqlens_q",
                                "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "q_descale", "k_descale",
                                "v_descale"};
  for (const char* n : names) {
    const std::string s(n);
    for (size_t at = msg.find(s); at != std::string::npos; at = msg.find(s, at + 1)) {
      const bool start = at == 0 || !std::isalnum(static_cast<unsigned char>(msg[at - 1]));
      const bool end = at + s.size() == msg.size() || !std::isalnum(static_cast<unsigned char>(msg[at + s.size()]));
      if (start && end) return true;
    }
  }
  return false;
}

ForwardArgs valid_forward() { return valid_forward_args(g_fake); }

// Sets one logical size in every tensor that carries it, with contiguous strides recomputed (no
// overflow: a stride that would overflow is left at int64's max), so that deep checks are reached.
enum Dim { kBatch, kSeqQ, kSeqK, kHeadsQ, kHeadsKv, kHeadDim };
void contiguous(TensorRef& t) {
  int64_t s = 1;
  for (int i = std::clamp(t.ndim, 0, 4) - 1; i >= 0; --i) {
    t.strides[i] = s;
    if (__builtin_mul_overflow(s, std::max<int64_t>(t.sizes[i], 1), &s)) s = kI64Max;
  }
}

struct Mutator {
  std::mt19937_64 rng;
  std::string log;  // what was done, for the failure message

  TensorRef* pick(std::vector<std::pair<const char*, TensorRef*>>& ts) {
    auto& [name, t] = ts[rng() % ts.size()];
    log += name;
    return t;
  }

  bool packed = false;  // varlen: (total, heads, head_dim) tensors and an lse of (heads_q, total_q)

  void set_dim(std::vector<std::pair<const char*, TensorRef*>>& ts, Dim d, int64_t v) {
    for (auto& [name, t] : ts) {
      const std::string n(name);
      if (n.find("descale") != std::string::npos) continue;  // (batch, heads, blocks): left to the other kinds
      const bool is_lse = n == "lse";
      const bool q_side = n == "q" || n == "out" || n == "dout" || n == "dq";
      int idx = -1;
      if (packed) {  // the batch lives in cu_seqlens, which stay as they are
        if (is_lse) idx = d == kHeadsQ ? 0 : d == kSeqQ ? 1 : -1;
        else if (d == kHeadDim) idx = 2;
        else if (q_side) idx = d == kSeqQ ? 0 : d == kHeadsQ ? 1 : -1;
        else idx = d == kSeqK ? 0 : d == kHeadsKv ? 1 : -1;
      } else if (is_lse) idx = d == kBatch ? 0 : d == kHeadsQ ? 1 : d == kSeqQ ? 2 : -1;
      else if (d == kBatch) idx = 0;
      else if (d == kHeadDim) idx = 3;
      else if (q_side) idx = d == kSeqQ ? 1 : d == kHeadsQ ? 2 : -1;
      else idx = d == kSeqK ? 1 : d == kHeadsKv ? 2 : -1;
      if (idx < 0 || std::min(t->ndim, 4) <= idx) continue;
      t->sizes[idx] = v;
      contiguous(*t);
    }
  }

  // One to three random changes (mutate) to the tensors `ts` and the scalar arguments.
  void mutate_some(std::vector<std::pair<const char*, TensorRef*>>& ts, std::optional<float>& scale, Window& w,
                   float& softcap, bool& causal) {
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) mutate(ts, scale, w, softcap, causal);
  }

  // One random change to the tensors `ts` and the scalar arguments.
  void mutate(std::vector<std::pair<const char*, TensorRef*>>& ts, std::optional<float>& scale, Window& w,
              float& softcap, bool& causal) {
    const int kind = static_cast<int>(rng() % 11);
    log += " [" + std::to_string(kind) + "] ";
    switch (kind) {
      case 0: { TensorRef* t = pick(ts); const int i = rng() % 4; t->sizes[i] = edge_value(rng); break; }
      case 1: { TensorRef* t = pick(ts); const int i = rng() % 4; t->strides[i] = edge_value(rng); break; }
      case 2: { TensorRef* t = pick(ts); static const int nd[] = {-1, 0, 2, 3, 4, 5, 100}; t->ndim = nd[rng() % 7]; break; }
      case 3: { TensorRef* t = pick(ts); t->dtype = static_cast<DType>(static_cast<int>(rng() % 8) - 1); break; }
      case 4: {
        TensorRef* t = pick(ts);
        static const uintptr_t off[] = {0, 1, 2, 4, 8, 15};
        t->data = rng() % 3 == 0 ? nullptr : static_cast<void*>(g_fake + off[rng() % 6]);
        break;
      }
      case 5: { const int64_t v = edge_value(rng); set_dim(ts, static_cast<Dim>(rng() % 6), v); log += std::to_string(v); break; }
      case 6: { TensorRef* t = pick(ts); t->strides[rng() % 3] = 0; break; }  // broadcast along a dim
      case 7: {
        static const float s[] = {0.f, -1.f, 1e-30f, 1e30f, std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(), 0.125f};
        scale = s[rng() % 7];
        break;
      }
      case 8: w.left = edge_value(rng); w.right = rng() % 2 ? edge_value(rng) : -1; break;
      case 9: {
        static const float c[] = {0.f, -1.f, 30.f, std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity()};
        softcap = c[rng() % 5];
        break;
      }
      default: causal = !causal; break;
    }
  }
};

// What an accepted call must satisfy before a kernel may index it: every tensor given (an absent
// one, or an lse left out, has nothing to reach) within int64 bytes, no output overlapping itself,
// and the query and key rows within the kernels' 32-bit counters.
void expect_indexable(const std::vector<std::pair<const char*, TensorRef*>>& ts,
                      const std::vector<std::string>& outputs, __int128 rows_q, __int128 rows_k, const std::string& log) {
  for (const auto& [name, t] : ts) {
    if (tensor_absent(*t) || (std::string(name) == "lse" && t->data == nullptr)) continue;
    EXPECT_GE(extent_bytes(*t), 0) << name << "'s extent overflows int64 but was accepted; " << log;
    if (std::find(outputs.begin(), outputs.end(), name) != outputs.end())
      EXPECT_TRUE(never_aliases(*t)) << "output " << name << " aliases itself but was accepted; " << log;
  }
  EXPECT_LE(rows_q, std::numeric_limits<int32_t>::max()) << "query rows beyond 2^31-1 accepted; " << log;
  EXPECT_LE(rows_k, std::numeric_limits<int32_t>::max()) << "key rows beyond 2^31-1 accepted; " << log;
}
__int128 rows(int64_t batch, int64_t heads, int64_t seqlen) { return static_cast<__int128>(batch) * heads * seqlen; }

// 4000 cases per entry point in CI (~0.1 s each under ASan). HOPATTN_FUZZ_CASES=N and
// HOPATTN_FUZZ_SEED=S run a deeper or different sweep by hand; the seeds of CI stay fixed.
const int kCases = [] {
  const char* n = std::getenv("HOPATTN_FUZZ_CASES");
  return n ? std::max(1, std::atoi(n)) : 4000;
}();
const uint64_t kSeed = [] {
  const char* s = std::getenv("HOPATTN_FUZZ_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 0;
}();

// The two outcomes of a fuzz test's cases. Both must be common, or the mutations are not exercising
// the checks; a rejection needs a message that names an argument.
struct Tally {
  int accepted = 0, rejected = 0;
  void reject(const Result& r, const std::string& log) {
    ++rejected;
    EXPECT_TRUE(names_an_argument(r.message)) << "\"" << r.message << "\" names no argument; " << log;
  }
  // One validation's outcome: counted, and an accepted call checked by on_accept.
  template <class OnAccept>
  void judge(const Result& r, const std::string& log, OnAccept on_accept) {
    if (!r.ok()) return reject(r, log);
    ++accepted;
    on_accept();
  }
  void expect_both_common(int min_rejected) const {
    if (::testing::Test::HasFailure()) return;  // the first failing case is the one to read
    EXPECT_GT(accepted, kCases / 20);
    EXPECT_GT(rejected, min_rejected);
  }
};

TEST(ValidationFuzz, Forward) {
  Tally tally;
  for (int c = 0; c < kCases; ++c) {
    Mutator m{std::mt19937_64(kSeed + 1000 + c), {}};
    ForwardArgs a = valid_forward();
    std::vector<std::pair<const char*, TensorRef*>> ts = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"lse", &a.lse}};
    m.mutate_some(ts, a.softmax_scale, a.window, a.softcap, a.causal);
    (void)forward_workspace_size(a);  // any args: a size or 0, never undefined behaviour
    for (Backend b : {Backend::kSm90, Backend::kCudaReference, Backend::kCpu, Backend::kSm90Fp8}) {
      AttnProblem p;
      const Result r = validate_forward(a, b, &p);
      tally.judge(r, m.log, [&] {
        expect_indexable(ts, {"out", "lse"}, rows(p.batch, p.heads_q, p.seqlen_q), rows(p.batch, p.heads_kv, p.seqlen_k), m.log);
      });
    }
    if (::testing::Test::HasFailure()) break;  // the first failing case is enough to read
  }
  tally.expect_both_common(kCases);
}

TEST(ValidationFuzz, Backward) {
  Tally tally;
  for (int c = 0; c < kCases; ++c) {
    Mutator m{std::mt19937_64(kSeed + 500000 + c), {}};
    const ForwardArgs f = valid_forward();
    BackwardArgs a;
    a.q = f.q; a.k = f.k; a.v = f.v; a.out = f.out; a.lse = f.lse;
    a.dout = f.q; a.dq = f.q; a.dk = f.k; a.dv = f.v;
    std::vector<std::pair<const char*, TensorRef*>> ts = {{"q", &a.q},       {"k", &a.k},   {"v", &a.v},
                                                          {"out", &a.out},   {"lse", &a.lse}, {"dout", &a.dout},
                                                          {"dq", &a.dq},     {"dk", &a.dk}, {"dv", &a.dv}};
    m.mutate_some(ts, a.softmax_scale, a.window, a.softcap, a.causal);
    a.deterministic = m.rng() % 2;
    (void)backward_workspace_size(a);
    for (Backend b : {Backend::kSm90, Backend::kCpu}) {
      AttnBackwardProblem p;
      const Result r = validate_backward(a, b, &p);
      tally.judge(r, m.log, [&] {
        expect_indexable(ts, {"dq", "dk", "dv"}, rows(p.fwd.batch, p.fwd.heads_q, p.fwd.seqlen_q),
                         rows(p.fwd.batch, p.fwd.heads_kv, p.fwd.seqlen_k), m.log);
      });
    }
    if (::testing::Test::HasFailure()) break;
  }
  tally.expect_both_common(kCases / 2);
}

TEST(ValidationFuzz, KvCache) {
  Tally tally;
  const BuiltKernel b = first_built_kernel();
  for (int c = 0; c < kCases; ++c) {
    Mutator m{std::mt19937_64(kSeed + 900000 + c), {}};
    // A paged cache of 10 pages x 8 tokens, 3 sequences appending 2 tokens each (the index tensors
    // stay as they are: their declared sizes match their host vectors, which the CPU backend reads).
    std::vector<int32_t> seqlens = {5, 0, 22}, pages = {0, 1, 2, 3, -1, -1, 6, 7, 8};
    KvCacheArgs a;
    a.q = make_tensor(g_fake, b.dtype, 3, 2, 4, b.head_dim);
    a.out = make_tensor(g_fake, b.dtype, 3, 2, 4, b.head_dim);
    a.k_cache = make_tensor(g_fake, b.dtype, 10, 8, 2, b.head_dim);
    a.v_cache = make_tensor(g_fake, b.dtype, 10, 8, 2, b.head_dim);
    a.k_new = make_tensor(g_fake, b.dtype, 3, 2, 2, b.head_dim);
    a.v_new = make_tensor(g_fake, b.dtype, 3, 2, 2, b.head_dim);
    a.lse = make_tensor(g_fake, DType::kFP32, 3, 4, 2);
    a.cache_seqlens.data = seqlens.data();
    a.cache_seqlens.dtype = DType::kInt32;
    a.cache_seqlens.ndim = 1;
    a.cache_seqlens.sizes[0] = 3;
    a.cache_seqlens.strides[0] = 1;
    a.page_table.data = pages.data();
    a.page_table.dtype = DType::kInt32;
    a.page_table.ndim = 2;
    a.page_table.sizes[0] = a.page_table.sizes[1] = 3;
    a.page_table.strides[0] = 3;
    a.page_table.strides[1] = 1;
    std::vector<std::pair<const char*, TensorRef*>> ts = {{"q", &a.q},         {"out", &a.out},     {"k_cache", &a.k_cache},
                                                          {"v_cache", &a.v_cache}, {"k_new", &a.k_new}, {"v_new", &a.v_new},
                                                          {"lse", &a.lse}};
    m.mutate_some(ts, a.softmax_scale, a.window, a.softcap, a.causal);
    (void)attention_with_kvcache_workspace_size(a);
    for (Backend be : {Backend::kSm90, Backend::kCpu}) {
      KvCacheProblem p;
      const Result r = validate_kvcache(a, be, &p);
      tally.judge(r, m.log, [&] {
        std::vector<std::string> written = {"out", "lse"};
        if (p.seqlen_new > 0 || !tensor_absent(a.k_new)) written.insert(written.end(), {"k_cache", "v_cache"});
        expect_indexable(ts, written, rows(p.batch, p.heads_q, p.seqlen_q), 0, m.log);
      });
    }
    if (::testing::Test::HasFailure()) break;
  }
  tally.expect_both_common(kCases / 2);
}

TEST(ValidationFuzz, Fp8Forward) {
  Tally tally;
  const BuiltKernel b = first_built_kernel();  // its dtype is the output's; FP8 kernels exist per output dtype
  for (int c = 0; c < kCases; ++c) {
    Mutator m{std::mt19937_64(kSeed + 1700000 + c), {}};
    Fp8ForwardArgs a;
    a.q = make_tensor(g_fake, DType::kE4M3, 2, 64, 4, b.head_dim);
    a.k = make_tensor(g_fake, DType::kE4M3, 2, 48, 2, b.head_dim);
    a.v = make_tensor(g_fake, DType::kE4M3, 2, 48, 2, b.head_dim);
    a.q_descale = make_tensor(g_fake, DType::kFP32, 2, 4, 1);  // one 128-row block
    a.k_descale = make_tensor(g_fake, DType::kFP32, 2, 2, 1);
    a.v_descale = make_tensor(g_fake, DType::kFP32, 2, 2, 1);
    a.v_descale.ndim = 2;
    a.out = make_tensor(g_fake, b.dtype, 2, 64, 4, b.head_dim);
    a.lse = make_tensor(g_fake, DType::kFP32, 2, 4, 64);
    std::vector<std::pair<const char*, TensorRef*>> ts = {
        {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"q_descale", &a.q_descale}, {"k_descale", &a.k_descale},
        {"v_descale", &a.v_descale}, {"out", &a.out}, {"lse", &a.lse}};
    Window w;  // the FP8 call has no window or softcap: mutated, then dropped
    float softcap = 0.f;
    m.mutate_some(ts, a.softmax_scale, w, softcap, a.causal);
    (void)forward_fp8_workspace_size(a);
    Fp8AttnProblem p;
    const Result r = validate_forward_fp8(a, &p);
    tally.judge(r, m.log, [&] {
      expect_indexable(ts, {"out"}, rows(p.base.batch, p.base.heads_q, p.base.seqlen_q), 0, m.log);
    });
    if (::testing::Test::HasFailure()) break;
  }
  tally.expect_both_common(kCases / 2);
}

TEST(ValidationFuzz, Varlen) {
  Tally tally;
  const BuiltKernel b = first_built_kernel();
  for (int c = 0; c < kCases; ++c) {
    Mutator m{std::mt19937_64(kSeed + 1300000 + c), {}};
    m.packed = true;
    // 3 sequences: q lengths {4, 0, 6} of 12 tokens, k lengths {5, 2, 0} of 8; heads 4/2. The index
    // tensors are real (the CPU backend reads them) and stay unmutated.
    std::vector<int32_t> cu_q = {0, 4, 4, 10}, cu_k = {0, 5, 7, 7};
    VarlenForwardArgs a;
    a.q = make_tensor(g_fake, b.dtype, 12, 4, b.head_dim);
    a.out = make_tensor(g_fake, b.dtype, 12, 4, b.head_dim);
    a.k = make_tensor(g_fake, b.dtype, 8, 2, b.head_dim);
    a.v = make_tensor(g_fake, b.dtype, 8, 2, b.head_dim);
    a.lse = lse_tensor(g_fake, 4, 12);
    a.cu_seqlens_q = index_tensor(cu_q);
    a.cu_seqlens_k = index_tensor(cu_k);
    a.max_seqlen_q = 6;
    a.max_seqlen_k = 5;
    std::vector<std::pair<const char*, TensorRef*>> ts = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"lse", &a.lse}};
    m.mutate_some(ts, a.softmax_scale, a.window, a.softcap, a.causal);
    (void)forward_varlen_workspace_size(a);
    for (Backend be : {Backend::kSm90, Backend::kCpu, Backend::kSm90Fp8}) {
      VarlenProblem p;
      const Result r = validate_forward_varlen(a, be, &p);
      tally.judge(r, m.log, [&] {
        expect_indexable(ts, {"out"}, rows(1, p.total_q, p.heads_q), rows(1, p.total_k, p.heads_kv), m.log);
      });
    }
    if (::testing::Test::HasFailure()) break;
  }
  tally.expect_both_common(kCases / 2);
}

}  // namespace
}  // namespace hopattn::test
