// The Hopper backward pass (hopattn::backward) against the CPU reference (hopattn::backward_cpu,
// double accumulation, fp32 gradients) over dtype x head dim x causal x (seqlen_q, seqlen_k) x GQA x
// batch, plus strided views (packed qkv / dqkv, padded rows), 64-bit offsets, determinism, a
// repeat-race check, bad arguments and empty sequences. Gradients and the workspace are NaN-poisoned
// (0xFF bytes) before every run, so anything a kernel forgets to write, or reads before writing, shows.
//
// Cost: the CPU reference takes ~ batch * heads_q * (visible keys summed over rows) * head_dim * 10
// double flops per case; the grid below sums to ~8e10 of those (the rest ~1e10), about 30-60 s on a
// fast 16-core host (the reference runs one thread per (batch, kv head), so MQA cases are serial).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#include "api/bwd_heuristics.hpp"
#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"
#include "sm90/bwd/workspace.hpp"

namespace hopattn::test {
namespace {

// Accuracy bound for every gradient: ||g - ref|| / ||ref|| (fp32 reference from the same rounded inputs).
constexpr double kRelTol = 2e-2;
// When the reference gradient is exactly zero (e.g. seqlen_k == 1: softmax is constant), max |g| bound.
constexpr double kZeroRefAbsTol = 1e-6;

enum class Layout {
  kContiguous,
  kPackedQKV,        // q, k, v views into one (b, s, 3, h, d) buffer; dk, dv into (b, s, 2, h, d);
                     // dout and dq with padded row and batch strides (MHA only: sq == sk, hq == hkv)
  kPackedKV,         // GQA: q, out, dout, dq with padded rows; k, v and dk, dv packed in (b, sk, 2, hkv, d)
  kHugeBatchStride,  // every tensor's batch stride is > 2^31 elements: 64-bit offsets or bust
};

struct BwdCase {
  DType dtype;
  int head_dim;
  bool causal;
  int64_t seqlen_q, seqlen_k, heads_q, heads_kv, batch;
  bool deterministic = false;
  Layout layout = Layout::kContiguous;
  std::optional<float> softmax_scale = std::nullopt;
  Window window{};  // sliding window (-1, -1: none)
  float softcap = 0.f;
};

std::string case_name(const BwdCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) +
                  (c.causal ? "_causal" : "_full") + "_b" + std::to_string(c.batch) + "_h" +
                  std::to_string(c.heads_q) + "x" + std::to_string(c.heads_kv) + "_q" + std::to_string(c.seqlen_q) +
                  "_k" + std::to_string(c.seqlen_k);
  if (c.deterministic) s += "_det";
  if (c.softmax_scale) s += "_scaled";
  if (c.layout == Layout::kPackedQKV) s += "_packedqkv";
  if (c.layout == Layout::kPackedKV) s += "_packedkv";
  if (c.layout == Layout::kHugeBatchStride) s += "_hugestride";
  if (c.softcap > 0) s += "_cap" + std::to_string(static_cast<int>(c.softcap));
  if (c.window.left >= 0 || c.window.right >= 0) {
    s += "_w" + std::to_string(c.window.left) + "_" + std::to_string(c.window.right);
    for (char& ch : s)
      if (ch == '-') ch = 'm';  // test names allow [A-Za-z0-9_] only
  }
  return s;
}

void PrintTo(const BwdCase& c, std::ostream* os) { *os << case_name(c); }

// The full grid would cost ~8e11 reference flops (a quarter hour); pruned to ~8e10:
//  - seqlen_q * seqlen_k <= 64*64: every head layout, batch 1 and 2;
//  - (127, 255), (255, 127): every head layout at batch 1, batch 2 only with GQA (8, 2);
//  - (1000, 1000), (513, 2048): batch 1 and one head layout per (dtype, head dim, causal), rotated so
//    each layout appears; fp16 with the long key sequence only causal.
// Batch-2 cases run with deterministic = true, so that mode is checked against the reference too.
std::vector<BwdCase> make_grid() {
  std::vector<BwdCase> cases;
  const int64_t seqlens[][2] = {{1, 1}, {17, 17}, {127, 255}, {255, 127}, {1000, 1000}, {64, 64}, {513, 2048}};
  const int64_t heads[][2] = {{4, 4}, {8, 2}, {8, 1}};
  const DType dtypes[] = {DType::kBF16, DType::kFP16};
  const int dims[] = {64, 128, 256};
  for (int ti = 0; ti < 2; ++ti)
    for (int di = 0; di < 3; ++di)
      for (bool causal : {false, true})
        for (const auto& sl : seqlens)
          for (int hi = 0; hi < 3; ++hi)
            for (int64_t b : {1, 2}) {
              const int64_t area = sl[0] * sl[1];
              const bool small = area <= 64 * 64, mid = area <= 255 * 255, long_k = sl[1] > sl[0];
              if (!small && b == 2 && !(mid && hi == 1)) continue;
              if (!mid) {
                // d128, d256: (4, 4), or (8, 2) for the causal square; d64: MQA (8, 1) or GQA (8, 2).
                const int pick = di >= 1 ? (causal && !long_k ? 1 : 0) : ((ti + causal) % 2 == 0 ? 2 : 1);
                if (hi != pick) continue;
                if (long_k && dtypes[ti] == DType::kFP16 && !causal) continue;
              }
              BwdCase c{dtypes[ti], dims[di], causal, sl[0], sl[1], heads[hi][0], heads[hi][1], b};
              c.deterministic = b == 2;
              cases.push_back(c);
            }
  return cases;
}

// Strided views (and an explicit softmax scale on some), every dtype / head dim.
std::vector<BwdCase> make_strided() {
  std::vector<BwdCase> cases;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256}) {
      BwdCase a{t, d, true, 257, 257, 4, 4, 2, false, Layout::kPackedQKV};
      BwdCase b{t, d, false, 257, 257, 4, 4, 2, false, Layout::kPackedQKV};
      b.softmax_scale = 0.3f;
      BwdCase g{t, d, true, 150, 333, 8, 2, 2, false, Layout::kPackedKV};
      BwdCase m{t, d, false, 333, 150, 8, 1, 1, false, Layout::kPackedKV};
      m.softmax_scale = 0.05f;
      for (const BwdCase& c : {a, b, g, m}) cases.push_back(c);
    }
  return cases;
}

