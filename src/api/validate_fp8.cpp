// Validation of the FP8 entry points: forward_fp8 (e4m3 tensors + descales), attention_fp8 (16-bit
// tensors quantised inside) and quantize_fp8. The attention checks are validate_forward's, run with
// Backend::kSm90Fp8; this file adds the descale tensors and the quantiser's own arguments.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "api/messages.hpp"
#include "api/fp8_varlen.hpp"
#include "api/problem.hpp"
#include "api/tensor_layout.hpp"

namespace hopattn {
namespace {

using detail::cat;
using detail::fail;

int64_t ceil_blocks(int64_t rows) { return (rows + kFp8BlockRows - 1) / kFp8BlockRows; }

// An fp32, contiguous tensor of exactly `want` sizes (ndim = n), 4-byte aligned, or absent.
Result check_fp32_contiguous(const char* name, const TensorRef& t, int n, const int64_t* want, const char* dims) {
  if (t.dtype != DType::kFP32) return fail(Status::kInvalidArgument, cat(name, ": dtype must be fp32, got ", dtype_name(t.dtype)));
  if (t.ndim != n) return fail(Status::kInvalidArgument, cat(name, ": expected ", n, " dims ", dims, ", got ndim=", t.ndim));
  int64_t stride = 1, numel = 1;
  for (int i = n - 1; i >= 0; --i) {
    if (t.sizes[i] != want[i])
      return fail(Status::kInvalidArgument, cat(name, ".sizes[", i, "]=", t.sizes[i], " but expected ", want[i], " ", dims));
    if (t.sizes[i] > 1 && t.strides[i] != stride)
      return fail(Status::kInvalidArgument,
                  cat(name, " must be contiguous: strides[", i, "]=", t.strides[i], ", expected ", stride));
    stride *= t.sizes[i];
    numel *= t.sizes[i];
  }
  if (numel > 0 && t.data == nullptr) return fail(Status::kInvalidArgument, cat(name, ".data is null"));
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0)
    return fail(Status::kInvalidArgument, cat(name, ".data is not 4-byte aligned"));
  return {};
}

// A (batch, heads, nblocks) descale with nblocks 1 (per head) or ceil(rows / 128) (per block).
// Fills the kernel's strides: the block stride is 0 when there is one per head.
Result check_block_descale(const char* name, const TensorRef& t, int64_t batch, int64_t heads, int64_t rows,
                           const float** ptr, int64_t (&stride)[3]) {
  *ptr = nullptr;
  stride[0] = stride[1] = stride[2] = 0;
  if (tensor_absent(t)) return {};
  if (t.ndim != 3)
    return fail(Status::kInvalidArgument, cat(name, ": expected 3 dims (batch, heads, nblocks), got ndim=", t.ndim));
  const int64_t nb = t.sizes[2] == 1 ? 1 : ceil_blocks(rows);
  const int64_t want[3] = {batch, heads, nb};
  if (t.sizes[2] != 1 && t.sizes[2] != nb)
    return fail(Status::kInvalidArgument, cat(name, ".sizes[2]=", t.sizes[2], " but expected 1 (one per head) or ", nb,
                                              " (one per ", kFp8BlockRows, " rows of ", rows, ")"));
  if (Result r = check_fp32_contiguous(name, t, 3, want, "(batch, heads, nblocks)"); !r.ok()) return r;
  *ptr = static_cast<const float*>(t.data);
  stride[0] = heads * nb;
  stride[1] = nb;
  stride[2] = nb == 1 ? 0 : 1;
  return {};
}

bool is_16bit(DType t) { return t == DType::kBF16 || t == DType::kFP16; }

// The attention arguments of an FP8 call, for validate_forward's shape, stride and lse checks.
template <class Fp8Args>
ForwardArgs attention_part(const Fp8Args& a) {
  ForwardArgs f;
  f.q = a.q;
  f.k = a.k;
  f.v = a.v;
  f.out = a.out;
  f.lse = a.lse;
  f.causal = a.causal;
  f.softmax_scale = a.softmax_scale;
  return f;
}

// The packed-batch arguments of an FP8 varlen call, for validate_forward_varlen.
template <class Fp8VarlenArgs>
VarlenForwardArgs varlen_part(const Fp8VarlenArgs& a) {
  VarlenForwardArgs f;
  f.q = a.q;
  f.k = a.k;
  f.v = a.v;
  f.out = a.out;
  f.lse = a.lse;
  f.cu_seqlens_q = a.cu_seqlens_q;
  f.cu_seqlens_k = a.cu_seqlens_k;
  f.max_seqlen_q = a.max_seqlen_q;
  f.max_seqlen_k = a.max_seqlen_k;
  f.seqused_q = a.seqused_q;
  f.seqused_k = a.seqused_k;
  f.causal = a.causal;
  f.softmax_scale = a.softmax_scale;
  f.check_index_values = a.check_index_values;
  return f;
}

}  // namespace

