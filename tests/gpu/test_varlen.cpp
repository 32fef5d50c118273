// The Hopper varlen forward pass (hopattn::forward_varlen) against the fp64 CUDA reference run on
// each sequence separately: a batch-1 ForwardArgs view into the packed device tensors (rows from
// cu_seqlens[b], the seqused lengths, the token stride as the seq stride). Over dtype x head dim x
// causal x GQA x length mixes (empty sequences, lengths around the 128-row tile, len_q != len_k,
// 40 random lengths, one 4097), plus seqused_q/k (with NaN key rows past seqused_k, which the
// kernel must not read), fused-QKV views, a padded out, no lse, a
// max_seqlen above every length, run-to-run bitwise stability and the check_index_values mode.
// out and lse are NaN-poisoned before each call: rows of a sequence must all be written, rows
// beyond seqused_q must be 0 / -inf, and rows past cu_seqlens_q[batch] (and out's row padding)
// must still hold the poison bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"
#include "../common/varlen_util.hpp"
#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {
namespace {

// ---- inputs --------------------------------------------------------------------------------------

// `n` lengths uniform in [lo, hi], reproducible on any platform.
std::vector<int> random_lengths(size_t n, uint64_t seed, int lo, int hi) {
  FastRng rng{seed};
  std::vector<int> v(n);
  for (int& x : v) x = lo + static_cast<int>(rng.next() % static_cast<uint64_t>(hi - lo + 1));
  return v;
}

bool is_nan_bits(uint16_t h, DType t) {
  return t == DType::kBF16 ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}

// The (dtype, head_dim) pairs with an sm90 forward kernel in this build.
std::vector<std::pair<DType, int>> built_pairs() {
  std::vector<std::pair<DType, int>> v;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      if (has_forward_kernel(t, d)) v.emplace_back(t, d);
  return v;
}

// One built pair, preferring bf16 / head_dim 128; false if nothing is built.
bool preferred_pair(DType* t, int* d) {
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (int hd : {128, 64, 256})
      if (has_forward_kernel(dt, hd)) {
        *t = dt;
        *d = hd;
        return true;
      }
  return false;
}

// ---- a varlen problem on the device --------------------------------------------------------------

struct VarlenCase {
  std::string name;
  DType dtype = DType::kBF16;
  int head_dim = 128;
  bool causal = false;
  int64_t heads_q = 8, heads_kv = 8;
  std::vector<int> len_q, len_k;
  std::optional<std::vector<int>> used_q, used_k;
  bool nan_past_used_k = false;  // K and V rows [seqused_k, len_k) of every sequence hold NaN
  int64_t extra_q = 37;  // packed rows past cu_seqlens_q[batch]: never written (poison must stay)
  int64_t extra_k = 5;   // key rows past cu_seqlens_k[batch] (finite values: the kernel may read them)
  // q, k, v as views into one (total, heads_q + 2 * heads_kv, head_dim) buffer: a fused QKV
  // projection; with heads_q == heads_kv that is (total, 3, heads, head_dim).
  bool fused_qkv = false;
  int64_t out_pad = 0;  // extra elements per token row of out (a multiple of 8): never written
  bool with_lse = true;
  int64_t max_seqlen_q = -1, max_seqlen_k = -1;  // -1: the largest length
  Window window{};  // sliding window, per sequence (-1, -1: none)
  float softcap = 0.f;
};

// A case named prefix + dtype, head dim and mask, with those and the head counts set.
VarlenCase named_case(const std::string& prefix, DType t, int d, bool causal, int64_t heads_q, int64_t heads_kv) {
  VarlenCase c;
  c.name = prefix + dtype_name(t) + "_d" + std::to_string(d) + (causal ? "_causal" : "_full");
  c.dtype = t;
  c.head_dim = d;
  c.causal = causal;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  return c;
}

struct VarlenRun {
  VarlenCase c;
  int64_t batch = 0, total_q = 0, total_k = 0, hq = 0, hkv = 0, d = 0, es = 2;
  int64_t q_tok = 0, k_tok = 0, o_tok = 0;  // token strides (elements); the head stride is d
  std::vector<int32_t> cu_q, cu_k, used_q, used_k;
  DeviceBuffer data, out, lse, cu_q_dev, cu_k_dev, used_q_dev, used_k_dev, workspace;
  size_t q_off = 0, k_off = 0, v_off = 0;  // byte offsets of q, k, v in `data`
  VarlenForwardArgs args;

