// Argument validation for the variable-length forward pass: VarlenForwardArgs into a VarlenProblem,
// or a Result whose message names the offending argument (and index). Pure host code.
//
// Two kinds of checks. Shapes, dtypes, strides and the form of the int32 index tensors are checked
// for every backend. The index values (cu_seqlens starts at 0, is non-decreasing, ends within the
// packed tokens; lengths <= max_seqlen; seqused within its sequence) are read only for Backend::kCpu,
// whose index tensors are host memory. On the GPU, reading them would cost a device-to-host copy on
// the hot path, so there they will live in a debug-checks mode (issue 6) that reuses
// check_varlen_values below on a host copy.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "api/instantiations.hpp"
#include "api/messages.hpp"
#include "api/problem.hpp"
#include "api/tensor_layout.hpp"

namespace hopattn {
namespace {

Result fail(const std::string& msg) { return detail::fail(Status::kInvalidArgument, msg); }

using detail::cat;

// kSm90Fp8: q/k/v e4m3 (forward_fp8_varlen) or 16-bit (attention_fp8_varlen); out 16-bit.
bool data_dtype_allowed(DType t, Backend backend) {
  switch (t) {
    case DType::kBF16:
    case DType::kFP16: return true;
    case DType::kFP32: return backend == Backend::kCpu;
    case DType::kInt32: return false;
    case DType::kE4M3: return backend == Backend::kSm90Fp8;
  }
  return false;
}

bool on_gpu(Backend backend) { return backend == Backend::kSm90 || backend == Backend::kSm90Fp8; }

// One packed q/k/v/out tensor: (total, heads, head_dim), contiguous head_dim.
Result check_packed(const char* name, const TensorRef& t, Backend backend) {
  if (t.ndim != 3)
    return fail(cat(name, ": expected 3 dims (total_tokens, heads, head_dim), got ndim=", t.ndim));
  for (int i = 0; i < 3; ++i) {
    if (t.sizes[i] < 0) return fail(cat(name, ".sizes[", i, "] is negative (", t.sizes[i], ")"));
    if (t.strides[i] < 0) return fail(cat(name, ".strides[", i, "] is negative (", t.strides[i], ")"));
    // cu_seqlens are int32, so token counts (and everything else) fit in 31 bits.
    if (t.sizes[i] > std::numeric_limits<int32_t>::max())
      return fail(cat(name, ".sizes[", i, "] = ", t.sizes[i], " exceeds 2^31-1"));
  }
  if (t.strides[2] != 1)
    return fail(cat(name, ": last dim (head_dim) must be contiguous, got ", name, ".strides[2]=", t.strides[2]));
  if (Result r = detail::check_extent(name, t, 3); !r.ok()) return r;
  const bool has_elements = t.sizes[0] > 0 && t.sizes[1] > 0 && t.sizes[2] > 0;
  if (has_elements && t.data == nullptr) return fail(cat(name, ".data is null"));
  if (on_gpu(backend) && has_elements) {
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return fail(cat(name, ".data is not 16-byte aligned"));
    const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t.dtype));
    for (int i = 0; i < 2; ++i)
      if (t.sizes[i] > 1 && t.strides[i] % per16 != 0)
        return fail(cat(name, ".strides[", i, "]=", t.strides[i], " is not a multiple of ", per16, " elements (16 bytes)"));
  }
  return {};
}

// A 1-dim contiguous int32 index tensor of `want` elements.
Result check_index(const char* name, const TensorRef& t, int64_t want, const char* what) {
  if (t.dtype != DType::kInt32) return fail(cat(name, ": dtype must be int32, got ", dtype_name(t.dtype)));
  if (t.ndim != 1) return fail(cat(name, ": expected 1 dim (", what, "), got ndim=", t.ndim));
  if (t.sizes[0] != want) return fail(cat(name, ".sizes[0]=", t.sizes[0], " but expected ", want, " (", what, ")"));
  if (t.sizes[0] > 1 && t.strides[0] != 1)
    return fail(cat(name, " must be contiguous: strides[0]=", t.strides[0], ", expected 1"));
  if (want > 0 && t.data == nullptr) return fail(cat(name, ".data is null"));
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) return fail(cat(name, ".data is not 4-byte aligned"));
  return {};
}

