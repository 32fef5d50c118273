// The Hopper varlen backward pass (hopattn::backward_varlen) against the fixed-length GPU path run
// on each sequence alone: hopattn::forward, then hopattn::backward, on batch-1 views into the same
// packed device tensors (rows from cu_seqlens[b], the seqused lengths, the token stride as the seq
// stride), writing separate reference gradients. Both sides run the same kernels with the same
// roundings, so they should differ only in the order of fp32 sums (dq's atomics, GQA groups):
// the bounds are tighter than test_backward.cpp's 2e-2 against the CPU reference.
//
// Over dtype x head dim x causal x (MHA, GQA) x length mixes (empty sequences, lengths around the
// 128-row tile, len_q != len_k both ways with len_k = 0 < len_q and len_q = 0 < len_k, 12 random
// lengths), plus seqused_q/k, max_seqlen above every length, deterministic-mode bitwise repeats,
// fused QKV / dQKV views with padded rows, calls with no query row or no key row at all, and bad
// arguments. dq/dk/dv and the workspace are NaN-poisoned (0xFF bytes) before every call: every row
// of a sequence must be written, rows past seqused must be exactly 0, and rows past
// cu_seqlens[batch] (37 of them in every packed tensor), like the gradient rows' padding, must keep
// the poison bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"
#include "../common/varlen_util.hpp"
#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {
namespace {

constexpr int64_t kExtraRows = 37;  // rows past cu_seqlens[batch] in every packed tensor
constexpr int64_t kGradPad = 64;    // fused layouts: elements after each token row of dq/dk/dv (never written)
constexpr int64_t kOutPad = 64;     // fused layouts: row padding of out
constexpr int64_t kDoutPad = 32;    // fused layouts: row padding of dout
constexpr const char* kGradName[3] = {"dq", "dk", "dv"};

// Same kernels on both sides: per tensor and sequence, ||g - ref|| / ||ref|| (the norm floored at
// kNormFloor per element, for gradients that are rounding noise, e.g. a single key) and
// max |g - ref| / max |ref| (one wrong row hides in the L2 norm of a long sequence). A reference
// that is exactly 0 wants max |g| <= kZeroRefAbsTol, as test_backward.cpp.
double rel_tol(DType t) { return t == DType::kBF16 ? 1e-2 : 3e-3; }
double elem_tol(DType t) { return t == DType::kBF16 ? 4e-2 : 1.5e-2; }
constexpr double kNormFloor = 1e-3;
constexpr double kZeroRefAbsTol = 1e-6;

bool fwd_and_bwd_built(DType t, int d) { return has_forward_kernel(t, d) && has_backward_kernel(t, d); }

// Every (dtype, head_dim) with a forward and a backward sm90 kernel in this build.
std::vector<std::pair<DType, int>> built() {
  std::vector<std::pair<DType, int>> v;
  for (int d : {64, 128, 256})
    for (DType t : {DType::kBF16, DType::kFP16})
      if (fwd_and_bwd_built(t, d)) v.emplace_back(t, d);
  return v;
}

// Runs body(dtype, head_dim, causal) for every built pair, causal off and on; skips the test without
// an sm_90 device or a built pair.
void for_each_config(const std::function<void(DType, int, bool)>& body) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const auto pairs = built();
  if (pairs.empty()) GTEST_SKIP() << "not built: " << build_instantiations();
  for (const auto& [t, d] : pairs)
    for (bool causal : {false, true}) body(t, d, causal);
}

std::string tag(DType t, int d, bool causal) {
  return std::string(dtype_name(t)) + "_d" + std::to_string(d) + (causal ? "_causal" : "_full");
}

// ---- inputs -------------------------------------------------------------------------------------

// A 64-bit LCG (Knuth's MMIX constants): fast, reproducible, good enough for test data.
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s((seed ^ 0x2545F4914F6CDD1Dull) * 0x9E3779B97F4A7C15ull) {}
  uint64_t step() { return s = s * 6364136223846793005ull + 1442695040888963407ull; }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(step() >> 40) * (1.f / 16777216.f); }
};