// Sliding windows (issue 6): each side alone, both, the diagonal only, causal with a left bound,
// wider than the sequence; key blocks no query's window reaches (their dK/dV must be zeros), rows
// whose window holds no key (sq > sk). Batch 2 runs deterministic (the turn order over a window's
// contiguous range of key blocks). bf16 at every head dim, fp16 at 128.
std::vector<BwdCase> make_window() {
  std::vector<BwdCase> cases;
  const int64_t seqlens[][2] = {{1, 1}, {17, 17}, {127, 255}, {255, 127}, {300, 300}, {200, 700}};
  struct W { int64_t left, right; bool causal; };
  const W windows[] = {{0, 0, false}, {16, -1, false}, {-1, 33, false}, {100, 50, false}, {130, 0, true}, {5000, 7000, false}};
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256}) {
      if (t == DType::kFP16 && d != 128) continue;
      int k = 0;
      for (const auto& sl : seqlens)
        for (const W& w : windows) {
          const int64_t b = (k++ % 3 == 0) ? 2 : 1;
          BwdCase c{t, d, w.causal, sl[0], sl[1], 8, 2, b};
          c.deterministic = b == 2;
          c.window = {w.left, w.right};
          cases.push_back(c);
        }
    }
  return cases;
}

// Softcapping (caps 2 and 30): the backward's 1 - tanh^2 factor, recovered from P (softcap_grad);
// causal or not, GQA, ragged lengths, one with a window; batch 2 deterministic. bf16 at every head
// dim (d256 runs the head-split consumer, whose P comes back as 16-bit), fp16 at 128.
std::vector<BwdCase> make_softcap() {
  std::vector<BwdCase> cases;
  const int64_t seqlens[][2] = {{17, 17}, {127, 255}, {255, 127}, {300, 300}};
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256}) {
      if (t == DType::kFP16 && d != 128) continue;
      int k = 0;
      for (bool causal : {false, true})
        for (const auto& sl : seqlens)
          for (float cap : {2.f, 30.f}) {
            const int64_t b = (k++ % 4 == 0) ? 2 : 1;
            BwdCase c{t, d, causal, sl[0], sl[1], 8, 2, b};
            c.deterministic = b == 2;
            c.softcap = cap;
            cases.push_back(c);
          }
      BwdCase w{t, d, false, 300, 400, 4, 4, 1};
      w.softcap = 30.f;
      w.window = {64, 16};
      cases.push_back(w);
    }
  return cases;
}

// 64-bit offsets: ~4.3 GB of device memory each (one slab per batch, 2^31 + 4096 elements apart).
std::vector<BwdCase> make_huge() {
  return {BwdCase{DType::kBF16, 128, true, 200, 500, 4, 2, 2, false, Layout::kHugeBatchStride},
          BwdCase{DType::kFP16, 64, false, 200, 500, 4, 2, 2, true, Layout::kHugeBatchStride},
          BwdCase{DType::kBF16, 256, true, 130, 300, 4, 2, 2, false, Layout::kHugeBatchStride}};
}

bool kernels_built(DType t, int d) { return has_forward_kernel(t, d) && has_backward_kernel(t, d); }

// The (dtype, head dim) pairs with both a forward and a backward kernel in this build.
std::vector<std::pair<DType, int>> built_kernels() {
  std::vector<std::pair<DType, int>> out;
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256})
      if (kernels_built(t, d)) out.emplace_back(t, d);
  return out;
}

// ---- device views --------------------------------------------------------------------------------

TensorRef view(void* data, DType t, int64_t b, int64_t s, int64_t h, int64_t d, int64_t sb, int64_t ss) {
  TensorRef r = make_tensor(data, t, b, s, h, d);
  r.strides[0] = sb;
  r.strides[1] = ss;
  return r;
}

int64_t numel(const TensorRef& t) { return t.sizes[0] * t.sizes[1] * t.sizes[2] * t.sizes[3]; }

// Every view here keeps heads and head_dim contiguous (strides[2] == head_dim), so a tensor is
// `batch` 2D blocks of seqlen rows of heads * head_dim elements; host data is its dense copy.
void copy_view(const TensorRef& v, void* host, bool to_device) {
  const size_t es = dtype_size(v.dtype);
  const size_t row_bytes = static_cast<size_t>(v.sizes[2] * v.sizes[3]) * es;
  if (numel(v) == 0) return;
  if (v.strides[2] != v.sizes[3]) throw std::runtime_error("copy_view: heads must be contiguous");
  for (int64_t b = 0; b < v.sizes[0]; ++b) {
    auto* dev = static_cast<uint8_t*>(v.data) + static_cast<size_t>(b * v.strides[0]) * es;
    auto* hst = static_cast<uint8_t*>(host) + static_cast<size_t>(b * v.sizes[1]) * row_bytes;
    const size_t pitch = static_cast<size_t>(v.strides[1]) * es;
    if (to_device)
      HOPATTN_TEST_CUDA(cudaMemcpy2D(dev, pitch, hst, row_bytes, row_bytes, v.sizes[1], cudaMemcpyHostToDevice));
    else
      HOPATTN_TEST_CUDA(cudaMemcpy2D(hst, row_bytes, dev, pitch, row_bytes, v.sizes[1], cudaMemcpyDeviceToHost));
  }
}

void poison_view(const TensorRef& v) {  // 0xFF bytes: NaN in bf16, fp16 and fp32
  if (numel(v) == 0) return;
  const size_t es = dtype_size(v.dtype);
  const size_t row_bytes = static_cast<size_t>(v.sizes[2] * v.sizes[3]) * es;
  for (int64_t b = 0; b < v.sizes[0]; ++b)
    HOPATTN_TEST_CUDA(cudaMemset2D(static_cast<uint8_t*>(v.data) + static_cast<size_t>(b * v.strides[0]) * es,
                                   static_cast<size_t>(v.strides[1]) * es, 0xFF, row_bytes, v.sizes[1]));
}

// The dense bytes of a view.
std::vector<uint8_t> download_view(const TensorRef& v) {
  std::vector<uint8_t> host(static_cast<size_t>(numel(v)) * dtype_size(v.dtype));
  copy_view(v, host.data(), false);
  return host;
}

// Device storage of one case and the views of every tensor into it.
struct Views {
  std::vector<DeviceBuffer> bufs;
  TensorRef q, k, v, out, dout, lse, dq, dk, dv;
  // Buffers that hold gradients only (dq, dk, dv views and padding), poisoned whole before backward:
  // nothing outside the views may change.
  std::vector<size_t> grad_only_bufs;

  uint8_t* alloc(size_t bytes) {  // never null (a zero-size tensor still gets a valid pointer)
    bufs.emplace_back(std::max<size_t>(bytes, 256));
    return static_cast<uint8_t*>(bufs.back().get());
  }
};