Result check_lse(const TensorRef& lse, int64_t h, int64_t total) {
  if (lse.data == nullptr) return {};
  if (lse.dtype != DType::kFP32) return fail(cat("lse: dtype must be fp32, got ", dtype_name(lse.dtype)));
  if (lse.ndim != 2) return fail(cat("lse: expected 2 dims (heads_q, total_q), got ndim=", lse.ndim));
  const int64_t want[2] = {h, total};
  for (int i = 0; i < 2; ++i)
    if (lse.sizes[i] != want[i])
      return fail(cat("lse.sizes[", i, "]=", lse.sizes[i], " but expected ", want[i], " (heads_q, total_q)"));
  const int64_t want_stride[2] = {total, 1};
  for (int i = 0; i < 2; ++i)
    if (lse.sizes[i] > 1 && lse.strides[i] != want_stride[i])
      return fail(cat("lse must be contiguous: strides[", i, "]=", lse.strides[i], ", expected ", want_stride[i]));
  if (reinterpret_cast<uintptr_t>(lse.data) % 4 != 0) return fail("lse.data is not 4-byte aligned");
  return {};
}

// The value checks of one side (q or k): cu (batch + 1 entries) against `total` tokens and
// `max_seqlen`, then seqused (batch entries, or null) against the lengths. Host memory.
Result check_varlen_values(const char* side, const int32_t* cu, const int32_t* seqused, int64_t batch,
                           int64_t total, int64_t max_seqlen) {
  const std::string cu_name = cat("cu_seqlens_", side), used_name = cat("seqused_", side);
  const std::string tokens = cat(side, ".sizes[0]");
  if (cu[0] != 0) return fail(cat(cu_name, "[0]=", cu[0], " but must be 0 (prefix sums start at 0)"));
  for (int64_t b = 1; b <= batch; ++b)
    if (cu[b] < cu[b - 1])
      return fail(cat(cu_name, "[", b, "]=", cu[b], " is less than ", cu_name, "[", b - 1, "]=", cu[b - 1],
                      " (must be non-decreasing)"));
  if (cu[batch] > total)
    return fail(cat(cu_name, "[", batch, "]=", cu[batch], " exceeds the total tokens ", tokens, "=", total));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = static_cast<int64_t>(cu[b + 1]) - cu[b];
    if (len > max_seqlen)
      return fail(cat(cu_name, "[", b + 1, "]-", cu_name, "[", b, "]=", len, " (sequence ", b, ") exceeds max_seqlen_",
                      side, "=", max_seqlen));
  }
  if (seqused != nullptr)
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = static_cast<int64_t>(cu[b + 1]) - cu[b];
      if (seqused[b] < 0 || seqused[b] > len)
        return fail(cat(used_name, "[", b, "]=", seqused[b], " is outside [0, ", len, "] (the length of sequence ", b,
                        " from ", cu_name, ")"));
    }
  return {};
}

}  // namespace

