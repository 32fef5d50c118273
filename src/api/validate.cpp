// Argument validation for the forward and backward passes: functions that turn ForwardArgs into an
// AttnProblem (BackwardArgs into an AttnBackwardProblem) or a Result whose message names the
// offending argument. Pure host code, so the CPU tests exercise every rule without a GPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "api/instantiations.hpp"
#include "api/messages.hpp"
#include "api/problem.hpp"
#include "api/tensor_layout.hpp"

namespace hopattn {
namespace {

using detail::cat;
using detail::fail;

bool has_elements(const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i)
    if (t.sizes[i] == 0) return false;
  return true;
}

// Shape-independent checks of one q/k/v/out tensor.
Result check_tensor(const char* name, const TensorRef& t, Backend backend) {
  if (t.ndim != 4)
    return fail(Status::kInvalidArgument,
                cat(name, ": expected 4 dims (batch, seqlen, heads, head_dim), got ndim=", t.ndim));
  for (int i = 0; i < 4; ++i) {
    if (t.sizes[i] < 0) return fail(Status::kInvalidArgument, cat(name, ".sizes[", i, "] is negative (", t.sizes[i], ")"));
    if (t.strides[i] < 0) return fail(Status::kInvalidArgument, cat(name, ".strides[", i, "] is negative (", t.strides[i], ")"));
    // Kernels index within one sequence/head with 32-bit ints; offsets themselves are 64-bit.
    if (t.sizes[i] > std::numeric_limits<int32_t>::max())
      return fail(Status::kInvalidArgument, cat(name, ".sizes[", i, "] = ", t.sizes[i], " exceeds 2^31-1"));
  }
  if (t.strides[3] != 1)
    return fail(Status::kInvalidArgument,
                cat(name, ": last dim (head_dim) must be contiguous, got ", name, ".strides[3]=", t.strides[3]));
  if (Result r = detail::check_extent(name, t, 4); !r.ok()) return r;
  if (has_elements(t) && t.data == nullptr)
    return fail(Status::kInvalidArgument, cat(name, ".data is null"));
  if ((backend == Backend::kSm90 || backend == Backend::kSm90Fp8) && has_elements(t)) {
    // 16-byte vector / TMA loads need aligned rows: base pointer and every leading stride.
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
      return fail(Status::kInvalidArgument, cat(name, ".data is not 16-byte aligned"));
    const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t.dtype));
    for (int i = 0; i < 3; ++i)
      if (t.sizes[i] > 1 && t.strides[i] % per16 != 0)
        return fail(Status::kInvalidArgument,
                    cat(name, ".strides[", i, "]=", t.strides[i], " is not a multiple of ", per16,
                        " elements (16 bytes)"));
  }
  return {};
}

// kSm90Fp8: q/k/v e4m3 (forward_fp8) or 16-bit (attention_fp8, which quantises them itself).
bool dtype_allowed(DType t, Backend backend) {
  if (backend == Backend::kSm90Fp8) return t == DType::kBF16 || t == DType::kFP16 || t == DType::kE4M3;
  switch (t) {
    case DType::kBF16:
    case DType::kFP16: return true;
    case DType::kFP32: return backend == Backend::kCpu;
    case DType::kInt32: return false;  // index tensors only (cu_seqlens, seqused)
    case DType::kE4M3: return false;   // forward_fp8 / quantize_fp8 only
  }
  return false;
}

Result check_lse(const TensorRef& lse, int64_t b, int64_t h, int64_t s) {
  if (lse.data == nullptr) return {};
  if (lse.dtype != DType::kFP32)
    return fail(Status::kInvalidArgument, cat("lse: dtype must be fp32, got ", dtype_name(lse.dtype)));
  if (lse.ndim != 3)
    return fail(Status::kInvalidArgument, cat("lse: expected 3 dims (batch, heads_q, seqlen_q), got ndim=", lse.ndim));
  const int64_t want[3] = {b, h, s};
  for (int i = 0; i < 3; ++i)
    if (lse.sizes[i] != want[i])
      return fail(Status::kInvalidArgument,
                  cat("lse.sizes[", i, "]=", lse.sizes[i], " but expected ", want[i], " (batch, heads_q, seqlen_q)"));
  const int64_t want_stride[3] = {h * s, s, 1};
  for (int i = 0; i < 3; ++i)
    if (lse.sizes[i] > 1 && lse.strides[i] != want_stride[i])
      return fail(Status::kInvalidArgument,
                  cat("lse must be contiguous: strides[", i, "]=", lse.strides[i], ", expected ", want_stride[i]));
  if (reinterpret_cast<uintptr_t>(lse.data) % 4 != 0)
    return fail(Status::kInvalidArgument, "lse.data is not 4-byte aligned");
  return {};
}