Result validate_forward_fp8(const Fp8ForwardArgs& a, Fp8AttnProblem* p) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &a.q}, {"k", &a.k}})
    if (t->dtype != DType::kE4M3)
      return fail(Status::kInvalidArgument,
                  cat(name, ": dtype must be e4m3 for forward_fp8, got ", dtype_name(t->dtype),
                      " (attention_fp8 takes bf16/fp16 and quantises)"));
  // v: e4m3 with v_descale, or 16-bit in out's dtype (P V at the 16-bit rate, no descale).
  p->pv16 = is_16bit(a.v.dtype);
  if (a.v.dtype != DType::kE4M3 && !(p->pv16 && a.v.dtype == a.out.dtype))
    return fail(Status::kInvalidArgument,
                cat("v: dtype must be e4m3, or out's 16-bit dtype (", dtype_name(a.out.dtype),
                    ") for a 16-bit P V, got ", dtype_name(a.v.dtype)));
  if (Result r = validate_forward(attention_part(a), Backend::kSm90Fp8, &p->base); !r.ok()) return r;
  if (p->pv16 && !tensor_absent(a.v_descale))
    return fail(Status::kInvalidArgument, "v_descale: must be left out with a 16-bit v (V is not quantised)");
  const AttnProblem& b = p->base;
  if (Result r = check_block_descale("q_descale", a.q_descale, b.batch, b.heads_q, b.seqlen_q, &p->q_descale,
                                     p->q_descale_stride);
      !r.ok())
    return r;
  int64_t k_stride[3];
  if (Result r = check_block_descale("k_descale", a.k_descale, b.batch, b.heads_kv, b.seqlen_k, &p->k_descale, k_stride);
      !r.ok())
    return r;
  for (int i = 0; i < 3; ++i) p->k_descale_stride[i] = k_stride[i];
  p->v_descale = nullptr;
  p->v_descale_stride[0] = p->v_descale_stride[1] = 0;
  if (!tensor_absent(a.v_descale)) {
    const int64_t want[2] = {b.batch, b.heads_kv};
    if (Result r = check_fp32_contiguous("v_descale", a.v_descale, 2, want, "(batch, heads_kv)"); !r.ok()) return r;
    p->v_descale = static_cast<const float*>(a.v_descale.data);
    p->v_descale_stride[0] = b.heads_kv;
    p->v_descale_stride[1] = 1;
  }
  return {};
}

Result validate_attention_fp8(const Fp8AttentionArgs& a, AttnProblem* p) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}})
    if (!is_16bit(t->dtype))
      return fail(Status::kInvalidArgument,
                  cat(name, ": dtype must be bf16 or fp16 for attention_fp8, got ", dtype_name(t->dtype),
                      " (forward_fp8 takes e4m3 tensors with descales)"));
  if (Result r = validate_forward(attention_part(a), Backend::kSm90Fp8, p); !r.ok()) return r;
  // 16-bit V: P V in the inputs' type. A rotated V exists only to be quantised. After the shape
  // checks, so that a wrong shape is what a caller hears first.
  if (!a.quantize_v && a.rotate_v && a.incoherent)
    return fail(Status::kInvalidArgument,
                "rotate_v: must be false with quantize_v = false (V is not quantised, so there is nothing to spread)");
  return {};
}

Result validate_attention_fp8_varlen(const Fp8VarlenAttentionArgs& a, VarlenProblem* p) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}})
    if (!is_16bit(t->dtype))
      return fail(Status::kInvalidArgument,
                  cat(name, ": dtype must be bf16 or fp16 for attention_fp8_varlen, got ", dtype_name(t->dtype),
                      " (forward_fp8_varlen takes e4m3 tensors with descales)"));
  return validate_forward_varlen(varlen_part(a), Backend::kSm90Fp8, p);
}