// n 16-bit elements of dtype t at dst, uniform in [lo, hi).
void fill_random(uint8_t* dst, size_t n, Lcg& g, DType t, float lo, float hi) {
  for (size_t i = 0; i < n; ++i) {
    const float x = g.uniform(lo, hi);
    const uint16_t h = t == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

std::vector<int> lengths_upto(size_t n, int hi, uint64_t seed) {
  Lcg g(seed);
  std::vector<int> v(n);
  for (int& x : v) x = static_cast<int>((g.step() >> 33) % static_cast<uint64_t>(hi + 1));
  return v;
}

// ---- a varlen problem on the device -------------------------------------------------------------

struct Case {
  std::string name;
  std::vector<int> len_q, len_k;                   // per sequence: cu_seqlens are their prefix sums
  std::optional<std::vector<int>> used_q, used_k;  // seqused_q / seqused_k
  DType dtype = DType::kBF16;
  int head_dim = 128;
  int64_t heads_q = 8, heads_kv = 8;
  bool causal = false;
  // q/k/v and dq/dk/dv as views into one (total, heads_q + 2 heads_kv, head_dim) tensor each (the
  // (total, 3, heads, head_dim) of a fused QKV projection for MHA), the gradients' rows kGradPad
  // elements longer; out and dout with padded rows.
  bool fused = false;
  bool deterministic = false;
  int64_t max_seqlen_factor = 1;  // max_seqlen_q/k = factor * the longest length
  std::optional<float> softmax_scale;
  Window window{};  // sliding window, per sequence (-1, -1: none)
  float softcap = 0.f;
};

Case make_case(std::string name, DType t, int d, bool causal, int64_t hq, int64_t hkv, std::vector<int> lq,
               std::vector<int> lk) {
  Case c;
  c.name = std::move(name);
  c.dtype = t;
  c.head_dim = d;
  c.causal = causal;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.len_q = std::move(lq);
  c.len_k = std::move(lk);
  return c;
}

// A (rows, heads, head_dim) tensor `offset` bytes into its buffer; token stride `tok` elements,
// head stride head_dim.
struct Packed {
  size_t offset = 0;
  int64_t rows = 0, heads = 0, tok = 0;
};

struct Instance {
  Case c;
  int64_t batch = 0, hq = 0, hkv = 0, d = 0, total_q = 0, total_k = 0;
  size_t es = 2;
  std::vector<int32_t> cu_q, cu_k;
  std::array<Packed, 3> in, grad;  // q, k, v in in_buf; dq, dk, dv in grad_buf
  Packed out, dout;
  DeviceBuffer in_buf, grad_buf, out_buf, dout_buf, lse_buf, index_buf, workspace;
  VarlenBackwardArgs args;

  int64_t len(bool q_side, int64_t b) const {
    const std::vector<int32_t>& cu = q_side ? cu_q : cu_k;
    return cu[b + 1] - cu[b];
  }
  int64_t used(bool q_side, int64_t b) const {  // rows that take part: seqused, else the length
    const auto& u = q_side ? c.used_q : c.used_k;
    return u ? (*u)[b] : len(q_side, b);
  }
  int32_t* index_at(size_t i) const { return static_cast<int32_t*>(index_buf.get()) + i; }
};

std::string seq_desc(const Instance& r, int64_t b) {
  std::ostringstream s;
  s << "seq " << b << " (len_q " << r.len(true, b) << " used " << r.used(true, b) << ", len_k " << r.len(false, b)
    << " used " << r.used(false, b) << ")";
  return s.str();
}

// q, k, v (or dq, dk, dv): three dense blocks back to back, or (fused) one (total, hq + 2 hkv, d)
// tensor whose token rows are `pad` elements longer (total_q == total_k then).
std::array<Packed, 3> trio(const Instance& r, bool fused, int64_t pad, size_t* bytes) {
  const int64_t hq = r.hq, hkv = r.hkv, d = r.d;
  if (fused) {
    const int64_t tok = (hq + 2 * hkv) * d + pad;
    *bytes = static_cast<size_t>(r.total_q * tok) * r.es;
    return {Packed{0, r.total_q, hq, tok}, Packed{static_cast<size_t>(hq * d) * r.es, r.total_k, hkv, tok},
            Packed{static_cast<size_t>((hq + hkv) * d) * r.es, r.total_k, hkv, tok}};
  }
  const size_t nq = static_cast<size_t>(r.total_q * hq * d) * r.es,
               nk = static_cast<size_t>(r.total_k * hkv * d) * r.es;
  *bytes = nq + 2 * nk;
  return {Packed{0, r.total_q, hq, hq * d}, Packed{nq, r.total_k, hkv, hkv * d},
          Packed{nq + nk, r.total_k, hkv, hkv * d}};
}

uint8_t* at(const DeviceBuffer& buf, size_t offset) { return static_cast<uint8_t*>(buf.get()) + offset; }

// The varlen (total, heads, head_dim) view of `p`.
TensorRef packed_view(const DeviceBuffer& buf, const Packed& p, DType t, int64_t d) {
  return packed(at(buf, p.offset), t, p.rows, p.heads, d, p.tok);
}

// The batch-1 (1, n, heads, head_dim) view of rows [r0, r0 + n) of `p`: the token stride becomes
// the seq stride.
TensorRef seq_view(const DeviceBuffer& buf, const Packed& p, DType t, int64_t d, int64_t r0, int64_t n, size_t es) {
  TensorRef v = make_tensor(at(buf, p.offset + static_cast<size_t>(r0 * p.tok) * es), t, 1, n, p.heads, d);
  v.strides[0] = n * p.tok;
  v.strides[1] = p.tok;
  return v;
}

// The leading `ndim` dims of a contiguous (d0, d1, 1) tensor: int32 index arrays (ndim 1, d1 = 1)
// and varlen's (heads_q, total_q) lse (ndim 2).
TensorRef leading_dims(void* data, DType t, int ndim, int64_t d0, int64_t d1) {
  TensorRef v = make_tensor(data, t, d0, d1, 1);
  v.ndim = ndim;
  return v;
}

// What a forward call shares with the backward call of the same attention (fixed or varlen).
template <class Fwd, class Bwd>
Fwd forward_part(const Bwd& a) {
  Fwd f;
  f.q = a.q;
  f.k = a.k;
  f.v = a.v;
  f.out = a.out;
  f.lse = a.lse;
  f.causal = a.causal;
  f.softmax_scale = a.softmax_scale;
  f.window = a.window;
  f.softcap = a.softcap;
  return f;
}

// Allocates and fills the problem `c` (random finite q/k/v/dout everywhere, padding and uncovered
// rows included; the index tensors in one int32 buffer: cu_q, cu_k, seqused_q, seqused_k), runs
// forward_varlen into a poisoned out/lse and fills r.args for backward_varlen.
Result setup(Instance& r, const Case& c) {
  r.c = c;
  r.cu_q = prefix_sums(c.len_q);
  r.cu_k = prefix_sums(c.len_k);
  r.batch = static_cast<int64_t>(c.len_q.size());
  std::tie(r.hq, r.hkv, r.d, r.es) = std::make_tuple(c.heads_q, c.heads_kv, int64_t{c.head_dim}, dtype_size(c.dtype));
  if (c.fused) {
    r.total_q = r.total_k = std::max(r.cu_q.back(), r.cu_k.back()) + kExtraRows;
  } else {
    r.total_q = r.cu_q.back() + kExtraRows;
    r.total_k = r.cu_k.back() + kExtraRows;
  }
  size_t in_bytes = 0, grad_bytes = 0;
  r.in = trio(r, c.fused, 0, &in_bytes);
  r.grad = trio(r, c.fused, c.fused ? kGradPad : 0, &grad_bytes);
  r.out = Packed{0, r.total_q, r.hq, r.hq * r.d + (c.fused ? kOutPad : 0)};
  r.dout = Packed{0, r.total_q, r.hq, r.hq * r.d + (c.fused ? kDoutPad : 0)};
  const size_t out_bytes = static_cast<size_t>(r.total_q * r.out.tok) * r.es;
  const size_t dout_bytes = static_cast<size_t>(r.total_q * r.dout.tok) * r.es;

  // k and v in [-1, 1), q in [-3, 3) so that scores spread (peaked softmax rows), dout in [-1, 1).
  Lcg g(std::hash<std::string>{}(c.name));
  std::vector<uint8_t> host(in_bytes);
  fill_random(host.data(), in_bytes / 2, g, c.dtype, -1.f, 1.f);
  for (int64_t t = 0; t < r.total_q; ++t)
    fill_random(host.data() + r.in[0].offset + static_cast<size_t>(t * r.in[0].tok) * r.es,
                static_cast<size_t>(r.hq * r.d), g, c.dtype, -3.f, 3.f);
  r.in_buf = DeviceBuffer(host);
  host.assign(dout_bytes, 0);
  fill_random(host.data(), dout_bytes / 2, g, c.dtype, -1.f, 1.f);
  r.dout_buf = DeviceBuffer(host);
  r.out_buf = DeviceBuffer(out_bytes);
  r.lse_buf = DeviceBuffer(std::max<size_t>(static_cast<size_t>(r.hq * r.total_q) * 4, 4));
  r.grad_buf = DeviceBuffer(grad_bytes);

  std::vector<int32_t> idx = r.cu_q;
  idx.insert(idx.end(), r.cu_k.begin(), r.cu_k.end());
  for (const auto* u : {&c.used_q, &c.used_k})
    if (*u) idx.insert(idx.end(), (*u)->begin(), (*u)->end());
  r.index_buf = DeviceBuffer(idx.size() * 4);
  r.index_buf.upload(idx);

  VarlenBackwardArgs& a = r.args;
  a = VarlenBackwardArgs{};
  a.q = packed_view(r.in_buf, r.in[0], c.dtype, r.d);
  a.k = packed_view(r.in_buf, r.in[1], c.dtype, r.d);
  a.v = packed_view(r.in_buf, r.in[2], c.dtype, r.d);
  a.out = packed_view(r.out_buf, r.out, c.dtype, r.d);
  a.dout = packed_view(r.dout_buf, r.dout, c.dtype, r.d);
  a.dq = packed_view(r.grad_buf, r.grad[0], c.dtype, r.d);
  a.dk = packed_view(r.grad_buf, r.grad[1], c.dtype, r.d);
  a.dv = packed_view(r.grad_buf, r.grad[2], c.dtype, r.d);
  a.lse = leading_dims(r.lse_buf.get(), DType::kFP32, 2, r.hq, r.total_q);
  a.cu_seqlens_q = leading_dims(r.index_at(0), DType::kInt32, 1, r.batch + 1, 1);
  a.cu_seqlens_k = leading_dims(r.index_at(static_cast<size_t>(r.batch + 1)), DType::kInt32, 1, r.batch + 1, 1);
  size_t next = static_cast<size_t>(2 * r.batch + 2);
  if (c.used_q) {
    a.seqused_q = leading_dims(r.index_at(next), DType::kInt32, 1, r.batch, 1);
    next += static_cast<size_t>(r.batch);
  }
  if (c.used_k) a.seqused_k = leading_dims(r.index_at(next), DType::kInt32, 1, r.batch, 1);
  const int64_t longest_q = *std::max_element(c.len_q.begin(), c.len_q.end());
  const int64_t longest_k = *std::max_element(c.len_k.begin(), c.len_k.end());
  a.max_seqlen_q = c.max_seqlen_factor * longest_q;
  a.max_seqlen_k = c.max_seqlen_factor * longest_k;
  a.causal = c.causal;
  a.softmax_scale = c.softmax_scale;
  a.deterministic = c.deterministic;
  a.window = c.window;
  a.softcap = c.softcap;

  VarlenForwardArgs f = forward_part<VarlenForwardArgs>(a);
  f.cu_seqlens_q = a.cu_seqlens_q;
  f.cu_seqlens_k = a.cu_seqlens_k;
  f.max_seqlen_q = a.max_seqlen_q;
  f.max_seqlen_k = a.max_seqlen_k;
  f.seqused_q = a.seqused_q;
  f.seqused_k = a.seqused_k;
  r.out_buf.fill(0xFF);  // rows past cu_seqlens_q[batch] stay NaN: backward must not depend on them
  r.lse_buf.fill(0xFF);
  const Result res = forward_varlen(f);
  if (!res.ok()) return res;
  HOPATTN_TEST_CUDA(cudaGetLastError());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  return res;
}

// At least backward_varlen_workspace_size(a) bytes (256 when that is 0).
DeviceBuffer workspace_for(const VarlenBackwardArgs& a) {
  return DeviceBuffer(std::max<size_t>(backward_varlen_workspace_size(a), 256));
}

// Poisons dq/dk/dv (the whole gradient buffer) and the workspace (its contents need no init), runs
// backward_varlen, synchronises and returns the whole gradient buffer in `grads`.
Result run_backward(Instance& r, std::vector<uint8_t>* grads) {
  r.grad_buf.fill(0xFF);
  if (r.workspace.bytes() < backward_varlen_workspace_size(r.args) || r.workspace.get() == nullptr)
    r.workspace = workspace_for(r.args);
  r.workspace.fill(0xFF);
  const Result res = backward_varlen(r.args, r.workspace.get(), r.workspace.bytes());
  if (!res.ok()) return res;
  HOPATTN_TEST_CUDA(cudaGetLastError());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  *grads = r.grad_buf.download();
  return res;
}

// ---- the oracle: the fixed-length path, one sequence at a time -----------------------------------

struct Oracle {
  std::array<Packed, 3> layout;  // dense dq, dk, dv blocks, sequence b at its packed rows
  std::vector<uint8_t> grads;
};

// hopattn::forward (own out and lse) and hopattn::backward on the batch-1 views of each sequence's
// used rows. A sequence with no used query or no used key has zero gradients (the fixed path only
// zero-fills them): its rows keep the zeros the buffer starts with.
Oracle oracle(const Instance& r) {
  const DType t = r.c.dtype;
  const int64_t hq = r.hq, d = r.d;
  Oracle o;
  size_t bytes = 0;
  o.layout = trio(r, false, 0, &bytes);
  const Packed out_layout{0, r.total_q, hq, hq * d};
  DeviceBuffer grads(bytes), out(static_cast<size_t>(r.total_q * hq * d) * r.es);
  grads.fill(0);
  std::vector<size_t> lse_off(static_cast<size_t>(r.batch));
  size_t lse_floats = 64;
  for (int64_t b = 0; b < r.batch; ++b) {  // (1, hq, used_q) each, 256-byte aligned
    lse_off[b] = lse_floats;
    lse_floats += static_cast<size_t>((hq * r.used(true, b) + 63) / 64 * 64);
  }
  DeviceBuffer lse(lse_floats * 4);
  std::vector<BackwardArgs> calls;
  for (int64_t b = 0; b < r.batch; ++b) {
    const int64_t sq = r.used(true, b), sk = r.used(false, b), q0 = r.cu_q[b], k0 = r.cu_k[b];
    if (sq == 0 || sk == 0) continue;
    BackwardArgs a;
    a.q = seq_view(r.in_buf, r.in[0], t, d, q0, sq, r.es);
    a.k = seq_view(r.in_buf, r.in[1], t, d, k0, sk, r.es);
    a.v = seq_view(r.in_buf, r.in[2], t, d, k0, sk, r.es);
    a.out = seq_view(out, out_layout, t, d, q0, sq, r.es);
    a.lse = make_tensor(static_cast<float*>(lse.get()) + lse_off[b], DType::kFP32, 1, hq, sq);
    a.dout = seq_view(r.dout_buf, r.dout, t, d, q0, sq, r.es);
    a.dq = seq_view(grads, o.layout[0], t, d, q0, sq, r.es);
    a.dk = seq_view(grads, o.layout[1], t, d, k0, sk, r.es);
    a.dv = seq_view(grads, o.layout[2], t, d, k0, sk, r.es);
    a.causal = r.c.causal;
    a.softmax_scale = r.c.softmax_scale;
    a.window = r.c.window;
    a.softcap = r.c.softcap;
    const Result fr = forward(forward_part<ForwardArgs>(a));
    if (!fr.ok()) throw std::runtime_error("oracle forward, " + seq_desc(r, b) + ": " + fr.message);
    calls.push_back(a);
  }
  size_t need = 256;
  for (const BackwardArgs& a : calls) need = std::max(need, backward_workspace_size(a));
  DeviceBuffer ws(need);
  for (const BackwardArgs& a : calls) {
    const Result br = backward(a, ws.get(), ws.bytes());
    if (!br.ok()) throw std::runtime_error("oracle backward: " + br.message);
  }
  HOPATTN_TEST_CUDA(cudaGetLastError());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  o.grads = grads.download();
  return o;
}

// ---- checks -------------------------------------------------------------------------------------

// What is wrong with one case; reported as one failure (the first dozen lines) when it goes.
class Report {
 public:
  explicit Report(std::string what) : what_(std::move(what)) {}
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;
  void add(const std::string& line) { lines_.push_back(line); }
  ~Report() {
    if (lines_.empty()) return;
    std::ostringstream s;
    for (size_t i = 0; i < lines_.size() && i < 12; ++i) s << "\n  " << lines_[i];
    ADD_FAILURE() << what_ << ": " << lines_.size() << " problem(s):" << s.str();
  }

 private:
  std::string what_;
  std::vector<std::string> lines_;
};

const uint8_t* row_at(const std::vector<uint8_t>& buf, const Packed& p, int64_t row, size_t es) {
  return buf.data() + p.offset + static_cast<size_t>(row * p.tok) * es;
}

// Rows [r0, r0 + n) of `p` in a downloaded buffer, `width` elements each, as floats.
std::vector<float> rows_of(const std::vector<uint8_t>& buf, const Packed& p, int64_t r0, int64_t n, int64_t width,
                           DType t) {
  std::vector<float> v;
  v.reserve(static_cast<size_t>(std::max<int64_t>(n, 0) * width));
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> row = decode(row_at(buf, p, r0 + i, dtype_size(t)), static_cast<size_t>(width), t);
    v.insert(v.end(), row.begin(), row.end());
  }
  return v;
}

// 16-bit elements of rows [r0, r0 + n) of `p` (`width` each) that are not 0xFFFF.
size_t unpoisoned(const std::vector<uint8_t>& buf, const Packed& p, int64_t r0, int64_t n, int64_t width) {
  size_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = row_at(buf, p, r0 + i, 2);
    for (int64_t x = 0; x < width; ++x) count += row[2 * x] != 0xFF || row[2 * x + 1] != 0xFF;
  }
  return count;
}