// A gradient-side tensor (dout, dq, dk, dv): q's dtype, the forward's tensor rules, and the sizes of
// `like` (the tensor it mirrors, named `like_name` in messages).
Result check_like(const char* name, const TensorRef& t, const char* like_name, const TensorRef& like,
                  DType dtype, Backend backend) {
  if (t.dtype != dtype)
    return fail(Status::kInvalidArgument,
                cat(name, ": dtype ", dtype_name(t.dtype), " differs from q's ", dtype_name(dtype)));
  if (Result r = check_tensor(name, t, backend); !r.ok()) return r;
  for (int i = 0; i < 4; ++i)
    if (t.sizes[i] != like.sizes[i])
      return fail(Status::kInvalidArgument,
                  cat(name, ".sizes[", i, "]=", t.sizes[i], " but ", like_name, ".sizes[", i, "]=", like.sizes[i]));
  return {};
}

}  // namespace

Result check_tensor_layout(const char* name, const TensorRef& t, Backend backend) { return check_tensor(name, t, backend); }

namespace {

// validate_forward's rules; `out_written` is false only for the CPU backward without an out, which
// passes q in out's place (q may be a broadcast view: only outputs must not overlap).
Result validate_forward_args(const ForwardArgs& a, Backend backend, AttnProblem* p, bool out_written) {
  const struct { const char* name; const TensorRef* t; } tensors[] = {
      {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}};
  const bool fp8 = backend == Backend::kSm90Fp8;
  for (const auto& [name, t] : tensors) {
    if (!dtype_allowed(t->dtype, backend))
      return fail(backend == Backend::kCpu || t->dtype == DType::kInt32 ? Status::kInvalidArgument : Status::kUnsupported,
                  cat(name, ": dtype ", dtype_name(t->dtype), " is not supported by this backend (",
                      backend == Backend::kCpu ? "bf16, fp16, fp32" : fp8 ? "e4m3, bf16, fp16" : "bf16, fp16", ")",
                      t->dtype == DType::kInt32 ? "; int32 is for index tensors (cu_seqlens, seqused) only" : ""));
  }
  // FP8: out is bf16/fp16 whatever q is (e4m3 for forward_fp8; q's own dtype for attention_fp8).
  if (fp8 && a.out.dtype == DType::kE4M3)
    return fail(Status::kInvalidArgument, "out: dtype e4m3 is not an output dtype (bf16 or fp16)");
  if (fp8 && a.q.dtype != DType::kE4M3 && a.out.dtype != a.q.dtype)
    return fail(Status::kInvalidArgument,
                cat("out: dtype ", dtype_name(a.out.dtype), " differs from q's ", dtype_name(a.q.dtype)));
  // forward_fp8 with a 16-bit V (the 16-bit P V kernels): e4m3 q and k, V in out's dtype.
  const bool v16 = fp8 && a.q.dtype == DType::kE4M3 && a.v.dtype != DType::kE4M3 && a.v.dtype == a.out.dtype;
  for (const auto& [name, t] : tensors)
    if (t->dtype != a.q.dtype && !(fp8 && t == &a.out) && !(v16 && t == &a.v))
      return fail(Status::kInvalidArgument,
                  cat(name, ": dtype ", dtype_name(t->dtype), " differs from q's ", dtype_name(a.q.dtype)));
  for (const auto& [name, t] : tensors)
    if (Result r = check_tensor(name, *t, backend); !r.ok()) return r;

  const int64_t batch = a.q.sizes[0], sq = a.q.sizes[1], hq = a.q.sizes[2], d = a.q.sizes[3];
  const int64_t sk = a.k.sizes[1], hkv = a.k.sizes[2];
  if (a.k.sizes[0] != batch) return fail(Status::kInvalidArgument, cat("k.sizes[0] (batch)=", a.k.sizes[0], " but q has batch ", batch));
  if (a.v.sizes[0] != batch) return fail(Status::kInvalidArgument, cat("v.sizes[0] (batch)=", a.v.sizes[0], " but q has batch ", batch));
  if (a.k.sizes[3] != d) return fail(Status::kInvalidArgument, cat("k.sizes[3] (head_dim)=", a.k.sizes[3], " but q has head_dim ", d));
  if (a.v.sizes[3] != d)
    return fail(Status::kUnsupported, cat("v.sizes[3] (head_dim)=", a.v.sizes[3], " but q has head_dim ", d,
                                          "; head_dim_v != head_dim_qk is not supported yet"));
  if (a.v.sizes[1] != sk) return fail(Status::kInvalidArgument, cat("v.sizes[1] (seqlen_k)=", a.v.sizes[1], " but k has seqlen_k ", sk));
  if (a.v.sizes[2] != hkv) return fail(Status::kInvalidArgument, cat("v.sizes[2] (heads_kv)=", a.v.sizes[2], " but k has heads_kv ", hkv));
  for (int i = 0; i < 4; ++i)
    if (a.out.sizes[i] != a.q.sizes[i])
      return fail(Status::kInvalidArgument, cat("out.sizes[", i, "]=", a.out.sizes[i], " but q.sizes[", i, "]=", a.q.sizes[i]));
  if (hq > 0 && hkv == 0) return fail(Status::kInvalidArgument, "k.sizes[2] (heads_kv) is 0 but q has heads");
  // The kernels count rows and tiles in 32 bits. No real tensor on one GPU comes near (2^31 rows of
  // head_dim 64 in bf16 are 256 GiB); broadcast views (stride 0) could, and would wrap the counters.
  constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();
  if (static_cast<__int128>(batch) * hq * sq > kMaxRows)
    return fail(Status::kInvalidArgument, cat("q: batch x heads_q x seqlen_q = ", batch, " x ", hq, " x ", sq,
                                              " query rows, more than 2^31-1"));
  if (static_cast<__int128>(batch) * hkv * sk > kMaxRows)
    return fail(Status::kInvalidArgument, cat("k: batch x heads_kv x seqlen_k = ", batch, " x ", hkv, " x ", sk,
                                              " key rows, more than 2^31-1"));
  if (hkv > 0 && hq % hkv != 0)
    return fail(Status::kInvalidArgument, cat("heads_q=", hq, " is not a multiple of heads_kv=", hkv, " (GQA/MQA)"));
  if (Result r = check_lse(a.lse, batch, hq, sq); !r.ok()) return r;
  if (a.softmax_scale && !(std::isfinite(*a.softmax_scale) && *a.softmax_scale > 0.f))
    return fail(Status::kInvalidArgument, cat("softmax_scale must be finite and > 0, got ", *a.softmax_scale));
  if (d == 0) return fail(Status::kInvalidArgument, "q.sizes[3] (head_dim) is 0");
  int64_t window_left = -1, window_right = -1;
  if (Result r = normalise_window(a.window, a.causal, &window_left, &window_right); !r.ok()) return r;
  if (fp8 && (a.window.left >= 0 || a.window.right >= 0))
    return fail(Status::kUnsupported, "window: the FP8 forward has no sliding window yet (only causal)");
  if (Result r = check_softcap(a.softcap); !r.ok()) return r;
  if (fp8 && a.softcap != 0.f) return fail(Status::kUnsupported, "softcap: the FP8 forward has no softcapping yet");
  if (backend == Backend::kSm90 && !has_forward_kernel(a.q.dtype, static_cast<int>(d)))
    return fail(Status::kUnsupported, cat("head_dim ", d, " with dtype ", dtype_name(a.q.dtype),
                                          " has no sm90 kernel in this build (built: ", build_instantiation_list(), ")"));
  if (fp8 && !has_fp8_kernel(a.out.dtype, static_cast<int>(d)))
    return fail(Status::kUnsupported, cat("head_dim ", d, " with output dtype ", dtype_name(a.out.dtype),
                                          " has no FP8 kernel in this build (built: ", build_instantiation_list(), ")"));
  if (backend == Backend::kCudaReference && d > kMaxReferenceHeadDim)
    return fail(Status::kUnsupported, cat("head_dim ", d, " exceeds the CUDA reference's limit of ", kMaxReferenceHeadDim));
  // Last, so that a shape or support problem is what a caller hears first.
  if (Result r = out_written ? check_output_layout("out", a.out) : Result{}; !r.ok()) return r;

  p->batch = batch; p->seqlen_q = sq; p->seqlen_k = sk; p->heads_q = hq; p->heads_kv = hkv; p->head_dim = d;
  p->dtype = fp8 ? a.out.dtype : a.q.dtype;  // FP8: the output's (the kernel's instantiation key)
  p->causal = a.causal;
  p->scale = resolve_softmax_scale(a.softmax_scale, d);
  p->window_left = window_left; p->window_right = window_right;
  p->softcap = a.softcap;
  p->q = a.q.data; p->k = a.k.data; p->v = a.v.data; p->out = a.out.data;
  p->lse = static_cast<float*>(a.lse.data);
  for (int i = 0; i < 3; ++i) {
    p->q_stride[i] = a.q.strides[i];
    p->k_stride[i] = a.k.strides[i];
    p->v_stride[i] = a.v.strides[i];
    p->o_stride[i] = a.out.strides[i];
  }
  return {};
}

}  // namespace