  int64_t len_q(int64_t b) const { return cu_q[b + 1] - cu_q[b]; }
  int64_t len_k(int64_t b) const { return cu_k[b + 1] - cu_k[b]; }
  int64_t seq_q(int64_t b) const { return c.used_q ? (*c.used_q)[b] : len_q(b); }  // rows attended
  int64_t seq_k(int64_t b) const { return c.used_k ? (*c.used_k)[b] : len_k(b); }
  uint8_t* data_at(size_t off) const { return static_cast<uint8_t*>(data.get()) + off; }
};

// Allocates and fills (random q/k/v, uploaded index tensors) the problem `c` describes; out and lse
// are left unpoisoned (poison_outputs).
void setup(VarlenRun& r, const VarlenCase& c) {
  r.c = c;
  r.batch = static_cast<int64_t>(c.len_q.size());
  r.hq = c.heads_q;
  r.hkv = c.heads_kv;
  r.d = c.head_dim;
  r.es = static_cast<int64_t>(dtype_size(c.dtype));
  r.cu_q = prefix_sums(c.len_q);
  r.cu_k = prefix_sums(c.len_k);
  const int64_t hq = r.hq, hkv = r.hkv, d = r.d, es = r.es;
  size_t elements = 0;
  if (c.fused_qkv) {
    r.total_q = r.total_k = std::max<int64_t>(r.cu_q.back(), r.cu_k.back()) + c.extra_q;
    r.q_tok = r.k_tok = (hq + 2 * hkv) * d;
    r.q_off = 0;
    r.k_off = static_cast<size_t>(hq * d * es);
    r.v_off = static_cast<size_t>((hq + hkv) * d * es);
    elements = static_cast<size_t>(r.total_q * r.q_tok);
  } else {
    r.total_q = r.cu_q.back() + c.extra_q;
    r.total_k = r.cu_k.back() + c.extra_k;
    r.q_tok = hq * d;
    r.k_tok = hkv * d;
    r.q_off = 0;
    r.k_off = static_cast<size_t>(r.total_q * r.q_tok * es);
    r.v_off = r.k_off + static_cast<size_t>(r.total_k * r.k_tok * es);
    elements = static_cast<size_t>(r.total_q * r.q_tok + 2 * r.total_k * r.k_tok);
  }
  r.o_tok = hq * d + c.out_pad;

  // Fresh inputs per case; q spans a wider range than k so scores spread (peaked softmax rows).
  // Everything in the buffer is random and finite, including rows no sequence covers.
  const uint64_t seed = std::hash<std::string>{}(c.name);
  r.data = DeviceBuffer(elements * static_cast<size_t>(es));
  {
    std::vector<uint16_t> host;
    if (!c.fused_qkv) {  // q in [-3, 3), then k and v in [-1, 1)
      const size_t nq = static_cast<size_t>(r.total_q * r.q_tok);
      host = random_elements(nq, seed + 1, c.dtype, -3.f, 3.f);
      const std::vector<uint16_t> kv = random_elements(elements - nq, seed, c.dtype, -1.f, 1.f);
      host.insert(host.end(), kv.begin(), kv.end());
    } else {  // everything in [-1, 1), then q's heads of every token in [-3, 3)
      host = random_elements(elements, seed, c.dtype, -1.f, 1.f);
      FastRng rng{seed + 1};
      for (int64_t t = 0; t < r.total_q; ++t)
        for (int64_t x = 0; x < hq * d; ++x) {
          const float u = static_cast<float>(rng.next() >> 40) * (1.f / 16777216.f);
          const float v = -3.f + 6.f * u;
          host[static_cast<size_t>(t * r.q_tok + x)] = c.dtype == DType::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
        }
    }
    if (c.nan_past_used_k) {  // unused rows as a KV cache may leave them: reading one gives NaN
      const uint16_t nan = c.dtype == DType::kBF16 ? 0x7FC0 : 0x7E00;
      for (int64_t b = 0; b < r.batch; ++b)
        for (int64_t t = r.seq_k(b); t < r.len_k(b); ++t)
          for (size_t off : {r.k_off, r.v_off})
            std::fill_n(&host[off / static_cast<size_t>(es) + static_cast<size_t>((r.cu_k[b] + t) * r.k_tok)],
                        hkv * d, nan);
    }
    r.data.upload(host.data(), host.size() * 2);
  }
  r.out = DeviceBuffer(static_cast<size_t>(r.total_q * r.o_tok * es));
  if (c.with_lse) r.lse = DeviceBuffer(static_cast<size_t>(hq * r.total_q) * 4);

  r.cu_q_dev = DeviceBuffer(r.cu_q.size() * 4);
  r.cu_q_dev.upload(r.cu_q);
  r.cu_k_dev = DeviceBuffer(r.cu_k.size() * 4);
  r.cu_k_dev.upload(r.cu_k);

  VarlenForwardArgs& a = r.args;
  a = VarlenForwardArgs{};
  a.q = packed(r.data_at(r.q_off), c.dtype, r.total_q, hq, d, r.q_tok);
  a.k = packed(r.data_at(r.k_off), c.dtype, r.total_k, hkv, d, r.k_tok);
  a.v = packed(r.data_at(r.v_off), c.dtype, r.total_k, hkv, d, r.k_tok);
  a.out = packed(r.out.get(), c.dtype, r.total_q, hq, d, r.o_tok);
  if (c.with_lse) a.lse = lse_tensor(r.lse.get(), hq, r.total_q);
  a.cu_seqlens_q = index_tensor(r.cu_q_dev.get(), r.batch + 1);
  a.cu_seqlens_k = index_tensor(r.cu_k_dev.get(), r.batch + 1);
  if (c.used_q) {
    r.used_q.assign(c.used_q->begin(), c.used_q->end());
    r.used_q_dev = DeviceBuffer(r.used_q.size() * 4);
    r.used_q_dev.upload(r.used_q);
    a.seqused_q = index_tensor(r.used_q_dev.get(), r.batch);
  }
  if (c.used_k) {
    r.used_k.assign(c.used_k->begin(), c.used_k->end());
    r.used_k_dev = DeviceBuffer(r.used_k.size() * 4);
    r.used_k_dev.upload(r.used_k);
    a.seqused_k = index_tensor(r.used_k_dev.get(), r.batch);
  }
  int64_t max_q = 0, max_k = 0;
  for (int64_t b = 0; b < r.batch; ++b) {
    max_q = std::max(max_q, r.len_q(b));
    max_k = std::max(max_k, r.len_k(b));
  }
  a.max_seqlen_q = c.max_seqlen_q >= 0 ? c.max_seqlen_q : max_q;
  a.max_seqlen_k = c.max_seqlen_k >= 0 ? c.max_seqlen_k : max_k;
  a.causal = c.causal;
  a.window = c.window;
  a.softcap = c.softcap;
}

void poison_outputs(VarlenRun& r) {
  r.out.fill(0xFF);  // NaN in bf16 / fp16
  if (r.c.with_lse) r.lse.fill(0xFF);  // NaN in fp32
}

// forward_varlen's workspace form on a fresh workspace of 0x7F bytes: a tile counter that the call
// failed to zero would send every CTA's second draw past the last tile, leaving poisoned rows.
Result forward_varlen_with_workspace(VarlenRun& r) {
  r.workspace = DeviceBuffer(forward_varlen_workspace_size(r.args));
  r.workspace.fill(0x7F);
  return forward_varlen(r.args, r.workspace.get(), r.workspace.bytes());
}

struct Outputs {
  std::vector<uint8_t> out, lse;  // the whole buffers, padding and uncovered rows included
  bool operator==(const Outputs& o) const { return out == o.out && lse == o.lse; }
};

Outputs download_outputs(const VarlenRun& r) {
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  Outputs o;
  o.out = r.out.download();
  if (r.c.with_lse) o.lse = r.lse.download();
  return o;
}

// ---- checking against the reference -------------------------------------------------------------

// Collects the problems of one case and reports the first few in one failure.
struct Problems {
  explicit Problems(std::string n) : name(std::move(n)) {}
  Problems(const Problems&) = delete;
  Problems& operator=(const Problems&) = delete;
  std::string name;
  int count = 0;
  std::string text;
  void add(const std::string& m) {
    if (count++ < 10) text += "\n  " + m;
  }
  ~Problems() {
    if (count > 0) ADD_FAILURE() << name << ": " << count << " problem(s):" << text;
  }
};

// Relative L2 error of lse over entries finite in both, relative to max(rms(ref), 1) so that a
// sequence of a few rows with scores near 0 is not judged on noise; sets `mismatch` on a NaN or a
// differing -inf pattern.
double lse_error(const std::vector<float>& got, const std::vector<float>& ref, bool* mismatch) {
  double diff = 0, norm = 0;
  size_t n = 0;
  *mismatch = false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i]) || std::isinf(got[i]) != std::isinf(ref[i]) ||
        (std::isinf(got[i]) && got[i] != ref[i])) {
      *mismatch = true;
      continue;
    }
    if (std::isinf(ref[i])) continue;
    diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
    ++n;
  }
  return n == 0 ? 0.0 : std::sqrt(diff / std::max(norm, static_cast<double>(n)));
}