size_t nonzero(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += !(x == 0.f);  // NaN counts
  return n;
}

// Empty when `got` matches `ref` (see rel_tol / elem_tol), else what is off.
std::string compare(const std::vector<float>& got, const std::vector<float>& ref, DType t) {
  double diff2 = 0, ref2 = 0, worst = 0, ref_max = 0, got_max = 0;
  size_t nonfinite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++nonfinite;
      continue;
    }
    const double e = static_cast<double>(got[i]) - ref[i];
    diff2 += e * e;
    ref2 += static_cast<double>(ref[i]) * ref[i];
    worst = std::max(worst, std::fabs(e));
    ref_max = std::max(ref_max, std::fabs(static_cast<double>(ref[i])));
    got_max = std::max(got_max, std::fabs(static_cast<double>(got[i])));
  }
  std::ostringstream s;
  if (nonfinite > 0) {
    s << nonfinite << " NaN/inf elements (unwritten?)";
    return s.str();
  }
  if (ref2 == 0) {
    if (got_max > kZeroRefAbsTol) s << "reference is 0 but max|g| = " << got_max;
    return s.str();
  }
  const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), kNormFloor * std::sqrt(double(got.size())));
  const double elem = worst / std::max(ref_max, kNormFloor);
  if (!(rel <= rel_tol(t) && elem <= elem_tol(t)))
    s << "rel_l2 " << rel << " (tol " << rel_tol(t) << "), max|diff|/max|ref| " << elem << " (tol " << elem_tol(t)
      << ")";
  return s.str();
}