Views make_views(const BwdCase& c) {
  const DType t = c.dtype;
  const size_t es = dtype_size(t);
  const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int64_t nq = b * sq * hq * d, nk = b * sk * hkv * d;
  Views w;
  w.lse = make_tensor(w.alloc(static_cast<size_t>(b * hq * sq) * 4), DType::kFP32, b, hq, sq);
  // A padded-row view of a (b, s, h, d) tensor in its own buffer: rows 64 elements apart more than
  // dense, batches 128 more (both multiples of 16 bytes, as the kernels require).
  const auto padded = [&](int64_t s, int64_t h, size_t* buf_index) {
    const int64_t row = h * d + 64, batch = s * row + 128;
    uint8_t* p = w.alloc(static_cast<size_t>(b * batch) * es);
    if (buf_index) *buf_index = w.bufs.size() - 1;
    return view(p, t, b, s, h, d, batch, row);
  };
  // k and v (or dk and dv) as the two halves of one (b, sk, 2, hkv, d) buffer.
  const auto packed_kv = [&](TensorRef* k, TensorRef* v) {
    uint8_t* p = w.alloc(static_cast<size_t>(2 * nk) * es);
    *k = view(p, t, b, sk, hkv, d, sk * 2 * hkv * d, 2 * hkv * d);
    *v = view(p + hkv * d * es, t, b, sk, hkv, d, sk * 2 * hkv * d, 2 * hkv * d);
    return w.bufs.size() - 1;
  };
  switch (c.layout) {
    case Layout::kContiguous:
      w.q = make_tensor(w.alloc(nq * es), t, b, sq, hq, d);
      w.k = make_tensor(w.alloc(nk * es), t, b, sk, hkv, d);
      w.v = make_tensor(w.alloc(nk * es), t, b, sk, hkv, d);
      w.out = make_tensor(w.alloc(nq * es), t, b, sq, hq, d);
      w.dout = make_tensor(w.alloc(nq * es), t, b, sq, hq, d);
      w.dq = make_tensor(w.alloc(nq * es), t, b, sq, hq, d);
      w.dk = make_tensor(w.alloc(nk * es), t, b, sk, hkv, d);
      w.dv = make_tensor(w.alloc(nk * es), t, b, sk, hkv, d);
      break;
    case Layout::kPackedQKV: {
      if (sq != sk || hq != hkv) throw std::runtime_error("kPackedQKV needs seqlen_q == seqlen_k, heads_q == heads_kv");
      uint8_t* p = w.alloc(static_cast<size_t>(3 * nq) * es);
      TensorRef* qkv[3] = {&w.q, &w.k, &w.v};
      for (int which = 0; which < 3; ++which)
        *qkv[which] = view(p + which * hq * d * es, t, b, sq, hq, d, sq * 3 * hq * d, 3 * hq * d);
      w.out = make_tensor(w.alloc(nq * es), t, b, sq, hq, d);
      w.dout = padded(sq, hq, nullptr);
      size_t dq_buf = 0;
      w.dq = padded(sq, hq, &dq_buf);
      w.grad_only_bufs = {dq_buf, packed_kv(&w.dk, &w.dv)};
      break;
    }
    case Layout::kPackedKV: {
      w.q = padded(sq, hq, nullptr);
      packed_kv(&w.k, &w.v);
      w.out = padded(sq, hq, nullptr);
      w.dout = padded(sq, hq, nullptr);
      size_t dq_buf = 0;
      w.dq = padded(sq, hq, &dq_buf);
      w.grad_only_bufs = {dq_buf, packed_kv(&w.dk, &w.dv)};
      break;
    }
    case Layout::kHugeBatchStride: {
      // One slab per batch: q, k, v, out, dout, dq, dk, dv back to back; slabs 2^31 + 4096 elements apart.
      const int64_t batch_stride = (int64_t{1} << 31) + 4096;
      const int64_t slab_q = sq * hq * d, slab_k = sk * hkv * d;
      if (4 * slab_q + 4 * slab_k > batch_stride) throw std::runtime_error("kHugeBatchStride: slab too large");
      uint8_t* p = w.alloc(static_cast<size_t>((b - 1) * batch_stride + 4 * slab_q + 4 * slab_k) * es);
      int64_t off = 0;
      const auto next = [&](int64_t s, int64_t h, int64_t slab) {
        TensorRef r = view(p + off * es, t, b, s, h, d, batch_stride, h * d);
        off += slab;
        return r;
      };
      w.q = next(sq, hq, slab_q);
      w.k = next(sk, hkv, slab_k);
      w.v = next(sk, hkv, slab_k);
      w.out = next(sq, hq, slab_q);
      w.dout = next(sq, hq, slab_q);
      w.dq = next(sq, hq, slab_q);
      w.dk = next(sk, hkv, slab_k);
      w.dv = next(sk, hkv, slab_k);
      break;
    }
  }
  return w;
}

// Elements of a gradient-only buffer (poisoned whole before backward) outside every given view that
// are no longer 0xFFFF: writes out of bounds.
size_t written_outside(const DeviceBuffer& buf, const std::vector<const TensorRef*>& views) {
  std::vector<uint16_t> host(buf.bytes() / 2);
  buf.download(host.data(), host.size() * 2);
  std::vector<uint8_t> covered(host.size(), 0);
  const auto* base = static_cast<const uint8_t*>(buf.get());
  for (const TensorRef* v : views) {
    const auto* p = static_cast<const uint8_t*>(v->data);
    if (p < base || p >= base + buf.bytes()) continue;
    const int64_t first = (p - base) / 2;
    for (int64_t b = 0; b < v->sizes[0]; ++b)
      for (int64_t s = 0; s < v->sizes[1]; ++s)
        for (int64_t h = 0; h < v->sizes[2]; ++h) {
          const int64_t row = first + b * v->strides[0] + s * v->strides[1] + h * v->strides[2];
          std::fill_n(covered.begin() + row, v->sizes[3], uint8_t{1});
        }
  }
  size_t n = 0;
  for (size_t i = 0; i < host.size(); ++i) n += !covered[i] && host[i] != 0xFFFFu;
  return n;
}

// ---- host data, runs and the reference ---------------------------------------------------------

// Dense (b, s, h, d) host copies, already rounded to the case's dtype: the device gets exactly these
// values, and the reference gets them as fp32.
struct HostData {
  std::vector<float> q, k, v, dout;
};

HostData make_inputs(const BwdCase& c, uint64_t seed) {
  const size_t nq = static_cast<size_t>(c.batch * c.seqlen_q * c.heads_q * c.head_dim);
  const size_t nk = static_cast<size_t>(c.batch * c.seqlen_k * c.heads_kv * c.head_dim);
  HostData h;
  h.q = random_values(nq, seed, c.dtype, -1.f, 1.f);
  h.k = random_values(nk, seed + 1, c.dtype, -1.f, 1.f);
  h.v = random_values(nk, seed + 2, c.dtype, -1.f, 1.f);
  h.dout = random_values(nq, seed + 3, c.dtype, -1.f, 1.f);
  return h;
}