// One reference launch: sequence b, query heads [h0, h0 + nh) (nh is 1 or heads_q), query rows
// [r0, r0 + rows) of the sequence and its first `keys` keys (the causal cut, see plan_slices).
struct Slice {
  int64_t b, h0, nh, r0, rows, keys;
  size_t out_off = 0, lse_off = 0;  // elements into the reference scratch buffers
};

// The reference costs about rows * visible keys * heads * head_dim fp64 FMAs (one block per query
// row). A sequence cheaper than kFullSequenceBudget is compared whole; a dearer one on two query
// heads that rotate with b (so a batch covers every head, and each sequence two of them), and
// above kTwoHeadBudget only on 64-row windows at the start, middle (off the tile grid) and end.
// The whole file's reference work stays near 3e10 (test_forward.cpp's is ~9e10).
constexpr double kFullSequenceBudget = 2e7;
constexpr double kTwoHeadBudget = 3e7;
constexpr int64_t kWindow = 64;

double visible_keys(int64_t r0, int64_t rows, int64_t sq, int64_t sk, bool causal) {
  double v = 0;
  for (int64_t i = r0; i < r0 + rows; ++i) v += causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk;
  return v;
}

std::vector<Slice> plan_slices(const VarlenRun& r) {
  std::vector<Slice> slices;
  const bool causal = r.c.causal;
  for (int64_t b = 0; b < r.batch; ++b) {
    const int64_t sq = r.seq_q(b), sk = r.seq_k(b);
    if (sq == 0) continue;
    const double vis = visible_keys(0, sq, sq, sk, causal);
    // Windowed runs compare whole sequences (the key cut below is the causal mask's only); their
    // tests keep sequences small.
    const bool windowed = r.c.window.left >= 0 || r.c.window.right >= 0;
    if (windowed || vis * r.hq * r.d <= kFullSequenceBudget) {
      slices.push_back({b, 0, r.hq, 0, sq, sk});
      continue;
    }
    std::vector<int64_t> heads = {b % r.hq, r.hq - 1 - b % r.hq};
    if (heads[0] == heads[1]) heads.pop_back();
    std::vector<std::pair<int64_t, int64_t>> windows;  // (r0, rows)
    if (vis * static_cast<double>(heads.size()) * r.d <= kTwoHeadBudget || sq <= 3 * kWindow) {
      windows.emplace_back(0, sq);
    } else {
      windows.emplace_back(0, kWindow);
      windows.emplace_back(std::min(sq - kWindow, std::max<int64_t>(kWindow, sq / 2 - 37)), kWindow);
      windows.emplace_back(sq - kWindow, kWindow);
    }
    for (int64_t h : heads)
      for (const auto& [r0, rows] : windows) {
        // Under the bottom-right mask rows r0.. see keys j <= i + sk - sq; cut to
        // r0 + rows + sk - sq keys the window is a valid problem with the same mask.
        const int64_t keys = causal ? std::clamp<int64_t>(r0 + rows + sk - sq, 0, sk) : sk;
        slices.push_back({b, h, 1, r0, rows, keys});
      }
  }
  return slices;
}