Result validate_forward(const ForwardArgs& a, Backend backend, AttnProblem* p) {
  return validate_forward_args(a, backend, p, /*out_written=*/true);
}

Result normalise_window(const Window& w, bool causal, int64_t* left, int64_t* right) {
  if (w.left < -1) return fail(Status::kInvalidArgument, cat("window.left=", w.left, " must be >= 0, or -1 for unbounded"));
  if (w.right < -1) return fail(Status::kInvalidArgument, cat("window.right=", w.right, " must be >= 0, or -1 for unbounded"));
  if (causal && w.right > 0)
    return fail(Status::kInvalidArgument, cat("window.right=", w.right, " with causal: causal is window.right = 0 (pass -1 or 0)"));
  *left = w.left;
  *right = causal ? 0 : w.right;
  return {};
}

Result check_softcap(float softcap) {
  if (!(std::isfinite(softcap) && softcap >= 0.f))
    return fail(Status::kInvalidArgument, cat("softcap must be finite and >= 0 (0: off), got ", softcap));
  return {};
}

Result validate_backward(const BackwardArgs& a, Backend backend, AttnBackwardProblem* p) {
  if (backend != Backend::kSm90 && backend != Backend::kCpu)
    return fail(Status::kUnsupported, "backward: only the sm90 and CPU backends exist");
  // q, k, v, out, lse, causal and scale get every forward check (and the forward's dtype/head_dim
  // support). The CPU reference recomputes out and lse, so there either may be left out; a left-out
  // out is checked as q (which it must mirror) and dropped from the problem afterwards.
  ForwardArgs f;
  f.q = a.q;
  f.k = a.k;
  f.v = a.v;
  f.out = a.out;
  f.lse = a.lse;
  f.causal = a.causal;
  f.softmax_scale = a.softmax_scale;
  f.window = a.window;
  f.softcap = a.softcap;
  if (backend == Backend::kSm90 && a.out.data == nullptr && a.out.ndim == 0)
    return fail(Status::kInvalidArgument, "out: required by backward on the GPU (the forward output); out.data is null");
  const bool no_out = backend == Backend::kCpu && tensor_absent(a.out);
  if (no_out) f.out = a.q;
  AttnProblem fwd;
  if (Result r = validate_forward_args(f, backend, &fwd, /*out_written=*/!no_out); !r.ok()) return r;
  if (no_out) {
    fwd.out = nullptr;
    for (int64_t& s : fwd.o_stride) s = 0;
  }
  // The GPU path reads lse (unless the problem has no rows at all, when a null pointer is fine).
  if (backend == Backend::kSm90 && a.lse.data == nullptr && fwd.batch * fwd.heads_q * fwd.seqlen_q > 0)
    return fail(Status::kInvalidArgument,
                "lse: required by backward on the GPU (the forward pass's (batch, heads_q, seqlen_q) fp32 "
                "log-sum-exp); lse.data is null");

  const DType dtype = a.q.dtype;
  if (Result r = check_like("dout", a.dout, "q", a.q, dtype, backend); !r.ok()) return r;
  if (Result r = check_like("dq", a.dq, "q", a.q, dtype, backend); !r.ok()) return r;
  if (Result r = check_like("dk", a.dk, "k", a.k, dtype, backend); !r.ok()) return r;
  if (Result r = check_like("dv", a.dv, "v", a.v, dtype, backend); !r.ok()) return r;

  if (backend == Backend::kSm90 && !has_backward_kernel(dtype, static_cast<int>(fwd.head_dim)))
    return fail(Status::kUnsupported, cat("head_dim ", fwd.head_dim, " with dtype ", dtype_name(dtype),
                                          " has no sm90 backward kernel in this build (built: ",
                                          build_instantiation_list(), ")"));
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}})
    if (Result r = check_output_layout(name, *t); !r.ok()) return r;

  p->fwd = fwd;
  p->dout = a.dout.data;
  p->dq = a.dq.data;
  p->dk = a.dk.data;
  p->dv = a.dv.data;
  p->grad_dtype = dtype;
  p->deterministic = a.deterministic;
  for (int i = 0; i < 3; ++i) {
    p->do_stride[i] = a.dout.strides[i];
    p->dq_stride[i] = a.dq.strides[i];
    p->dk_stride[i] = a.dk.strides[i];
    p->dv_stride[i] = a.dv.strides[i];
  }
  return {};
}

}  // namespace hopattn