void upload_inputs(const Views& w, const HostData& h, DType t) {
  const std::pair<const TensorRef*, const std::vector<float>*> pairs[] = {
      {&w.q, &h.q}, {&w.k, &h.k}, {&w.v, &h.v}, {&w.dout, &h.dout}};
  for (const auto& [view_ref, values] : pairs) {
    std::vector<uint8_t> bytes = encode(*values, t);
    copy_view(*view_ref, bytes.data(), true);
  }
}

// hopattn::forward on the views (out and lse), synchronised. out and lse are poisoned first.
Result run_forward(const Views& w, const BwdCase& c) {
  ForwardArgs a;
  a.q = w.q;
  a.k = w.k;
  a.v = w.v;
  a.out = w.out;
  a.lse = w.lse;
  a.causal = c.causal;
  a.softmax_scale = c.softmax_scale;
  a.window = c.window;
  a.softcap = c.softcap;
  poison_view(w.out);
  HOPATTN_TEST_CUDA(cudaMemset(w.lse.data, 0xFF, static_cast<size_t>(w.lse.sizes[0] * w.lse.sizes[1] * w.lse.sizes[2]) * 4));
  const Result r = forward(a);
  if (!r.ok()) return r;
  HOPATTN_TEST_CUDA(cudaGetLastError());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  return r;
}

BackwardArgs backward_args(const Views& w, const BwdCase& c) {
  BackwardArgs a;
  a.q = w.q;
  a.k = w.k;
  a.v = w.v;
  a.out = w.out;
  a.dout = w.dout;
  a.lse = w.lse;
  a.dq = w.dq;
  a.dk = w.dk;
  a.dv = w.dv;
  a.causal = c.causal;
  a.softmax_scale = c.softmax_scale;
  a.deterministic = c.deterministic;
  a.window = c.window;
  a.softcap = c.softcap;
  return a;
}

// Gradients as they came back: dense bytes in the dtype.
struct Grads {
  std::vector<uint8_t> dq, dk, dv;
};

// Poisons dq/dk/dv (and, unless `keep_workspace`, the workspace: its contents need no init), runs
// backward, synchronises and downloads the gradients. `ws` is (re)allocated to
// backward_workspace_size bytes when it is too small.
Result run_backward(Views& w, const BackwardArgs& a, DeviceBuffer* ws, Grads* g, bool keep_workspace = false) {
  poison_view(a.dq);
  poison_view(a.dk);
  poison_view(a.dv);
  for (size_t i : w.grad_only_bufs) w.bufs[i].fill(0xFF);
  const size_t need = backward_workspace_size(a);
  if (ws->bytes() < need) *ws = DeviceBuffer(need);
  if (!keep_workspace) ws->fill(0xFF);
  const Result r = backward(a, ws->get(), ws->bytes(), nullptr);
  if (!r.ok()) return r;
  HOPATTN_TEST_CUDA(cudaGetLastError());
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  g->dq = download_view(a.dq);
  g->dk = download_view(a.dk);
  g->dv = download_view(a.dv);
  return r;
}

struct RefGrads {
  std::vector<float> dq, dk, dv;
};

// hopattn::backward_cpu on fp32 host copies of the same rounded inputs, fp32 gradients, out/lse left out.
RefGrads reference(const BwdCase& c, const HostData& h) {
  const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  RefGrads r;
  r.dq.assign(h.q.size(), NAN);
  r.dk.assign(h.k.size(), NAN);
  r.dv.assign(h.v.size(), NAN);
  BackwardArgs a;
  const auto f32 = [](const std::vector<float>& x) { return const_cast<float*>(x.data()); };
  a.q = make_tensor(f32(h.q), DType::kFP32, b, sq, hq, d);
  a.k = make_tensor(f32(h.k), DType::kFP32, b, sk, hkv, d);
  a.v = make_tensor(f32(h.v), DType::kFP32, b, sk, hkv, d);
  a.dout = make_tensor(f32(h.dout), DType::kFP32, b, sq, hq, d);
  a.dq = make_tensor(r.dq.data(), DType::kFP32, b, sq, hq, d);
  a.dk = make_tensor(r.dk.data(), DType::kFP32, b, sk, hkv, d);
  a.dv = make_tensor(r.dv.data(), DType::kFP32, b, sk, hkv, d);
  a.causal = c.causal;
  a.softmax_scale = c.softmax_scale;
  a.window = c.window;
  a.softcap = c.softcap;
  const Result res = backward_cpu(a);
  if (!res.ok()) throw std::runtime_error("backward_cpu: " + res.message);
  return r;
}

// One gradient against its reference: relative L2 error, non-finite count, max |g|.
struct GradError {
  double rel = 0, max_abs = 0, ref_norm = 0;
  size_t nonfinite = 0;
  bool ok = false;
};

GradError grad_error(const std::vector<float>& got, const std::vector<float>& ref) {
  GradError e;
  if (got.size() != ref.size()) {
    e.rel = INFINITY;
    return e;
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.nonfinite;
      continue;
    }
    const double dlt = double(got[i]) - ref[i];
    diff += dlt * dlt;
    norm += double(ref[i]) * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(double(got[i])));
  }
  e.ref_norm = std::sqrt(norm);
  e.rel = norm > 0 ? std::sqrt(diff / norm) : 0.0;
  e.ok = e.nonfinite == 0 && (norm > 0 ? e.rel <= kRelTol : e.max_abs <= kZeroRefAbsTol);
  return e;
}

std::string describe(const char* name, const GradError& e) {
  std::ostringstream s;
  s << name << ": ";
  if (e.ref_norm > 0)
    s << "rel_l2=" << e.rel << " (tol " << kRelTol << ")";
  else
    s << "ref is 0, max|g|=" << e.max_abs << " (tol " << kZeroRefAbsTol << ")";
  if (e.nonfinite) s << ", " << e.nonfinite << " NaN/inf";
  return s.str();
}

// Checks dq, dk, dv against the reference; on failure one message with all three errors.
bool check_grads(const std::string& what, DType t, const Grads& g, const RefGrads& ref) {
  const GradError eq = grad_error(decode(g.dq.data(), g.dq.size() / dtype_size(t), t), ref.dq);
  const GradError ek = grad_error(decode(g.dk.data(), g.dk.size() / dtype_size(t), t), ref.dk);
  const GradError ev = grad_error(decode(g.dv.data(), g.dv.size() / dtype_size(t), t), ref.dv);
  const bool ok = eq.ok && ek.ok && ev.ok;
  if (!ok)
    ADD_FAILURE() << what << ": " << describe("dq", eq) << "; " << describe("dk", ek) << "; " << describe("dv", ev);
  return ok;
}