Result validate_forward_fp8_varlen(const Fp8VarlenForwardArgs& a, VarlenProblem* vp, Fp8AttnProblem* p) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}})
    if (t->dtype != DType::kE4M3)
      return fail(Status::kInvalidArgument,
                  cat(name, ": dtype must be e4m3 for forward_fp8_varlen, got ", dtype_name(t->dtype),
                      " (attention_fp8_varlen takes bf16/fp16 and quantises)"));
  if (Result r = validate_forward_varlen(varlen_part(a), Backend::kSm90Fp8, vp); !r.ok()) return r;
  p->base = to_attn_problem(*vp);
  // Per-sequence blocks: the block count of the longest sequence, max_seqlen.
  if (Result r = check_block_descale("q_descale", a.q_descale, vp->batch, vp->heads_q, vp->max_seqlen_q, &p->q_descale,
                                     p->q_descale_stride);
      !r.ok())
    return r;
  int64_t k_stride[3];
  if (Result r = check_block_descale("k_descale", a.k_descale, vp->batch, vp->heads_kv, vp->max_seqlen_k, &p->k_descale,
                                     k_stride);
      !r.ok())
    return r;
  for (int i = 0; i < 3; ++i) p->k_descale_stride[i] = k_stride[i];
  p->v_descale = nullptr;
  p->v_descale_stride[0] = p->v_descale_stride[1] = 0;
  if (!tensor_absent(a.v_descale)) {
    const int64_t want[2] = {vp->batch, vp->heads_kv};
    if (Result r = check_fp32_contiguous("v_descale", a.v_descale, 2, want, "(batch, heads_kv)"); !r.ok()) return r;
    p->v_descale = static_cast<const float*>(a.v_descale.data);
    p->v_descale_stride[0] = vp->heads_kv;
    p->v_descale_stride[1] = 1;
  }
  return {};
}

Result validate_quantize_fp8(const Fp8QuantizeArgs& a) {
  const TensorRef& in = a.in;
  if (!is_16bit(in.dtype))
    return fail(Status::kInvalidArgument, cat("in: dtype must be bf16 or fp16, got ", dtype_name(in.dtype)));
  if (a.out.dtype != DType::kE4M3)
    return fail(Status::kInvalidArgument, cat("out: dtype must be e4m3, got ", dtype_name(a.out.dtype)));
  // in/out: the forward's tensor rules (4 dims, contiguous head_dim, 16-byte aligned rows).
  if (Result r = check_tensor_layout("in", in, Backend::kSm90Fp8); !r.ok()) return r;
  if (Result r = check_tensor_layout("out", a.out, Backend::kSm90Fp8); !r.ok()) return r;
  for (int i = 0; i < 4; ++i)
    if (a.out.sizes[i] != in.sizes[i])
      return fail(Status::kInvalidArgument,
                  cat("out.sizes[", i, "]=", a.out.sizes[i], " but in.sizes[", i, "]=", in.sizes[i]));
  const int64_t batch = in.sizes[0], seqlen = in.sizes[1], heads = in.sizes[2], d = in.sizes[3];
  if (d == 0 || d % 16 != 0 || d > 256)
    return fail(Status::kUnsupported, cat("in.sizes[3] (head_dim)=", d, ": quantize_fp8 takes multiples of 16 up to 256"));
  if (a.rotate && d != 64 && d != 128 && d != 256)
    return fail(Status::kUnsupported, cat("in.sizes[3] (head_dim)=", d, ": the rotation needs head_dim 64, 128 or 256"));
  // 32-bit tile counters, as in validate_forward; this also bounds the descale's size products.
  if (static_cast<__int128>(batch) * heads * seqlen > std::numeric_limits<int32_t>::max())
    return fail(Status::kInvalidArgument,
                cat("in: batch x heads x seqlen = ", batch, " x ", heads, " x ", seqlen, " rows, more than 2^31-1"));
  if (Result r = check_output_layout("out", a.out); !r.ok()) return r;
  const int64_t want[3] = {batch, heads, a.block_quant ? ceil_blocks(seqlen) : 1};
  return check_fp32_contiguous("descale", a.descale, 3, want,
                               a.block_quant ? "(batch, heads, ceil(seqlen / 128))" : "(batch, heads, 1)");
}

}  // namespace hopattn