Result validate_forward_varlen(const VarlenForwardArgs& a, Backend backend, VarlenProblem* p) {
  if (backend != Backend::kCpu && !on_gpu(backend))
    return Result{Status::kUnsupported, "varlen: only the CPU reference and the sm90 kernels exist"};
  const bool fp8 = backend == Backend::kSm90Fp8;
  const struct { const char* name; const TensorRef* t; } tensors[] = {
      {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}};
  for (const auto& [name, t] : tensors)
    if (!data_dtype_allowed(t->dtype, backend))
      return Result{backend == Backend::kCpu || t->dtype == DType::kInt32 ? Status::kInvalidArgument : Status::kUnsupported,
                    cat(name, ": dtype ", dtype_name(t->dtype), " is not supported by this backend (",
                        backend == Backend::kCpu ? "bf16, fp16, fp32" : fp8 ? "e4m3, bf16, fp16" : "bf16, fp16", ")",
                        t->dtype == DType::kInt32 ? "; int32 is for index tensors (cu_seqlens, seqused) only" : "")};
  // FP8: out is bf16/fp16 whatever q is (e4m3 for forward_fp8_varlen; q's own for attention_fp8_varlen).
  if (fp8 && a.out.dtype == DType::kE4M3) return fail("out: dtype e4m3 is not an output dtype (bf16 or fp16)");
  for (const auto& [name, t] : tensors)
    if (t->dtype != a.q.dtype && !(fp8 && a.q.dtype == DType::kE4M3 && t == &a.out))
      return fail(cat(name, ": dtype ", dtype_name(t->dtype), " differs from q's ", dtype_name(a.q.dtype)));
  for (const auto& [name, t] : tensors)
    if (Result r = check_packed(name, *t, backend); !r.ok()) return r;

  const int64_t total_q = a.q.sizes[0], hq = a.q.sizes[1], d = a.q.sizes[2];
  const int64_t total_k = a.k.sizes[0], hkv = a.k.sizes[1];
  if (a.k.sizes[2] != d) return fail(cat("k.sizes[2] (head_dim)=", a.k.sizes[2], " but q has head_dim ", d));
  if (a.v.sizes[2] != d)
    return Result{Status::kUnsupported, cat("v.sizes[2] (head_dim)=", a.v.sizes[2], " but q has head_dim ", d,
                                            "; head_dim_v != head_dim_qk is not supported yet")};
  if (a.v.sizes[0] != total_k) return fail(cat("v.sizes[0] (total_k)=", a.v.sizes[0], " but k has total_k ", total_k));
  if (a.v.sizes[1] != hkv) return fail(cat("v.sizes[1] (heads_kv)=", a.v.sizes[1], " but k has heads_kv ", hkv));
  for (int i = 0; i < 3; ++i)
    if (a.out.sizes[i] != a.q.sizes[i])
      return fail(cat("out.sizes[", i, "]=", a.out.sizes[i], " but q.sizes[", i, "]=", a.q.sizes[i]));
  if (hq > 0 && hkv == 0) return fail("k.sizes[1] (heads_kv) is 0 but q has heads");
  if (hkv > 0 && hq % hkv != 0) return fail(cat("heads_q=", hq, " is not a multiple of heads_kv=", hkv, " (GQA/MQA)"));
  // 32-bit row and tile counters, as in validate_forward.
  if (total_q * hq > std::numeric_limits<int32_t>::max())  // both < 2^31: no overflow
    return fail(cat("q: total_q x heads_q = ", total_q, " x ", hq, " query rows, more than 2^31-1"));
  if (total_k * hkv > std::numeric_limits<int32_t>::max())
    return fail(cat("k: total_k x heads_kv = ", total_k, " x ", hkv, " key rows, more than 2^31-1"));
  if (Result r = check_lse(a.lse, hq, total_q); !r.ok()) return r;
  if (a.softmax_scale && !(std::isfinite(*a.softmax_scale) && *a.softmax_scale > 0.f))
    return fail(cat("softmax_scale must be finite and > 0, got ", *a.softmax_scale));
  if (d == 0) return fail("q.sizes[2] (head_dim) is 0");
  int64_t window_left = -1, window_right = -1;
  if (Result r = normalise_window(a.window, a.causal, &window_left, &window_right); !r.ok()) return r;
  if (Result r = check_softcap(a.softcap); !r.ok()) return r;

  // The index tensors: cu_seqlens_q fixes the batch, cu_seqlens_k must agree.
  if (a.cu_seqlens_q.ndim != 1)
    return fail(cat("cu_seqlens_q: expected 1 dim (batch + 1), got ndim=", a.cu_seqlens_q.ndim));
  if (a.cu_seqlens_q.sizes[0] < 1)
    return fail(cat("cu_seqlens_q.sizes[0]=", a.cu_seqlens_q.sizes[0], " but must be batch + 1 >= 1"));
  const int64_t batch = a.cu_seqlens_q.sizes[0] - 1;
  if (Result r = check_index("cu_seqlens_q", a.cu_seqlens_q, batch + 1, "batch + 1"); !r.ok()) return r;
  if (Result r = check_index("cu_seqlens_k", a.cu_seqlens_k, batch + 1, "batch + 1, as cu_seqlens_q"); !r.ok()) return r;
  const bool has_used_q = !tensor_absent(a.seqused_q), has_used_k = !tensor_absent(a.seqused_k);
  if (has_used_q)
    if (Result r = check_index("seqused_q", a.seqused_q, batch, "batch"); !r.ok()) return r;
  if (has_used_k)
    if (Result r = check_index("seqused_k", a.seqused_k, batch, "batch"); !r.ok()) return r;
  if (a.max_seqlen_q < 0) return fail(cat("max_seqlen_q=", a.max_seqlen_q, " is negative"));
  if (a.max_seqlen_k < 0) return fail(cat("max_seqlen_k=", a.max_seqlen_k, " is negative"));

  const auto* cu_q = static_cast<const int32_t*>(a.cu_seqlens_q.data);
  const auto* cu_k = static_cast<const int32_t*>(a.cu_seqlens_k.data);
  const auto* used_q = has_used_q ? static_cast<const int32_t*>(a.seqused_q.data) : nullptr;
  const auto* used_k = has_used_k ? static_cast<const int32_t*>(a.seqused_k.data) : nullptr;
  if (backend == Backend::kCpu) {  // host memory: the values can be read here
    if (Result r = check_varlen_values("q", cu_q, used_q, batch, total_q, a.max_seqlen_q); !r.ok()) return r;
    if (Result r = check_varlen_values("k", cu_k, used_k, batch, total_k, a.max_seqlen_k); !r.ok()) return r;
  }
  if (on_gpu(backend) && a.max_seqlen_q > std::numeric_limits<int32_t>::max() / 2)
    return fail(cat("max_seqlen_q=", a.max_seqlen_q, " exceeds 2^30-1"));
  if (on_gpu(backend) && a.max_seqlen_k > std::numeric_limits<int32_t>::max() / 2)
    return fail(cat("max_seqlen_k=", a.max_seqlen_k, " exceeds 2^30-1"));
  // FP8's V^T gives every sequence whole 128-key tiles (fp8::vt_varlen_columns): its key extent,
  // a TMA coordinate, must fit in 31 bits.
  if (fp8 && (total_k + 127) / 128 * 128 + 128 * batch > std::numeric_limits<int32_t>::max())
    return fail(cat("k.sizes[0] (total_k)=", total_k, " with ", batch,
                    " sequences: the FP8 V^T layout (total_k rounded up to 128, plus 128 per sequence) exceeds 2^31-1 keys"));
  if (backend == Backend::kSm90 && !has_forward_kernel(a.q.dtype, static_cast<int>(d)))
    return Result{Status::kUnsupported, cat("head_dim ", d, " with dtype ", dtype_name(a.q.dtype),
                                            " has no sm90 kernel in this build (built: ", build_instantiation_list(), ")")};
  if (fp8 && !has_fp8_kernel(a.out.dtype, static_cast<int>(d)))
    return Result{Status::kUnsupported, cat("head_dim ", d, " with output dtype ", dtype_name(a.out.dtype),
                                            " has no FP8 kernel in this build (built: ", build_instantiation_list(), ")")};
  if (Result r = check_output_layout("out", a.out); !r.ok()) return r;  // last: shape and support come first

  p->batch = batch; p->total_q = total_q; p->total_k = total_k;
  p->heads_q = hq; p->heads_kv = hkv; p->head_dim = d;
  p->max_seqlen_q = a.max_seqlen_q; p->max_seqlen_k = a.max_seqlen_k;
  p->dtype = fp8 ? a.out.dtype : a.q.dtype;  // FP8: the output's (the kernel's instantiation key)
  p->causal = a.causal;
  p->scale = resolve_softmax_scale(a.softmax_scale, d);
  p->window_left = window_left; p->window_right = window_right;
  p->softcap = a.softcap;
  p->q = a.q.data; p->k = a.k.data; p->v = a.v.data; p->out = a.out.data;
  p->lse = static_cast<float*>(a.lse.data);
  for (int i = 0; i < 2; ++i) {
    p->q_stride[i] = a.q.strides[i];
    p->k_stride[i] = a.k.strides[i];
    p->v_stride[i] = a.v.strides[i];
    p->o_stride[i] = a.out.strides[i];
  }
  p->cu_seqlens_q = cu_q; p->cu_seqlens_k = cu_k;
  p->seqused_q = used_q; p->seqused_k = used_k;
  return {};
}