// The batch-1 ForwardArgs view of a slice into the packed device tensors: q rows start at
// cu_seqlens_q[b] + r0, k/v rows at cu_seqlens_k[b]; the token stride becomes the seq stride, the
// head stride stays head_dim; out/lse go to the reference's scratch buffers.
ForwardArgs slice_view(const VarlenRun& r, const Slice& s, void* out_ref, float* lse_ref) {
  const DType t = r.c.dtype;
  const int64_t group = r.hq / r.hkv, d = r.d, es = r.es;
  const int64_t kv0 = s.nh == r.hq ? 0 : s.h0 / group, nkv = s.nh == r.hq ? r.hkv : 1;
  auto view = [&](size_t base_off, int64_t row, int64_t head, int64_t rows, int64_t heads, int64_t tok) {
    TensorRef v = make_tensor(r.data_at(base_off + static_cast<size_t>((row * tok + head * d) * es)), t, 1, rows,
                              heads, d);
    v.strides[1] = tok;
    v.strides[2] = d;
    return v;
  };
  ForwardArgs f;
  f.q = view(r.q_off, r.cu_q[s.b] + s.r0, s.h0, s.rows, s.nh, r.q_tok);
  f.k = view(r.k_off, r.cu_k[s.b], kv0, s.keys, nkv, r.k_tok);
  f.v = view(r.v_off, r.cu_k[s.b], kv0, s.keys, nkv, r.k_tok);
  f.out = make_tensor(static_cast<uint8_t*>(out_ref) + s.out_off * es, t, 1, s.rows, s.nh, d);
  f.lse = make_tensor(lse_ref + s.lse_off, DType::kFP32, 1, s.nh, s.rows);
  f.causal = r.c.causal;
  f.softmax_scale = r.args.softmax_scale;
  f.window = r.c.window;
  f.softcap = r.c.softcap;
  return f;
}

std::string seq_desc(const VarlenRun& r, int64_t b) {
  return "seq " + std::to_string(b) + " (len_q " + std::to_string(r.len_q(b)) + " used " + std::to_string(r.seq_q(b)) +
         ", len_k " + std::to_string(r.len_k(b)) + " used " + std::to_string(r.seq_k(b)) + ")";
}

// Every rule on the outputs of one forward_varlen call.
void check_outputs(const VarlenRun& r, const Outputs& o) {
  Problems p{r.c.name};
  const DType t = r.c.dtype;
  const int64_t hq = r.hq, d = r.d, es = r.es;
  const bool with_lse = r.c.with_lse;
  auto out_bits = [&](int64_t tok, int64_t x) {  // x: element within the token row (h * d + c)
    uint16_t h;
    std::memcpy(&h, &o.out[static_cast<size_t>((tok * r.o_tok + x) * es)], 2);
    return h;
  };
  auto out_row = [&](int64_t tok, int64_t h) {
    return decode(&o.out[static_cast<size_t>((tok * r.o_tok + h * d) * es)], static_cast<size_t>(d), t);
  };
  auto lse_at = [&](int64_t h, int64_t tok) {
    float f;
    std::memcpy(&f, &o.lse[static_cast<size_t>((h * r.total_q + tok) * 4)], 4);
    return f;
  };
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // 1. Structure: rows of a sequence written (no NaN), rows beyond seqused_q 0 / -inf.
  for (int64_t b = 0; b < r.batch; ++b) {
    int64_t unwritten = 0, bad_tail = 0;
    for (int64_t i = 0; i < r.len_q(b); ++i) {
      const int64_t tok = r.cu_q[b] + i;
      const bool used = i < r.seq_q(b);
      for (int64_t h = 0; h < hq; ++h) {
        if (used) {
          for (int64_t c = 0; c < d; ++c) unwritten += is_nan_bits(out_bits(tok, h * d + c), t);
          if (with_lse) unwritten += std::isnan(lse_at(h, tok));
        } else {
          for (float x : out_row(tok, h)) bad_tail += x != 0.f;  // +-0; NaN counts as bad
          if (with_lse) bad_tail += lse_at(h, tok) != neg_inf;
        }
      }
    }
    if (unwritten) p.add(seq_desc(r, b) + ": " + std::to_string(unwritten) + " out/lse elements left unwritten (NaN)");
    if (bad_tail)
      p.add(seq_desc(r, b) + ": " + std::to_string(bad_tail) + " elements of rows beyond seqused_q are not 0 / -inf");
  }
  // 2. Rows past cu_seqlens_q[batch], and out's row padding: the poison, bit for bit.
  {
    int64_t touched = 0, touched_lse = 0, touched_pad = 0;
    for (int64_t tok = r.cu_q.back(); tok < r.total_q; ++tok) {
      for (int64_t x = 0; x < hq * d; ++x) touched += out_bits(tok, x) != 0xFFFFu;
      if (with_lse)
        for (int64_t h = 0; h < hq; ++h) {
          uint32_t bits;
          std::memcpy(&bits, &o.lse[static_cast<size_t>((h * r.total_q + tok) * 4)], 4);
          touched_lse += bits != 0xFFFFFFFFu;
        }
    }
    for (int64_t tok = 0; tok < r.total_q; ++tok)
      for (int64_t x = hq * d; x < r.o_tok; ++x) touched_pad += out_bits(tok, x) != 0xFFFFu;
    if (touched) p.add(std::to_string(touched) + " out elements past cu_seqlens_q[batch] were written");
    if (touched_lse) p.add(std::to_string(touched_lse) + " lse entries past cu_seqlens_q[batch] were written");
    if (touched_pad) p.add(std::to_string(touched_pad) + " elements of out's row padding were written");
  }

  // 3. Values against the fp64 reference, sequence by sequence.
  std::vector<Slice> slices = plan_slices(r);
  size_t out_elems = 0, lse_elems = 0;
  for (Slice& s : slices) {
    s.out_off = out_elems;
    s.lse_off = lse_elems;
    out_elems += static_cast<size_t>(s.rows * s.nh * d);
    lse_elems += static_cast<size_t>(s.rows * s.nh);
  }
  DeviceBuffer out_ref(out_elems * static_cast<size_t>(es)), lse_ref(lse_elems * 4);
  for (const Slice& s : slices) {
    const Result rr = forward_reference_cuda(slice_view(r, s, out_ref.get(), static_cast<float*>(lse_ref.get())));
    if (!rr.ok()) {
      p.add(seq_desc(r, s.b) + ": reference failed: " + rr.message);
      return;
    }
  }
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> ref_out_bytes = out_ref.download();
  std::vector<float> ref_lse_all(lse_elems);
  lse_ref.download(ref_lse_all.data(), lse_elems * 4);

  const double out_tol = t == DType::kBF16 ? 1e-2 : 3e-3;  // as test_forward.cpp
  constexpr double kLseTol = 1e-4;
  size_t si = 0;
  for (int64_t b = 0; b < r.batch; ++b) {
    std::vector<float> got, ref, got_lse, ref_lse;
    int64_t nonzero_no_key = 0;
    for (; si < slices.size() && slices[si].b == b; ++si) {
      const Slice& s = slices[si];
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t hh = 0; hh < s.nh; ++hh) {
          const int64_t tok = r.cu_q[b] + s.r0 + i, h = s.h0 + hh;
          const std::vector<float> g = out_row(tok, h);
          const std::vector<float> f =
              decode(&ref_out_bytes[(s.out_off + static_cast<size_t>((i * s.nh + hh) * d)) * es], static_cast<size_t>(d), t);
          const float rl = ref_lse_all[s.lse_off + static_cast<size_t>(hh * s.rows + i)];
          if (std::isinf(rl))  // the row sees no key: out exactly 0
            for (float x : g) nonzero_no_key += x != 0.f;
          got.insert(got.end(), g.begin(), g.end());
          ref.insert(ref.end(), f.begin(), f.end());
          if (with_lse) {
            got_lse.push_back(lse_at(h, tok));
            ref_lse.push_back(rl);
          }
        }
    }
    if (got.empty()) continue;
    const double err = rel_l2_error(got, ref);  // +inf on any NaN
    if (!(err <= out_tol))
      p.add(seq_desc(r, b) + ": out rel_l2 " + std::to_string(err) + " > " + std::to_string(out_tol));
    if (nonzero_no_key) p.add(seq_desc(r, b) + ": " + std::to_string(nonzero_no_key) + " nonzero out elements in rows that see no key");
    if (with_lse) {
      bool mismatch = false;
      const double lerr = lse_error(got_lse, ref_lse, &mismatch);
      if (mismatch) p.add(seq_desc(r, b) + ": lse NaN or -inf pattern differs from the reference");
      if (!(lerr <= kLseTol)) p.add(seq_desc(r, b) + ": lse rel_l2 " + std::to_string(lerr) + " > 1e-4");
    }
  }
}