// Every rule on the gradient buffer of one backward_varlen call: each sequence's used rows against
// the oracle, its rows past seqused exactly 0, rows past cu_seqlens[batch] and the row padding of
// the fused layouts still poisoned.
void check(const Instance& r, const std::vector<uint8_t>& got, const Oracle& o) {
  Report rep(r.c.name);
  const DType t = r.c.dtype;
  for (int i = 0; i < 3; ++i) {
    const bool q_side = i == 0;
    const std::vector<int32_t>& cu = q_side ? r.cu_q : r.cu_k;
    const Packed& g = r.grad[i];
    const int64_t width = g.heads * r.d;
    for (int64_t b = 0; b < r.batch; ++b) {
      const int64_t len = r.len(q_side, b), used = r.used(q_side, b);
      const std::string err =
          compare(rows_of(got, g, cu[b], used, width, t), rows_of(o.grads, o.layout[i], cu[b], used, width, t), t);
      if (!err.empty()) rep.add(seq_desc(r, b) + ": " + kGradName[i] + " " + err);
      if (const size_t n = nonzero(rows_of(got, g, cu[b] + used, len - used, width, t)))
        rep.add(seq_desc(r, b) + ": " + kGradName[i] + " has " + std::to_string(n) +
                " nonzero elements in rows past seqused");
    }
    if (const size_t n = unpoisoned(got, g, cu.back(), g.rows - cu.back(), width))
      rep.add(std::string(kGradName[i]) + ": " + std::to_string(n) +
              " elements of rows past cu_seqlens[batch] were written");
  }
  if (r.c.fused) {
    const Packed pad{static_cast<size_t>((r.hq + 2 * r.hkv) * r.d) * r.es, r.total_q, 1, r.grad[0].tok};
    if (const size_t n = unpoisoned(got, pad, 0, r.total_q, kGradPad))
      rep.add(std::to_string(n) + " elements of the fused gradient rows' padding were written");
  }
}