size_t count_nonfinite(const std::vector<uint8_t>& bytes, DType t) {
  size_t n = 0;
  for (float x : decode(bytes.data(), bytes.size() / dtype_size(t), t)) n += !std::isfinite(x);
  return n;
}

size_t count_differences(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType t) {
  if (a.size() != b.size()) return SIZE_MAX;
  const size_t es = dtype_size(t);
  size_t n = 0;
  for (size_t i = 0; i < a.size(); i += es) n += std::memcmp(&a[i], &b[i], es) != 0;
  return n;
}

uint64_t seed_of(const std::string& name) { return std::hash<std::string>{}(name); }

// ---- 1, 2, 7: accuracy against the CPU reference ------------------------------------------------

class BackwardVsReference : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardVsReference, MatchesCpuReference) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const BwdCase c = GetParam();
  if (!kernels_built(c.dtype, c.head_dim)) GTEST_SKIP() << "not built: " << build_instantiations();
  const std::string name = case_name(c);
  if (c.layout == Layout::kHugeBatchStride) {
    size_t free_bytes = 0, total_bytes = 0;
    HOPATTN_TEST_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t need = static_cast<size_t>((c.batch - 1) * ((int64_t{1} << 31) + 4096)) * dtype_size(c.dtype);
    if (free_bytes < need + (size_t{1} << 30)) GTEST_SKIP() << "needs " << need << " bytes of device memory";
  }

  Views w = make_views(c);
  const HostData h = make_inputs(c, seed_of(name));
  upload_inputs(w, h, c.dtype);
  const Result fr = run_forward(w, c);
  ASSERT_TRUE(fr.ok()) << name << ": forward: " << fr.message;

  const BackwardArgs a = backward_args(w, c);
  DeviceBuffer ws;
  Grads g;
  const Result r = run_backward(w, a, &ws, &g);
  ASSERT_TRUE(r.ok()) << name << ": backward: " << r.message;

  for (size_t i = 0; i < w.grad_only_bufs.size(); ++i) {
    const size_t bad = written_outside(w.bufs[w.grad_only_bufs[i]], {&w.dq, &w.dk, &w.dv});
    EXPECT_EQ(bad, 0u) << name << ": " << bad << " elements written outside the dq/dk/dv views (buffer " << i << ")";
  }
  check_grads(name, c.dtype, g, reference(c, h));
}

INSTANTIATE_TEST_SUITE_P(Sm90, BackwardVsReference, ::testing::ValuesIn(make_grid()),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Sm90Strided, BackwardVsReference, ::testing::ValuesIn(make_strided()),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Sm90Softcap, BackwardVsReference, ::testing::ValuesIn(make_softcap()),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Sm90Window, BackwardVsReference, ::testing::ValuesIn(make_window()),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Sm90Huge, BackwardVsReference, ::testing::ValuesIn(make_huge()),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return case_name(info.param); });

// ---- 3: determinism ------------------------------------------------------------------------------

// Many key blocks per query block (dq summed over 16+ of them), GQA, ragged tiles.
BwdCase determinism_case(DType t, int d, bool deterministic) {
  return BwdCase{t, d, false, 513, 2048, 8, 2, 2, deterministic};
}

// deterministic = true: three runs, dq, dk and dv bitwise identical.
TEST(BackwardDeterminism, DeterministicFlagGivesBitwiseIdenticalGrads) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const auto built = built_kernels();
  if (built.empty()) GTEST_SKIP() << "not built: " << build_instantiations();
  for (const auto& [t, d] : built) {
    const BwdCase c = determinism_case(t, d, true);
    const std::string name = case_name(c);
    Views w = make_views(c);
    upload_inputs(w, make_inputs(c, seed_of(name)), t);
    const Result fr = run_forward(w, c);
    ASSERT_TRUE(fr.ok()) << name << ": forward: " << fr.message;
    const BackwardArgs a = backward_args(w, c);
    DeviceBuffer ws;
    Grads first;
    for (int run = 0; run < 3; ++run) {
      Grads g;
      const Result r = run_backward(w, a, &ws, &g);
      ASSERT_TRUE(r.ok()) << name << ": backward: " << r.message;
      EXPECT_EQ(count_nonfinite(g.dq, t) + count_nonfinite(g.dk, t) + count_nonfinite(g.dv, t), 0u)
          << name << ": run " << run << " has NaN/inf gradients";
      if (run == 0) {
        first = std::move(g);
        continue;
      }
      EXPECT_EQ(count_differences(g.dq, first.dq, t), 0u) << name << ": dq of run " << run << " differs from run 0";
      EXPECT_EQ(count_differences(g.dk, first.dk, t), 0u) << name << ": dk of run " << run << " differs from run 0";
      EXPECT_EQ(count_differences(g.dv, first.dv, t), 0u) << name << ": dv of run " << run << " differs from run 0";
    }
  }
}