// Sets up `c`, runs forward_varlen (the workspace form, as the Python package calls it) on poisoned
// outputs and checks everything; returns the outputs.
Outputs run_and_check(const VarlenCase& c) {
  SCOPED_TRACE(c.name);
  VarlenRun r;
  setup(r, c);
  poison_outputs(r);
  const Result res = forward_varlen_with_workspace(r);
  EXPECT_TRUE(res.ok()) << c.name << ": " << res.message;
  if (!res.ok()) return {};
  Outputs o = download_outputs(r);
  check_outputs(r, o);
  return o;
}

// ---- the grid ------------------------------------------------------------------------------------

enum class Mix { kMixed, kLong, kQkDiffer, kRandom40 };

const char* mix_name(Mix m) {
  switch (m) {
    case Mix::kMixed: return "mixed";
    case Mix::kLong: return "long";
    case Mix::kQkDiffer: return "qkdiffer";
    case Mix::kRandom40: return "random40";
  }
  return "?";
}

// Lengths of each mix: empty sequences, lengths around the 128-row tile, one long sequence, keys
// both longer and shorter than queries (bottom-right causal alignment; len_k = 0 < len_q and
// len_q = 0 < len_k), and 40 random lengths (queries and keys independent) in [0, 600].
void mix_lengths(Mix m, std::vector<int>* lq, std::vector<int>* lk) {
  switch (m) {
    case Mix::kMixed: *lq = *lk = {0, 1, 17, 127, 128, 129, 1000}; return;
    case Mix::kLong: *lq = *lk = {4097, 3, 255}; return;
    case Mix::kQkDiffer:
      *lq = {5, 300, 64, 1, 200, 0, 3, 130, 77};
      *lk = {300, 5, 1, 64, 0, 200, 3, 257, 77};
      return;
    case Mix::kRandom40:
      *lq = random_lengths(40, 1234, 0, 600);
      *lk = random_lengths(40, 5678, 0, 600);
      return;
  }
}

struct GridCase {
  DType dtype;
  int head_dim;
  bool causal;
  int64_t heads_q, heads_kv;
  Mix mix;
};

std::string grid_name(const GridCase& g) {
  return std::string(dtype_name(g.dtype)) + "_d" + std::to_string(g.head_dim) + (g.causal ? "_causal" : "_full") +
         "_h" + std::to_string(g.heads_q) + "x" + std::to_string(g.heads_kv) + "_" + mix_name(g.mix);
}

std::vector<GridCase> grid_cases() {
  std::vector<GridCase> v;
  const int64_t heads[][2] = {{8, 8}, {8, 2}, {8, 1}};
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      for (bool causal : {false, true})
        for (const auto& h : heads)
          for (Mix m : {Mix::kMixed, Mix::kLong, Mix::kQkDiffer, Mix::kRandom40})
            v.push_back({t, d, causal, h[0], h[1], m});
  return v;
}

class VarlenVsReference : public ::testing::TestWithParam<GridCase> {};

TEST_P(VarlenVsReference, MatchesPerSequenceFp64Reference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const GridCase g = GetParam();
  if (!has_forward_kernel(g.dtype, g.head_dim)) GTEST_SKIP() << "not built: " << build_instantiations();
  VarlenCase c;
  c.name = grid_name(g);
  c.dtype = g.dtype;
  c.head_dim = g.head_dim;
  c.causal = g.causal;
  c.heads_q = g.heads_q;
  c.heads_kv = g.heads_kv;
  mix_lengths(g.mix, &c.len_q, &c.len_k);
  run_and_check(c);
}