// Sets `c` up in `r` (forward_varlen included) and runs backward_varlen once into `got`; false,
// with a failure recorded, when either call fails.
bool setup_and_run(Instance& r, const Case& c, std::vector<uint8_t>* got) {
  const Result fr = setup(r, c);
  EXPECT_TRUE(fr.ok()) << c.name << ": forward_varlen: " << fr.message;
  if (!fr.ok()) return false;
  const Result br = run_backward(r, got);
  EXPECT_TRUE(br.ok()) << c.name << ": backward_varlen: " << br.message;
  return br.ok();
}

// Sets `c` up, runs backward_varlen once and checks it against the oracle.
void run_and_check(const Case& c) {
  SCOPED_TRACE(c.name);
  Instance r;
  std::vector<uint8_t> got;
  if (setup_and_run(r, c, &got)) check(r, got, oracle(r));
}

// ---- the grid -----------------------------------------------------------------------------------

enum class Mix { kMixed, kQkDiffer, kRandom12 };

// Empty sequences and lengths around the 128-row tile; keys longer and shorter than queries
// (bottom-right causal alignment), len_k = 0 < len_q and len_q = 0 < len_k; 12 random lengths,
// queries and keys independent, in [0, 700].
void lengths_of(Mix m, std::vector<int>* lq, std::vector<int>* lk) {
  if (m == Mix::kMixed) {
    *lq = *lk = {0, 1, 17, 127, 128, 129, 300};
  } else if (m == Mix::kQkDiffer) {
    *lq = {7, 260, 0, 1, 150, 90, 129, 3, 33};
    *lk = {260, 7, 45, 0, 150, 300, 64, 3, 1};
  } else {
    *lq = lengths_upto(12, 700, 2024);
    *lk = lengths_upto(12, 700, 4202);
  }
}