// deterministic = false: dk and dv (accumulated per CTA in registers) still bitwise identical; dq
// (fp32 atomics in any order) the same up to that order: the fp32 sums agree to ~1e-6 relative, so
// once stored in bf16/fp16 each element is at most one rounding step (one ulp of the dtype) away,
// plus 1e-6 of max |dq| for elements whose sum cancels. Also close to the deterministic result.
TEST(BackwardDeterminism, NonDeterministicDkDvBitwiseDqClose) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const auto built = built_kernels();
  if (built.empty()) GTEST_SKIP() << "not built: " << build_instantiations();
  for (const auto& [t, d] : built) {
    const BwdCase c = determinism_case(t, d, false);
    const std::string name = case_name(c);
    Views w = make_views(c);
    upload_inputs(w, make_inputs(c, seed_of(name)), t);
    const Result fr = run_forward(w, c);
    ASSERT_TRUE(fr.ok()) << name << ": forward: " << fr.message;
    BackwardArgs a = backward_args(w, c);
    DeviceBuffer ws;
    Grads first;
    std::vector<float> first_dq;
    double first_max = 0;
    for (int run = 0; run < 3; ++run) {
      Grads g;
      const Result r = run_backward(w, a, &ws, &g);
      ASSERT_TRUE(r.ok()) << name << ": backward: " << r.message;
      EXPECT_EQ(count_nonfinite(g.dq, t) + count_nonfinite(g.dk, t) + count_nonfinite(g.dv, t), 0u)
          << name << ": run " << run << " has NaN/inf gradients";
      if (run == 0) {
        first = std::move(g);
        first_dq = decode(first.dq.data(), first.dq.size() / 2, t);
        for (float x : first_dq) first_max = std::max(first_max, std::fabs(double(x)));
        continue;
      }
      EXPECT_EQ(count_differences(g.dk, first.dk, t), 0u) << name << ": dk of run " << run << " differs from run 0";
      EXPECT_EQ(count_differences(g.dv, first.dv, t), 0u) << name << ": dv of run " << run << " differs from run 0";
      const std::vector<float> dq = decode(g.dq.data(), g.dq.size() / 2, t);
      size_t far = 0;
      double worst = 0;
      for (size_t i = 0; i < dq.size(); ++i) {
        const double diff = std::fabs(double(dq[i]) - first_dq[i]);
        const double mag = std::max(std::fabs(double(dq[i])), std::fabs(double(first_dq[i])));
        const double bound = dtype_ulp(t, mag) + 1e-6 * first_max;
        if (!(diff <= bound)) ++far;
        worst = std::max(worst, diff / (first_max > 0 ? first_max : 1.0));
      }
      const double rel = rel_l2_error(dq, first_dq);
      EXPECT_TRUE(far == 0 && rel <= 1e-3)
          << name << ": dq of run " << run << " vs run 0: " << far << " elements more than one " << dtype_name(t)
          << " ulp apart (worst |diff|/max|dq| = " << worst << "), rel_l2 = " << rel;
    }
    // The deterministic mode computes the same sums in a fixed order.
    a.deterministic = true;
    Grads det;
    const Result r = run_backward(w, a, &ws, &det);
    ASSERT_TRUE(r.ok()) << name << ": deterministic backward: " << r.message;
    const auto as_f = [t = t](const std::vector<uint8_t>& x) { return decode(x.data(), x.size() / 2, t); };
    const double eq = rel_l2_error(as_f(det.dq), first_dq), ek = rel_l2_error(as_f(det.dk), as_f(first.dk)),
                 ev = rel_l2_error(as_f(det.dv), as_f(first.dv));
    EXPECT_TRUE(eq <= 1e-3 && ek <= 1e-3 && ev <= 1e-3)
        << name << ": deterministic vs not: rel_l2 dq=" << eq << " dk=" << ek << " dv=" << ev;
  }
}

// ---- 4: repeat-race check ------------------------------------------------------------------------

// One mid-size causal GQA shape, 20 runs with deterministic = false on the same (stale, never
// re-poisoned) workspace: dk/dv bitwise identical to run 0 every time, every run within the bound.
// One case ready for the backward: inputs uploaded, the forward run, the fp64 reference computed.
struct PreparedCase {
  std::string name;
  Views w;
  RefGrads ref;
  BackwardArgs args;
};
PreparedCase prepare(const BwdCase& c) {
  PreparedCase p{case_name(c), make_views(c), {}, {}};
  const HostData h = make_inputs(c, seed_of(p.name));
  upload_inputs(p.w, h, c.dtype);
  const Result fr = run_forward(p.w, c);
  if (!fr.ok()) throw std::runtime_error(p.name + ": forward: " + fr.message);
  p.ref = reference(c, h);
  p.args = backward_args(p.w, c);
  return p;
}

// The dtype with built kernels at head dim d (bf16, else fp16), if any.
std::optional<DType> built_dtype(int d) {
  for (DType t : {DType::kBF16, DType::kFP16})
    if (kernels_built(t, d)) return t;
  return std::nullopt;
}

TEST(BackwardRepeat, CausalGqaTwentyRunsStable) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  bool ran = false;
  for (int d : {64, 128, 256}) {
    const std::optional<DType> t = built_dtype(d);
    if (!t) continue;
    ran = true;
    PreparedCase p = prepare(BwdCase{*t, d, true, 555, 555, 8, 2, 2, false});
    const std::string& name = p.name;
    const RefGrads& ref = p.ref;
    Views& w = p.w;
    const BackwardArgs& a = p.args;
    DeviceBuffer ws;
    Grads first;
    for (int run = 0; run < 20; ++run) {
      Grads g;
      const Result r = run_backward(w, a, &ws, &g, /*keep_workspace=*/run > 0);
      ASSERT_TRUE(r.ok()) << name << ": backward: " << r.message;
      if (!check_grads(name + " run " + std::to_string(run), *t, g, ref)) break;
      if (run == 0) {
        first = std::move(g);
        continue;
      }
      const size_t dk_diff = count_differences(g.dk, first.dk, *t), dv_diff = count_differences(g.dv, first.dv, *t);
      if (dk_diff != 0 || dv_diff != 0) {
        ADD_FAILURE() << name << ": run " << run << " differs from run 0 in " << dk_diff << " dk and " << dv_diff
                      << " dv elements";
        break;
      }
    }
  }
  if (!ran) GTEST_SKIP() << "not built: " << build_instantiations();
}

// Causal launch sections (sm90/bwd/launch_order.hpp): the order in which the key blocks run must not
// change what they compute. Six (batch, kv head) pairs in sections of 1 (the key blocks of one head
// side by side), 4 (a short last section of 2) and 6 (longest first across all): every run matches
// the reference, and dk and dv (summed per CTA in registers) are bitwise those of section 1.
TEST(BackwardLaunchOrder, CausalSectionsMatchReferenceAndEachOther) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  bool ran = false;
  heuristics::BwdTuning& tuning = heuristics::bwd_tuning();
  const heuristics::BwdTuning saved = tuning;
  for (int d : {64, 128, 256}) {
    const std::optional<DType> t = built_dtype(d);
    if (!t) continue;
    ran = true;
    PreparedCase p = prepare(BwdCase{*t, d, true, 700, 900, 8, 2, 3, false});
    DeviceBuffer ws;
    Grads first;
    for (int section : {1, 4, 6}) {
      tuning.section_heads = section;
      Grads g;
      const Result r = run_backward(p.w, p.args, &ws, &g);
      tuning = saved;
      const std::string what = p.name + " section " + std::to_string(section);
      ASSERT_TRUE(r.ok()) << what << ": backward: " << r.message;
      if (!check_grads(what, *t, g, p.ref)) break;
      if (section == 1) {
        first = std::move(g);
        continue;
      }
      EXPECT_EQ(count_differences(g.dk, first.dk, *t), 0u) << what << ": dk differs from section 1";
      EXPECT_EQ(count_differences(g.dv, first.dv, *t), 0u) << what << ": dv differs from section 1";
    }
  }
  tuning = saved;
  if (!ran) GTEST_SKIP() << "not built: " << build_instantiations();
}