INSTANTIATE_TEST_SUITE_P(Sm90, VarlenVsReference, ::testing::ValuesIn(grid_cases()),
                         [](const ::testing::TestParamInfo<GridCase>& info) { return grid_name(info.param); });

// ---- seqused, layouts, max_seqlen, empty batches --------------------------------------------------

const std::vector<int> kLenQ = {0, 1, 17, 130, 64, 200, 255, 3, 9};
const std::vector<int> kLenK = {5, 1, 40, 130, 64, 100, 300, 0, 9};

// seqused_q and/or seqused_k below the lengths for some sequences, 0 for some, equal for others;
// causal alignment then uses the used lengths.
TEST(Sm90Varlen, Seqused) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::vector<int> used_q = {0, 0, 9, 128, 64, 77, 255, 3, 1};
  const std::vector<int> used_k = {5, 0, 40, 1, 0, 100, 129, 0, 9};
  for (const auto& [t, d] : built_pairs())
    for (bool causal : {false, true})
      for (int which = 0; which < 3; ++which) {  // both, q only, k only
        VarlenCase c;
        c.name = std::string("seqused_") + (which == 0 ? "both" : which == 1 ? "q" : "k") + "_" + dtype_name(t) + "_d" +
                 std::to_string(d) + (causal ? "_causal" : "_full");
        c.dtype = t;
        c.head_dim = d;
        c.causal = causal;
        c.heads_q = 8;
        c.heads_kv = 2;
        c.len_q = kLenQ;
        c.len_k = kLenK;
        if (which != 2) c.used_q = used_q;
        if (which != 1) c.used_k = used_k;
        run_and_check(c);
      }
}

// Key rows past seqused_k are never read when a sequence has at least one key tile of used keys
// (at most 176 keys here): its last tile is loaded ending at its last used key (FwdMask's
// kTailShift). Those rows hold NaN, which a read would carry into out (0 * NaN in P V). Used key
// counts that are and are not multiples of the tiles; one sequence fully used.
TEST(Sm90Varlen, RowsPastSequsedKAreNotRead) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (const auto& [t, d] : built_pairs())
    for (bool causal : {false, true}) {
      VarlenCase c = named_case("nan_past_used_k_", t, d, causal, 8, 2);
      c.len_q = {100, 300, 50, 200, 1, 129};
      c.len_k = {400, 300, 1000, 200, 500, 600};
      c.used_k = std::vector<int>{390, 176, 777, 200, 181, 512};
      c.nan_past_used_k = true;
      run_and_check(c);
    }
}

// q, k, v as views into one fused (total, heads_q + 2 heads_kv, head_dim) buffer (for MHA the
// (total, 3, heads, head_dim) of a fused QKV projection; token stride 3 * heads * head_dim), out
// with padded rows, and lse omitted.
TEST(Sm90Varlen, StridedViewsAndNoLse) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for (const auto& [t, d] : built_pairs())
    for (bool causal : {false, true})
      for (int layout = 0; layout < 3; ++layout) {
        VarlenCase c;
        c.dtype = t;
        c.head_dim = d;
        c.causal = causal;
        c.len_q = kLenQ;
        c.len_k = kLenK;
        const std::string suffix = std::string("_") + dtype_name(t) + "_d" + std::to_string(d) + (causal ? "_causal" : "_full");
        if (layout == 0) {  // (total, 3, 8, d), lse present
          c.name = "fused_qkv_mha" + suffix;
          c.fused_qkv = true;
          c.heads_q = c.heads_kv = 8;
        } else if (layout == 1) {  // GQA fused (total, 8 + 2 * 2, d), padded out, no lse
          c.name = "fused_qkv_gqa_padded_out_nolse" + suffix;
          c.fused_qkv = true;
          c.heads_q = 8;
          c.heads_kv = 2;
          c.out_pad = 64;
          c.with_lse = false;
        } else {  // contiguous, no lse
          c.name = "contiguous_nolse" + suffix;
          c.heads_q = 8;
          c.heads_kv = 1;
          c.with_lse = false;
        }
        run_and_check(c);
      }
}

// max_seqlen_q / max_seqlen_k are upper bounds: twice every real length changes nothing.
TEST(Sm90Varlen, MaxSeqlenAboveEveryLength) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const int64_t max_q = *std::max_element(kLenQ.begin(), kLenQ.end());
  const int64_t max_k = *std::max_element(kLenK.begin(), kLenK.end());
  for (const auto& [t, d] : built_pairs())
    for (bool causal : {false, true})
      for (int which = 0; which < 3; ++which) {  // q, k, both
        VarlenCase c;
        c.name = std::string("max_seqlen_x2_") + (which == 0 ? "q" : which == 1 ? "k" : "both") + "_" + dtype_name(t) +
                 "_d" + std::to_string(d) + (causal ? "_causal" : "_full");
        c.dtype = t;
        c.head_dim = d;
        c.causal = causal;
        c.heads_q = 8;
        c.heads_kv = 2;
        c.len_q = kLenQ;
        c.len_k = kLenK;
        if (which != 1) c.max_seqlen_q = 2 * max_q;
        if (which != 0) c.max_seqlen_k = 2 * max_k;
        run_and_check(c);
      }
}

// Batch 0 (cu_seqlens = {0}) and batches of empty sequences: nothing to attend, and the only
// writes allowed are the 0 / -inf rows of sequences whose keys are all empty.
TEST(Sm90Varlen, EmptyBatchAndEmptySequences) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  DType t;
  int d;
  if (!preferred_pair(&t, &d)) GTEST_SKIP() << "not built: " << build_instantiations();
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> mixes = {
      {{}, {}}, {{0, 0, 0}, {0, 5, 0}}, {{3, 0, 130}, {0, 0, 0}}, {{0, 200}, {100, 0}}};
  int n = 0;
  for (const auto& [lq, lk] : mixes)
    for (bool causal : {false, true}) {
      VarlenCase c;
      c.name = "empty_" + std::to_string(n++);
      c.dtype = t;
      c.head_dim = d;
      c.causal = causal;
      c.heads_q = 8;
      c.heads_kv = 2;
      c.len_q = lq;
      c.len_k = lk;
      run_and_check(c);
    }
}