const char* mix_label(Mix m) { return m == Mix::kMixed ? "mixed" : m == Mix::kQkDiffer ? "qkdiffer" : "random12"; }

using GridParam = std::tuple<DType, int, bool, int, Mix>;  // dtype, head_dim, causal, heads_kv (heads_q 8), mix

std::string grid_label(const GridParam& p) {
  return tag(std::get<0>(p), std::get<1>(p), std::get<2>(p)) + "_h8x" + std::to_string(std::get<3>(p)) + "_" +
         mix_label(std::get<4>(p));
}

class VarlenBackwardGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(VarlenBackwardGrid, MatchesFixedLengthPerSequence) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const auto [t, d, causal, hkv, mix] = GetParam();
  if (!fwd_and_bwd_built(t, d)) GTEST_SKIP() << "not built: " << build_instantiations();
  Case c = make_case(grid_label(GetParam()), t, d, causal, 8, hkv, {}, {});
  lengths_of(mix, &c.len_q, &c.len_k);
  run_and_check(c);
}

INSTANTIATE_TEST_SUITE_P(Sm90, VarlenBackwardGrid,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(64, 128, 256), ::testing::Bool(), ::testing::Values(8, 2),
                                            ::testing::Values(Mix::kMixed, Mix::kQkDiffer, Mix::kRandom12)),
                         [](const ::testing::TestParamInfo<GridParam>& info) { return grid_label(info.param); });

// ---- seqused ------------------------------------------------------------------------------------

// seqused_q and/or seqused_k below the lengths for some sequences, 0 for some (with the other side
// non-empty), equal for others. Rows past seqused must be exactly 0 in dq / dk / dv; the oracle
// runs on the used lengths (causal alignment uses them too).
TEST(Sm90VarlenBackward, Seqused) {
  const std::vector<int> len_q = {3, 0, 140, 64, 300, 17, 1, 129, 50};
  const std::vector<int> len_k = {40, 12, 140, 0, 200, 17, 9, 257, 50};
  const std::vector<int> used_q = {3, 0, 100, 0, 300, 5, 1, 128, 0};
  const std::vector<int> used_k = {0, 12, 70, 0, 199, 17, 2, 130, 50};
  for_each_config([&](DType t, int d, bool causal) {
    for (const char* which : {"both", "q", "k"}) {
      Case c = make_case(std::string("seqused_") + which + "_" + tag(t, d, causal), t, d, causal, 8, 2, len_q, len_k);
      if (which[0] != 'k') c.used_q = used_q;
      if (which[0] != 'q') c.used_k = used_k;
      run_and_check(c);
    }
  });
}