Result check_varlen_index_values(const VarlenProblem& p, const int32_t* cu_q, const int32_t* cu_k,
                                 const int32_t* used_q, const int32_t* used_k) {
  if (Result r = check_varlen_values("q", cu_q, used_q, p.batch, p.total_q, p.max_seqlen_q); !r.ok()) return r;
  return check_varlen_values("k", cu_k, used_k, p.batch, p.total_k, p.max_seqlen_k);
}

AttnProblem to_attn_problem(const VarlenProblem& v) {
  AttnProblem p;
  p.batch = v.batch;
  p.seqlen_q = v.max_seqlen_q;
  p.seqlen_k = v.max_seqlen_k;
  p.heads_q = v.heads_q;
  p.heads_kv = v.heads_kv;
  p.head_dim = v.head_dim;
  p.dtype = v.dtype;
  p.causal = v.causal;
  p.scale = v.scale;
  p.window_left = v.window_left;
  p.window_right = v.window_right;
  p.softcap = v.softcap;
  p.q = v.q; p.k = v.k; p.v = v.v; p.out = v.out;
  p.lse = v.lse;
  const auto strides = [](int64_t dst[3], const int64_t src[2]) {  // (token, head) -> (0, token, head)
    dst[0] = 0; dst[1] = src[0]; dst[2] = src[1];
  };
  strides(p.q_stride, v.q_stride);
  strides(p.k_stride, v.k_stride);
  strides(p.v_stride, v.v_stride);
  strides(p.o_stride, v.o_stride);
  p.cu_seqlens_q = v.cu_seqlens_q;
  p.cu_seqlens_k = v.cu_seqlens_k;
  p.seqused_q = v.seqused_q;
  p.seqused_k = v.seqused_k;
  p.total_q = v.total_q;
  p.total_k = v.total_k;
  return p;
}