// Sliding windows per sequence (bottom-right aligned within each): lengths 0 and 1, around the
// tiles, len_q != len_k both ways; each side of the window alone, both, the diagonal, causal with a
// left bound. Every built (dtype, head dim).
TEST(Sm90Varlen, SlidingWindow) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  struct W { int64_t left, right; bool causal; };
  const W windows[] = {{0, 0, false}, {16, -1, false}, {-1, 33, false}, {100, 50, false}, {130, 0, true}};
  int n = 0;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256}) {
      if (find_forward_kernel(t, d) == nullptr) continue;
      for (const W& w : windows) {
        VarlenCase c;
        c.name = "window_" + std::to_string(n++);
        c.dtype = t;
        c.head_dim = d;
        c.causal = w.causal;
        c.window = {w.left, w.right};
        c.heads_q = 4;
        c.heads_kv = 2;
        c.len_q = {0, 1, 130, 300, 77, 257};
        c.len_k = {5, 1, 130, 100, 400, 0};
        c.softcap = n % 2 == 0 ? 0.f : 5.f;  // every other window also softcapped
        run_and_check(c);
      }
    }
}

// Softcapping without a window (the softcap kernels' unbounded run-time bounds), causal or not.
TEST(Sm90Varlen, Softcap) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  int n = 0;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256}) {
      if (find_forward_kernel(t, d) == nullptr || (t == DType::kFP16 && d != 128)) continue;
      for (bool causal : {false, true}) {
        VarlenCase c;
        c.name = "softcap_" + std::to_string(n++);
        c.dtype = t;
        c.head_dim = d;
        c.causal = causal;
        c.heads_q = 8;
        c.heads_kv = 2;
        c.len_q = {0, 1, 130, 300, 77, 257, 1000};
        c.len_k = {5, 1, 130, 100, 400, 0, 1000};
        c.softcap = causal ? 2.f : 30.f;
        run_and_check(c);
      }
    }
}

// The varlen tile scheduler (VarlenTileScheduler) finds each work index's sequence by prefix sums over
// 32 sequences at a time: 150 sequences (a fifth of them empty, lengths up to 700, so the scan
// crosses several 32-sequence chunks, some holding no tile at all) at every head dim, causal (folded
// units at d128/d256, longest first at d64) and not, with fewer sequences than CTAs (5) too.
TEST(Sm90Varlen, SchedulerCoversEveryTileOnce) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  int n = 0;
  for (int d : {64, 128, 256}) {
    if (find_forward_kernel(DType::kBF16, d) == nullptr) continue;
    for (bool causal : {false, true})
      for (int count : {150, 5}) {
        VarlenCase c;
        c.name = "sched_" + std::to_string(n++);
        c.dtype = DType::kBF16;
        c.head_dim = d;
        c.causal = causal;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.len_q = random_lengths(count, 100 + n, 0, 700);
        c.len_k = random_lengths(count, 200 + n, 0, 700);
        for (size_t i = 0; i < c.len_q.size(); i += 5) c.len_q[i] = 0;  // every fifth empty
        for (size_t i = 32; i < c.len_q.size() && i < 64; ++i) c.len_q[i] = 0;  // a chunk with no tile
        run_and_check(c);
      }
  }
}

// The dynamic tile order (the workspace form) against the static round-robin (the form without a
// workspace) on batches of many tiles per CTA: 48 sequences of up to 1500 tokens and 8 query heads
// are ~1,700 192-row tiles at d64, ~13 per CTA, so every CTA draws from the counter many times.
// The two outputs must be bitwise equal (a tile's arithmetic does not depend on the CTA that runs
// it) and the dynamic one must match the reference. The d64 causal kernels are the ones with the
// dynamic order; d64 non-causal and d128 run too (static either way: the workspace form must leave
// them alone).
TEST(Sm90Varlen, DynamicOrderMatchesStaticOrderBitwise) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  int n = 0;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128}) {
      if (!has_forward_kernel(t, d)) continue;
      for (bool causal : {true, false}) {
        VarlenCase c = named_case("dynamic_", t, d, causal, 8, causal ? 2 : 8);
        c.len_q = random_lengths(48, 300 + n, 0, 1500);
        c.len_k = causal ? c.len_q : random_lengths(48, 400 + n, 0, 1500);
        ++n;
        SCOPED_TRACE(c.name);
        VarlenRun r;
        setup(r, c);
        poison_outputs(r);
        Result res = forward_varlen(r.args);  // static
        ASSERT_TRUE(res.ok()) << res.message;
        const Outputs fixed_order = download_outputs(r);
        poison_outputs(r);
        res = forward_varlen_with_workspace(r);
        ASSERT_TRUE(res.ok()) << res.message;
        const Outputs drawn = download_outputs(r);
        check_outputs(r, drawn);
        EXPECT_TRUE(drawn == fixed_order) << c.name << ": the dynamic order's output differs from the static one's";
      }
    }
  if (n == 0) GTEST_SKIP() << "no d64/d128 16-bit kernel built: " << build_instantiations();
}

// ---- run-to-run stability --------------------------------------------------------------------------