// ---- max_seqlen above every length, determinism -------------------------------------------------

// max_seqlen_q / max_seqlen_k are upper bounds: twice every real length changes nothing.
TEST(Sm90VarlenBackward, MaxSeqlenTwiceEveryLength) {
  for_each_config([](DType t, int d, bool causal) {
    Case c = make_case("max_seqlen_x2_" + tag(t, d, causal), t, d, causal, 8, 2, {90, 0, 257, 1, 600, 33},
                       {300, 5, 257, 64, 128, 0});
    c.max_seqlen_factor = 2;
    run_and_check(c);
  });
}

// Sliding windows per sequence against the fixed-length oracle (itself checked against the CPU
// reference by test_backward.cpp's Sm90Window grid): each side alone, both, causal with a left
// bound; deterministic on and off.
TEST(Sm90VarlenBackward, SlidingWindow) {
  for_each_config([](DType t, int d, bool causal) {
    const Window windows[] = {{0, 0}, {16, -1}, {-1, 33}, {100, 50}, {130, 0}};
    int n = 0;
    for (const Window& w : windows) {
      if (causal && w.right > 0) continue;
      Case c = make_case("window_" + std::to_string(n) + "_" + tag(t, d, causal), t, d, causal, 8, 2,
                         {0, 1, 130, 300, 77, 700}, {5, 1, 130, 100, 400, 650});
      c.window = w;
      c.softcap = n % 3 == 1 ? 5.f : 0.f;  // some windows also softcapped
      c.deterministic = n++ % 2 == 1;
      SCOPED_TRACE(c.name);
      Instance r;
      std::vector<uint8_t> got;
      if (!setup_and_run(r, c, &got)) return;
      check(r, got, oracle(r));
    }
  });
}

// Softcapping without a window (the softcap kernel's unbounded run-time bounds), causal or not.
TEST(Sm90VarlenBackward, Softcap) {
  for_each_config([](DType t, int d, bool causal) {
    Case c = make_case("softcap_" + tag(t, d, causal), t, d, causal, 8, 2, {0, 1, 130, 300, 77, 700},
                       {5, 1, 130, 100, 400, 650});
    c.softcap = causal ? 2.f : 30.f;
    c.deterministic = causal;
    SCOPED_TRACE(c.name);
    Instance r;
    std::vector<uint8_t> got;
    if (!setup_and_run(r, c, &got)) return;
    check(r, got, oracle(r));
  });
}

// deterministic = true, long key sequences (dq summed over many key blocks), GQA: run 0 matches the
// oracle, runs 1 and 2 (gradients and workspace re-poisoned) reproduce it bit for bit.
TEST(Sm90VarlenBackward, DeterministicRunsAreBitwiseIdentical) {
  for_each_config([](DType t, int d, bool causal) {
    Case c = make_case("deterministic_" + tag(t, d, causal), t, d, causal, 8, 2, {1100, 37, 0, 700, 129, 513, 1, 256},
                       {1300, 37, 64, 700, 300, 513, 1, 1000});
    c.deterministic = true;
    SCOPED_TRACE(c.name);
    Instance r;
    std::vector<uint8_t> first;
    if (!setup_and_run(r, c, &first)) return;
    check(r, first, oracle(r));
    for (int run = 1; run < 3; ++run) {
      std::vector<uint8_t> again;
      const Result br = run_backward(r, &again);
      ASSERT_TRUE(br.ok()) << c.name << ": backward_varlen run " << run << ": " << br.message;
      for (int i = 0; i < 3; ++i) {  // dq, dk, dv: token rows that differ
        const Packed& g = r.grad[i];
        size_t rows = 0;
        for (int64_t row = 0; row < g.rows; ++row)
          rows += std::memcmp(row_at(again, g, row, r.es), row_at(first, g, row, r.es),
                              static_cast<size_t>(g.heads * r.d) * r.es) != 0;
        EXPECT_EQ(rows, 0u) << c.name << ": " << kGradName[i] << " of run " << run << " differs from run 0 in " << rows
                            << " token rows";
      }
    }
  });
}

// ---- strided views ------------------------------------------------------------------------------

// q/k/v and dq/dk/dv as views into fused (total, heads_q + 2 heads_kv, head_dim) buffers (MHA:
// (total, 3, 8, d); GQA: (total, 8 + 2 + 2, d)), dq/dk/dv rows padded, out and dout with padded
// rows; GQA also with an explicit softmax scale.
TEST(Sm90VarlenBackward, FusedQkvAndDqkvViews) {
  for_each_config([](DType t, int d, bool causal) {
    for (int64_t hkv : {8, 2}) {
      Case c = make_case("fused_h8x" + std::to_string(hkv) + "_" + tag(t, d, causal), t, d, causal, 8, hkv,
                         {12, 0, 300, 129, 1, 77}, {12, 60, 180, 129, 400, 0});
      c.fused = true;
      if (hkv == 2) c.softmax_scale = 0.3f;
      run_and_check(c);
    }
  });
}