Result validate_backward_varlen(const VarlenBackwardArgs& a, VarlenProblem* fwd, AttnBackwardProblem* p) {
  VarlenForwardArgs f;
  f.q = a.q; f.k = a.k; f.v = a.v; f.out = a.out; f.lse = a.lse;
  f.cu_seqlens_q = a.cu_seqlens_q; f.cu_seqlens_k = a.cu_seqlens_k;
  f.max_seqlen_q = a.max_seqlen_q; f.max_seqlen_k = a.max_seqlen_k;
  f.seqused_q = a.seqused_q; f.seqused_k = a.seqused_k;
  f.causal = a.causal; f.softmax_scale = a.softmax_scale; f.window = a.window; f.softcap = a.softcap;
  if (Result r = validate_forward_varlen(f, Backend::kSm90, fwd); !r.ok()) return r;
  if (a.lse.data == nullptr && fwd->heads_q * fwd->total_q > 0)
    return fail("lse: required by backward_varlen (forward_varlen's (heads_q, total_q) fp32 log-sum-exp); lse.data is null");
  const struct { const char* name; const TensorRef* t; const char* like_name; const TensorRef* like; } grads[] = {
      {"dout", &a.dout, "out", &a.out}, {"dq", &a.dq, "q", &a.q}, {"dk", &a.dk, "k", &a.k}, {"dv", &a.dv, "v", &a.v}};
  for (const auto& g : grads) {
    if (g.t->dtype != a.q.dtype)
      return fail(cat(g.name, ": dtype ", dtype_name(g.t->dtype), " differs from q's ", dtype_name(a.q.dtype)));
    if (Result r = check_packed(g.name, *g.t, Backend::kSm90); !r.ok()) return r;
    for (int i = 0; i < 3; ++i)
      if (g.t->sizes[i] != g.like->sizes[i])
        return fail(cat(g.name, ".sizes[", i, "]=", g.t->sizes[i], " but ", g.like_name, ".sizes[", i, "]=", g.like->sizes[i]));
  }
  if (!has_backward_kernel(a.q.dtype, static_cast<int>(fwd->head_dim)))
    return Result{Status::kUnsupported, cat("head_dim ", fwd->head_dim, " with dtype ", dtype_name(a.q.dtype),
                                            " has no sm90 backward kernel in this build (built: ",
                                            build_instantiation_list(), ")")};
  for (const auto& g : grads)
    if (g.t != &a.dout)
      if (Result r = check_output_layout(g.name, *g.t); !r.ok()) return r;
  p->fwd = to_attn_problem(*fwd);
  p->dout = a.dout.data;
  p->dq = a.dq.data;
  p->dk = a.dk.data;
  p->dv = a.dv.data;
  p->grad_dtype = a.q.dtype;
  p->deterministic = a.deterministic;
  const auto strides = [](int64_t dst[3], const TensorRef& t) {  // (token, head) -> (0, token, head)
    dst[0] = 0; dst[1] = t.strides[0]; dst[2] = t.strides[1];
  };
  strides(p->do_stride, a.dout);
  strides(p->dq_stride, a.dq);
  strides(p->dk_stride, a.dk);
  strides(p->dv_stride, a.dv);
  return {};
}

}  // namespace hopattn