// The workspace layout run_backward uses for case c (the cases that read it have no window), and n
// ints of a workspace at a byte offset: the tests below read the library's counters there.
sm90::bwd::WorkspaceLayout case_workspace_layout(const BwdCase& c) {
  AttnProblem p;
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k, p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv, p.head_dim = c.head_dim, p.causal = c.causal;
  p.window_left = -1, p.window_right = c.causal ? 0 : -1;
  return sm90::bwd::workspace_layout(p);
}
std::vector<int> workspace_ints(const DeviceBuffer& ws, std::size_t offset, std::size_t n) {
  std::vector<int> v(n);
  HOPATTN_TEST_CUDA(cudaMemcpy(v.data(), static_cast<const char*>(ws.get()) + offset, n * sizeof(int), cudaMemcpyDeviceToHost));
  return v;
}

// d256's dQ postprocess overlapping the main kernel's last wave (sm90/bwd/workspace.hpp,
// dq_overlap): the same gradients as behind the whole grid, against the reference, dK and dV
// bitwise; and every (batch, kv head)'s done counter reads the grid's key blocks afterwards.
TEST(BackwardDqOverlap, MatchesWaitingForTheWholeGrid) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::optional<DType> t = built_dtype(256);
  if (!t) GTEST_SKIP() << "not built: " << build_instantiations();
  heuristics::BwdTuning& tuning = heuristics::bwd_tuning();
  const heuristics::BwdTuning saved = tuning;
  for (const BwdCase& c : {BwdCase{*t, 256, false, 700, 900, 8, 2, 3, false}, BwdCase{*t, 256, true, 255, 1000, 4, 1, 2, false},
                           BwdCase{*t, 256, false, 130, 300, 4, 4, 2, true}}) {
    PreparedCase p = prepare(c);
    DeviceBuffer ws;
    Grads g[2];
    for (int overlap : {0, 1}) {
      tuning.dq_overlap = overlap;
      tuning.tail_split = 0;  // one count per key block (the split's pieces count too: BackwardTailSplit)
      const Result r = run_backward(p.w, p.args, &ws, &g[overlap]);
      tuning = saved;
      const std::string what = p.name + " dq_overlap " + std::to_string(overlap);
      ASSERT_TRUE(r.ok()) << what << ": backward: " << r.message;
      check_grads(what, *t, g[overlap], p.ref);
    }
    EXPECT_EQ(count_differences(g[1].dk, g[0].dk, *t), 0u) << p.name;
    EXPECT_EQ(count_differences(g[1].dv, g[0].dv, *t), 0u) << p.name;
    const sm90::bwd::WorkspaceLayout layout = case_workspace_layout(c);
    ASSERT_LE(layout.total, ws.bytes());
    const std::vector<int> done = workspace_ints(ws, layout.dq_done, c.batch * c.heads_kv);
    for (size_t i = 0; i < done.size(); ++i) EXPECT_EQ(done[i], (c.seqlen_k + 63) / 64) << p.name << " (batch, kv head) " << i;
  }
}

// ---- 5: bad arguments on the device --------------------------------------------------------------

// A small valid problem of the first built (dtype, head dim), forward already run.
struct SmallProblem {
  BwdCase c;
  Views w;
  BackwardArgs args;
};

std::optional<SmallProblem> small_problem() {
  const auto built = built_kernels();
  if (built.empty()) return std::nullopt;
  SmallProblem p{BwdCase{built[0].first, built[0].second, true, 128, 160, 4, 2, 1}, {}, {}};
  p.w = make_views(p.c);
  upload_inputs(p.w, make_inputs(p.c, 5), p.c.dtype);
  const Result fr = run_forward(p.w, p.c);
  if (!fr.ok()) throw std::runtime_error("forward: " + fr.message);
  p.args = backward_args(p.w, p.c);
  return p;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

TEST(BackwardBadInput, WorkspaceNullTooSmallOrMisaligned) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  std::optional<SmallProblem> p = small_problem();
  if (!p) GTEST_SKIP() << "not built: " << build_instantiations();
  const BackwardArgs& a = p->args;
  const size_t need = backward_workspace_size(a);
  ASSERT_GT(need, 0u) << "a non-empty problem needs workspace";
  DeviceBuffer ws(need + 512);
  auto* base = static_cast<uint8_t*>(ws.get());

  struct Bad {
    const char* what;
    void* ptr;
    size_t bytes;
  };
  const Bad bad[] = {{"null", nullptr, need},
                     {"null, 0 bytes", nullptr, 0},
                     {"one byte short", base, need - 1},
                     {"0 bytes", base, 0},
                     {"misaligned by 1", base + 1, need},
                     {"misaligned by 128", base + 128, need}};
  for (const Bad& b : bad) {
    const Result r = backward(a, b.ptr, b.bytes, nullptr);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << b.what << ": " << r.message;
    EXPECT_TRUE(contains(r.message, "workspace")) << b.what << ": message does not name the workspace: " << r.message;
  }
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  // The same arguments with a proper workspace run.
  Grads g;
  const Result r = run_backward(p->w, a, &ws, &g);
  EXPECT_TRUE(r.ok()) << r.message;
}

TEST(BackwardBadInput, HeadDim256Unsupported) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  bool ran = false;
  for (DType t : {DType::kBF16, DType::kFP16}) {
    if (has_backward_kernel(t, 256)) continue;  // built after all: nothing to reject
    ran = true;
    const BwdCase c{t, 256, false, 64, 64, 2, 2, 1};
    Views w = make_views(c);  // contents do not matter: validation must refuse first
    DeviceBuffer ws(size_t{16} << 20);
    const Result r = backward(backward_args(w, c), ws.get(), ws.bytes(), nullptr);
    EXPECT_EQ(r.status, Status::kUnsupported) << dtype_name(t) << ": " << r.message;
    EXPECT_TRUE(contains(r.message, "head_dim")) << dtype_name(t) << ": message does not name head_dim: " << r.message;
    HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
  }
  if (!ran) GTEST_SKIP() << "head_dim 256 backward kernels are built";
}

TEST(BackwardBadInput, LseMissing) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  std::optional<SmallProblem> p = small_problem();
  if (!p) GTEST_SKIP() << "not built: " << build_instantiations();
  const size_t need = backward_workspace_size(p->args);
  DeviceBuffer ws(std::max<size_t>(need, 256));
  for (int variant = 0; variant < 2; ++variant) {
    BackwardArgs a = p->args;
    if (variant == 0)
      a.lse = TensorRef{};  // left out entirely
    else
      a.lse.data = nullptr;  // shape given, no data
    const Result r = backward(a, ws.get(), ws.bytes(), nullptr);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << "variant " << variant << ": " << r.message;
    EXPECT_TRUE(contains(r.message, "lse")) << "variant " << variant << ": message does not name lse: " << r.message;
  }
  HOPATTN_TEST_CUDA(cudaDeviceSynchronize());
}

// ---- 6: empty sequences --------------------------------------------------------------------------