// 40 sequences of random lengths, causal, GQA: run 1 is checked against the reference, runs 2..10
// (outputs re-poisoned each time) must reproduce it bit for bit, so a race shows as a difference.
TEST(Sm90Varlen, RepeatedRunsAreBitwiseIdentical) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  VarlenCase c;
  if (!preferred_pair(&c.dtype, &c.head_dim)) GTEST_SKIP() << "not built: " << build_instantiations();
  c.name = "repeat";
  c.causal = true;
  c.heads_q = 16;
  c.heads_kv = 4;
  c.len_q = random_lengths(40, 42, 0, 900);
  c.len_k = random_lengths(40, 43, 0, 900);
  VarlenRun r;
  setup(r, c);
  Outputs first;
  for (int run = 0; run < 10; ++run) {
    poison_outputs(r);
    const Result res = forward_varlen(r.args);
    ASSERT_TRUE(res.ok()) << res.message;
    Outputs o = download_outputs(r);
    if (run == 0) {
      check_outputs(r, o);
      if (HasFailure()) return;
      first = std::move(o);
    } else if (!(o == first)) {
      size_t diff = 0;
      for (size_t i = 0; i < o.out.size(); ++i) diff += o.out[i] != first.out[i];
      size_t diff_lse = 0;
      for (size_t i = 0; i < o.lse.size(); ++i) diff_lse += o.lse[i] != first.lse[i];
      FAIL() << "run " << run << " differs from run 0 in " << diff << " out bytes and " << diff_lse << " lse bytes";
    }
  }
}

// ---- validation on the GPU path ------------------------------------------------------------------

// A valid device problem to mutate: batch 3, q lengths {4, 2, 6} of 12 rows (+2 uncovered), k
// lengths {5, 2, 1} of 8 rows, seqused_k {5, 2, 1}; heads 4/2.
struct ValidDeviceArgs {
  VarlenRun r;
  explicit ValidDeviceArgs(DType t, int d) {
    VarlenCase c;
    c.name = "validation";
    c.dtype = t;
    c.head_dim = d;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.len_q = {4, 2, 6};
    c.len_k = {5, 2, 1};
    c.used_k = std::vector<int>{5, 2, 1};
    c.extra_q = 2;
    c.extra_k = 0;
    setup(r, c);
    r.args.check_index_values = true;
  }
  // Uploads `values` over the device copy of an index tensor (same element count).
  static void set(DeviceBuffer& buf, const std::vector<int32_t>& values) { buf.upload(values); }
};

void expect_invalid(const VarlenForwardArgs& a, const std::string& fragment) {
  const Result r = forward_varlen(a);
  EXPECT_EQ(static_cast<int>(r.status), static_cast<int>(Status::kInvalidArgument)) << r.message;
  EXPECT_NE(r.message.find(fragment), std::string::npos) << "message \"" << r.message << "\" lacks \"" << fragment << "\"";
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
}

TEST(Sm90VarlenValidation, IndexValuesCheckedWithFlag) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  DType t;
  int d;
  if (!preferred_pair(&t, &d)) GTEST_SKIP() << "not built: " << build_instantiations();
  {
    ValidDeviceArgs v(t, d);  // the unmutated base passes the checks
    const Result r = forward_varlen(v.r.args);
    ASSERT_TRUE(r.ok()) << r.message;
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  }
  {
    SCOPED_TRACE("(a) cu_seqlens_q not non-decreasing");
    ValidDeviceArgs v(t, d);
    ValidDeviceArgs::set(v.r.cu_q_dev, {0, 6, 4, 10});  // lengths 6, -2, 6: only the order is wrong
    expect_invalid(v.r.args, "cu_seqlens_q");
  }
  {
    SCOPED_TRACE("(b) cu_seqlens_k[batch] > total_k");
    ValidDeviceArgs v(t, d);
    ValidDeviceArgs::set(v.r.cu_k_dev, {0, 5, 7, 9});  // total_k = 8; lengths 5, 2, 2 <= max_seqlen_k 5
    ValidDeviceArgs::set(v.r.used_k_dev, {5, 2, 2});
    expect_invalid(v.r.args, "cu_seqlens_k");
  }
  {
    SCOPED_TRACE("(c) seqused_k[b] > length");
    ValidDeviceArgs v(t, d);
    ValidDeviceArgs::set(v.r.used_k_dev, {5, 3, 1});  // sequence 1 has 2 keys
    expect_invalid(v.r.args, "seqused_k");
  }
  {
    SCOPED_TRACE("(d) a length above max_seqlen_q");
    ValidDeviceArgs v(t, d);
    v.r.args.max_seqlen_q = 5;  // sequence 2 has 6 queries
    expect_invalid(v.r.args, "max_seqlen_q");
  }
}

TEST(Sm90VarlenValidation, ValidIndicesWithFlagMatchDefaultBitwise) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  DType t;
  int d;
  if (!preferred_pair(&t, &d)) GTEST_SKIP() << "not built: " << build_instantiations();
  VarlenCase c;
  c.name = "check_index_values";
  c.dtype = t;
  c.head_dim = d;
  c.causal = true;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.len_q = kLenQ;
  c.len_k = kLenK;
  c.used_q = std::vector<int>{0, 1, 17, 100, 64, 200, 250, 3, 0};
  VarlenRun r;
  setup(r, c);
  Outputs plain, checked;
  for (bool flag : {false, true}) {
    r.args.check_index_values = flag;
    poison_outputs(r);
    const Result res = forward_varlen(r.args);
    ASSERT_TRUE(res.ok()) << "check_index_values=" << flag << ": " << res.message;
    (flag ? checked : plain) = download_outputs(r);
  }
  check_outputs(r, plain);
  EXPECT_TRUE(checked == plain) << "check_index_values=true changed the outputs";
}

TEST(Sm90VarlenValidation, CuSeqlensDtypeCheckedWithoutFlag) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  DType t;
  int d;
  if (!preferred_pair(&t, &d)) GTEST_SKIP() << "not built: " << build_instantiations();
  ValidDeviceArgs v(t, d);
  v.r.args.check_index_values = false;
  v.r.args.cu_seqlens_q.dtype = DType::kFP32;
  expect_invalid(v.r.args, "cu_seqlens_q");
}

}  // namespace
}  // namespace hopattn::test