// ---- calls with no query row or no key row at all -----------------------------------------------

// max_seqlen_q == 0 (every sequence without queries): dk and dv are zero-filled whole, the rows
// past cu_seqlens_k[batch] included (see the header), and dq is not written at all.
// max_seqlen_k == 0: dq is zero-filled whole and dk / dv are not written.
TEST(Sm90VarlenBackward, NoQueryRowOrNoKeyRowAtAll) {
  for_each_config([](DType t, int d, bool causal) {
    for (bool no_queries : {true, false}) {
      const std::vector<int> none = {0, 0, 0}, some = {5, 0, 130};
      Case c = make_case(std::string(no_queries ? "no_query_rows_" : "no_key_rows_") + tag(t, d, causal), t, d, causal,
                         8, 2, no_queries ? none : some, no_queries ? some : none);
      SCOPED_TRACE(c.name);
      Instance r;
      std::vector<uint8_t> got;
      if (!setup_and_run(r, c, &got)) continue;
      for (int i = 0; i < 3; ++i) {
        const Packed& g = r.grad[i];
        const int64_t width = g.heads * d;
        const bool zero_filled = (i == 0) != no_queries;  // dq without keys, dk/dv without queries
        const size_t bad =
            zero_filled ? nonzero(rows_of(got, g, 0, g.rows, width, t)) : unpoisoned(got, g, 0, g.rows, width);
        EXPECT_EQ(bad, 0u) << c.name << ": " << kGradName[i] << " should be "
                           << (zero_filled ? "all 0" : "left untouched") << ", " << bad << " elements are not";
      }
    }
  });
}

// ---- bad arguments ------------------------------------------------------------------------------

// A small valid causal GQA problem of the first built (dtype, head_dim), forward_varlen already run
// (q lengths {4, 3, 6}, k lengths {5, 2, 2}, heads 4 / 2), and a workspace large enough for it.
class Sm90VarlenBackwardValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
    const auto pairs = built();
    if (pairs.empty()) GTEST_SKIP() << "not built: " << build_instantiations();
    const Case c = make_case("validation", pairs.front().first, pairs.front().second, true, 4, 2, {4, 3, 6}, {5, 2, 2});
    const Result fr = setup(r_, c);
    ASSERT_TRUE(fr.ok()) << "forward_varlen: " << fr.message;
    ws_ = workspace_for(r_.args);
  }

  // backward_varlen(a) must fail with kInvalidArgument and a message naming `fragment`.
  void expect_rejected(const VarlenBackwardArgs& a, const std::string& fragment, size_t bytes = SIZE_MAX) {
    const Result res = backward_varlen(a, ws_.get(), bytes == SIZE_MAX ? ws_.bytes() : bytes);
    EXPECT_EQ(res.status, Status::kInvalidArgument) << res.message;
    EXPECT_NE(res.message.find(fragment), std::string::npos)
        << "message \"" << res.message << "\" does not name \"" << fragment << "\"";
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  }

  Instance r_;
  DeviceBuffer ws_;
};

TEST_F(Sm90VarlenBackwardValidation, LseMissing) {
  VarlenBackwardArgs a = r_.args;
  a.lse.data = nullptr;  // shape given, no data
  expect_rejected(a, "lse");
  a.lse = TensorRef{};  // left out entirely
  expect_rejected(a, "lse");
}

TEST_F(Sm90VarlenBackwardValidation, DqWrongSize) {
  for (int dim = 0; dim < 2; ++dim) {  // one token row short; one head short
    VarlenBackwardArgs a = r_.args;
    a.dq.sizes[dim] -= 1;
    SCOPED_TRACE("dq.sizes[" + std::to_string(dim) + "] one short");
    expect_rejected(a, "dq");
  }
}

TEST_F(Sm90VarlenBackwardValidation, WorkspaceTooSmall) {
  const size_t need = backward_varlen_workspace_size(r_.args);
  ASSERT_GT(need, 0u) << "a problem with query and key rows needs workspace";
  ASSERT_GE(ws_.bytes(), need);
  expect_rejected(r_.args, "workspace_bytes", need - 1);
  expect_rejected(r_.args, "workspace_bytes", 0);
  const Result res = backward_varlen(r_.args, ws_.get(), need);  // exactly enough
  EXPECT_TRUE(res.ok()) << res.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
}

TEST_F(Sm90VarlenBackwardValidation, DecreasingCuSeqlensKWithCheckIndexValues) {
  VarlenBackwardArgs a = r_.args;
  a.check_index_values = true;
  const Result ok = backward_varlen(a, ws_.get(), ws_.bytes());  // the valid indices pass the check
  ASSERT_TRUE(ok.ok()) << ok.message;
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> decreasing = {0, 5, 3, 9};  // lengths 5, -2, 6: only the order is wrong
  HOPATTN_TEST_CUDA(cudaMemcpy(a.cu_seqlens_k.data, decreasing.data(), decreasing.size() * 4, cudaMemcpyHostToDevice));
  expect_rejected(a, "cu_seqlens_k");
}

}  // namespace
}  // namespace hopattn::test