size_t count_nonzero(const std::vector<uint8_t>& bytes, DType t) {
  size_t n = 0;
  for (float x : decode(bytes.data(), bytes.size() / dtype_size(t), t)) n += !(x == 0.f);  // NaN counts
  return n;
}

// Runs forward then backward on one zero-length case (gradients poisoned first) for every built
// (dtype, head_dim), causal and not, and hands the gradients to `check`.
template <class Check>
void for_each_zero_length_case(int64_t seqlen_q, int64_t seqlen_k, uint64_t seed, const Check& check) {
  const auto built = built_kernels();
  if (built.empty()) GTEST_SKIP() << "not built: " << build_instantiations();
  for (const auto& [t, d] : built)
    for (bool causal : {false, true}) {
      const BwdCase c{t, d, causal, seqlen_q, seqlen_k, 8, 2, 2};
      const std::string name = case_name(c);
      Views w = make_views(c);
      upload_inputs(w, make_inputs(c, seed), t);
      const Result fr = run_forward(w, c);
      ASSERT_TRUE(fr.ok()) << name << ": forward: " << fr.message;
      DeviceBuffer ws;
      Grads g;
      const Result r = run_backward(w, backward_args(w, c), &ws, &g);
      ASSERT_TRUE(r.ok()) << name << ": backward: " << r.message;
      check(name, t, d, g);
    }
}

// seqlen_q == 0: no query row, so nothing flows into K or V: dk = dv = 0 (poisoned first).
TEST(BackwardZeroLength, SeqlenQZeroGivesZeroDkDv) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for_each_zero_length_case(0, 100, 7, [](const std::string& name, DType t, int d, const Grads& g) {
    ASSERT_EQ(g.dk.size(), static_cast<size_t>(2 * 100 * 2 * d) * dtype_size(t));
    EXPECT_EQ(count_nonzero(g.dk, t), 0u) << name << ": dk not all zero";
    EXPECT_EQ(count_nonzero(g.dv, t), 0u) << name << ": dv not all zero";
  });
}

// seqlen_k == 0: every row sees no key (out = 0, lse = -inf): dq = 0 (poisoned first).
TEST(BackwardZeroLength, SeqlenKZeroGivesZeroDq) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  for_each_zero_length_case(100, 0, 8, [](const std::string& name, DType t, int d, const Grads& g) {
    ASSERT_EQ(g.dq.size(), static_cast<size_t>(2 * 100 * 8 * d) * dtype_size(t));
    EXPECT_EQ(count_nonzero(g.dq, t), 0u) << name << ": dq not all zero";
  });
}

}  // namespace
// The d256 tail split (sm90/bwd/workspace.hpp, TailSplit): pieces of a unit add their dK and dV
// into a workspace slot and the last one stores. Forced pieces (HOPATTN_BWD_TAIL_SPLIT=N's knob)
// at small shapes, uneven (3 and 5 parts of 11 query blocks) and with GQA, against the reference;
// then a shape the model splits on this device, against the unsplit kernel.
TEST(BackwardTailSplit, PiecesMatchReferenceAndWholeUnits) {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 device";
  const std::optional<DType> t = built_dtype(256);
  if (!t) GTEST_SKIP() << "not built: " << build_instantiations();
  heuristics::BwdTuning& tuning = heuristics::bwd_tuning();
  const heuristics::BwdTuning saved = tuning;
  for (const BwdCase& c : {BwdCase{*t, 256, false, 700, 900, 8, 2, 3, false}, BwdCase{*t, 256, false, 130, 300, 2, 2, 1, false}}) {
    PreparedCase p = prepare(c);
    DeviceBuffer ws;
    for (int mode : {2, 3, 5, 16}) {
      tuning.tail_split = mode;
      Grads g;
      const Result r = run_backward(p.w, p.args, &ws, &g);
      tuning = saved;
      const std::string what = p.name + " tail split " + std::to_string(mode);
      ASSERT_TRUE(r.ok()) << what << ": backward: " << r.message;
      check_grads(what, *t, g, p.ref);
    }
  }
  // units = SMs + SMs / 3: a third of a wave left over, which the model cuts into pieces.
  int sms = 0;
  HOPATTN_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t units = sms + sms / 3;
  const BwdCase big{*t, 256, false, 1024, units * 64, 1, 1, 1, false};
  ASSERT_GT(sm90::bwd::bwd_tail_split(units, 16, sms).units, 0) << "the model should split " << units << " units";
  Views w = make_views(big);
  upload_inputs(w, make_inputs(big, seed_of(case_name(big))), *t);
  ASSERT_TRUE(run_forward(w, big).ok());
  const BackwardArgs a = backward_args(w, big);
  DeviceBuffer ws;
  Grads whole, split;
  tuning.tail_split = 0;
  const Result r0 = run_backward(w, a, &ws, &whole);
  tuning = saved;
  ASSERT_TRUE(r0.ok()) << r0.message;
  const Result r1 = run_backward(w, a, &ws, &split);
  ASSERT_TRUE(r1.ok()) << r1.message;
  // The split ran: every split unit's counter holds its pieces (the last one does not reset it;
  // run_backward poisoned the workspace before, and the preprocess zeroed the counters).
  const sm90::bwd::TailSplit want = sm90::bwd::bwd_tail_split(units, 16, sms);
  const sm90::bwd::WorkspaceLayout layout = case_workspace_layout(big);
  ASSERT_LE(layout.total, ws.bytes());
  const std::vector<int> counts = workspace_ints(ws, layout.tail_count, want.units);
  for (int i = 0; i < want.units; ++i) EXPECT_EQ(counts[i], want.parts) << "split unit " << i;
  // With dq_overlap (the default at d256) every piece counts itself done, and the postprocess waited
  // for all of them: one head, its key blocks plus parts - 1 per split unit.
  if (heuristics::bwd_dq_overlap()) {
    EXPECT_EQ(workspace_ints(ws, layout.dq_done, 1)[0], units + int64_t(want.units) * (want.parts - 1));
  }
  // Against whole units: dK and dV differ only in the fp32 order of their sums, dQ in that of its
  // adds (unordered in either run).
  for (auto [name, got, ref] : {std::tuple{"dq", &split.dq, &whole.dq}, std::tuple{"dk", &split.dk, &whole.dk},
                                std::tuple{"dv", &split.dv, &whole.dv}}) {
    const GradError e = grad_error(decode(got->data(), got->size() / dtype_size(*t), *t),
                                   decode(ref->data(), ref->size() / dtype_size(*t), *t));
    EXPECT_EQ(e.nonfinite, 0u) << name;
    EXPECT_LT(e.rel, 1e-2) << name << ": split against whole units";
  }
}

}  // namespace hopattn::test
