// The FP8 entry points: forward_fp8 (e4m3 tensors with descales), attention_fp8 (16-bit tensors,
// rotated and quantised inside), their packed-batch forms forward_fp8_varlen and
// attention_fp8_varlen, and quantize_fp8 (the quantiser alone). Each validates once, handles
// the empty cases, lays out its workspace, then enqueues the pre-passes and the attention kernel.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "api/device.hpp"
#include "api/fp8_varlen.hpp"
#include "api/heuristics.hpp"
#include "api/index_checks.hpp"
#include "api/instantiations.hpp"
#include "api/messages.hpp"
#include "api/problem.hpp"
#include "reference/reference.hpp"
#include "sm90/fp8/layout.hpp"
#include "sm90/fp8/quantize.hpp"
#include "sm90/fp8/tile_counter.hpp"

namespace hopattn {
namespace {

using detail::check_workspace;
using detail::kWorkspaceAlign;
std::size_t align_up(std::size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

int64_t fp8_blocks(int64_t rows, int64_t block_rows = kFp8BlockRows) { return (rows + block_rows - 1) / block_rows; }

// Rows of q and k over the whole batch: batch * seqlen, or the packed totals (varlen problems, whose
// seqlen_q/seqlen_k are the max_seqlen bounds; to_attn_problem).
int64_t q_rows(const AttnProblem& p) { return p.varlen() ? p.total_q : p.batch * p.seqlen_q; }
int64_t k_rows(const AttnProblem& p) { return p.varlen() ? p.total_k : p.batch * p.seqlen_k; }

// V^T: (batch, heads_kv, head_dim, keys padded to whole 128-key tiles), or the packed layout.
std::size_t vt_bytes(const AttnProblem& p) {
  if (p.varlen()) return sm90::fp8::vt_varlen_bytes(p.heads_kv, p.head_dim, p.total_k, p.batch);
  return std::size_t(p.batch * p.heads_kv * p.head_dim * sm90::fp8::vt_padded_seqlen(p.seqlen_k));
}

// Packed batches: the kernel's tile counter (sm90/fp8/tile_counter.hpp), one aligned slot right
// after V^T, zeroed on the stream by the V^T pass (or a memset when there is no key to lay out).
std::size_t counter_bytes(const AttnProblem& p) { return p.varlen() ? sm90::fp8::kTileCounterAlign : 0; }
int* tile_counter(const AttnProblem& p, const void* vt) {
  return p.varlen() ? sm90::fp8::varlen_tile_counter(vt, p.heads_kv, p.head_dim, p.total_k, p.batch) : nullptr;
}
// forward_fp8 / forward_fp8_varlen: V^T, then (packed) the counter.
std::size_t forward_workspace_bytes(const AttnProblem& p) {
  return p.varlen() ? sm90::fp8::tile_counter_offset(vt_bytes(p)) + counter_bytes(p) : vt_bytes(p);
}

// Whether a validated problem runs the kernel at all (else only zeros / -inf are written, or, for
// packed batches without query rows, nothing).
bool runs_kernel(const AttnProblem& p) {
  if (p.varlen()) return !p.empty() && p.total_q > 0;
  return !p.empty() && p.seqlen_k > 0;
}

// The options of the one-call path (Fp8AttentionArgs / Fp8VarlenAttentionArgs).
// quantize_v false (fixed-length only): V stays 16-bit and the kernel's P V runs in that type.
struct QuantOptions {
  bool incoherent = true, block_quant = true, rotate_v = false;
  uint32_t seed = 0;
  bool quantize_v = true;
};
QuantOptions quant_options(const Fp8AttentionArgs& a) {
  return QuantOptions{a.incoherent, a.block_quant, a.incoherent && a.rotate_v, a.seed, a.quantize_v};
}
QuantOptions quant_options(const Fp8VarlenAttentionArgs& a) {
  return QuantOptions{a.incoherent, a.block_quant, a.incoherent && a.rotate_v, a.seed, true};
}

// The one-call path's workspace: e4m3 q, k (contiguous), V^T, the three descale arrays, and with a
// rotated V its e4m3 copy in the ordinary layout (rotate + quantise, then re-laid out).
struct AttentionFp8Workspace {
  std::size_t q8 = 0, k8 = 0, vt = 0, q_descale = 0, k_descale = 0, v_descale = 0, v8 = 0, counter = 0, total = 0;
  int64_t nq = 1, nk = 1;  // descale blocks per (batch entry or sequence, head)
  int key_tile = 0;        // Fp8AttnProblem::key_tile; with block_quant K's descale blocks are its rows
};

AttentionFp8Workspace plan_workspace(const AttnProblem& p, const QuantOptions& o) {
  AttentionFp8Workspace w;
  if (!runs_kernel(p)) return w;
  // The 16-bit P V kernels have one key tile per head dim (Fp8FwdConfig's kPv16).
  w.key_tile = o.quantize_v ? heuristics::fp8_key_tile(p.head_dim, p.seqlen_k, p.varlen()) : 0;
  static_assert(sm90::fp8::kWideKeyBlock == 224, "heuristics::fp8_key_tile names the wide tile as 224");
  w.nq = o.block_quant ? fp8_blocks(p.seqlen_q) : 1;
  w.nk = o.block_quant ? fp8_blocks(p.seqlen_k, w.key_tile != 0 ? w.key_tile : kFp8BlockRows) : 1;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t offset = at;
    at += align_up(bytes);
    return offset;
  };
  w.q8 = take(std::size_t(q_rows(p) * p.heads_q * p.head_dim));
  w.k8 = take(std::size_t(k_rows(p) * p.heads_kv * p.head_dim));
  w.vt = take(o.quantize_v ? vt_bytes(p) : 0);
  w.counter = take(counter_bytes(p));  // where tile_counter(p, vt) finds it
  w.q_descale = take(sizeof(float) * std::size_t(p.batch * p.heads_q * w.nq));
  w.k_descale = take(sizeof(float) * std::size_t(p.batch * p.heads_kv * w.nk));
  w.v_descale = take(o.quantize_v ? sizeof(float) * std::size_t(p.batch * p.heads_kv) : 0);
  if (o.rotate_v) w.v8 = take(std::size_t(k_rows(p) * p.heads_kv * p.head_dim));
  w.total = at;
  return w;
}


// Rows with no key (seqlen_k == 0): out = 0, lse = -inf, as the 16-bit forward does.
Result fill_no_keys(const AttnProblem& p, cudaStream_t stream) {
  const cudaError_t e = reference::fill_no_keys(p, stream);
  return e == cudaSuccess ? Result{} : cuda_error("fill_no_keys", e);
}

Result launch_attention(const Fp8AttnProblem& prob, cudaStream_t stream) {
  // No pass ran that would have zeroed the counter (a packed batch without a key row).
  if (prob.base.varlen() && k_rows(prob.base) == 0) {
    if (cudaError_t e = cudaMemsetAsync(tile_counter(prob.base, prob.vt), 0, sizeof(int), stream); e != cudaSuccess)
      return cuda_error("FP8 tile counter", e);
  }
  const Fp8KernelEntry* kernel = find_fp8_kernel(prob.base.dtype, static_cast<int>(prob.base.head_dim));
  const cudaError_t e = kernel->launch(prob, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 FP8 forward launch", e);
}

// Strides of a contiguous (batch, seqlen, heads, d) tensor, or of a packed (rows, heads, d) one
// (batch stride 0: the pre-passes and the kernel find sequences by cu_seqlens).
void set_contiguous_strides(const AttnProblem& p, int64_t seqlen, int64_t heads, int64_t (&stride)[3]) {
  stride[0] = p.varlen() ? 0 : seqlen * heads * p.head_dim;
  stride[1] = heads * p.head_dim;
  stride[2] = p.head_dim;
}

// The V^T re-layout's geometry for a problem, fixed-length or packed.
sm90::fp8::VtProblem vt_problem(const AttnProblem& p, void* vt) {
  sm90::fp8::VtProblem v;
  v.vt = vt;
  v.batch = p.batch;
  v.seqlen = p.seqlen_k;
  v.heads = p.heads_kv;
  v.head_dim = p.head_dim;
  v.cu_seqlens = p.cu_seqlens_k;
  v.total_rows = p.total_k;
  v.zero_word = tile_counter(p, vt);
  return v;
}

// forward_fp8 / forward_fp8_varlen after validation: V^T into the workspace, then the kernel.
Result run_forward_fp8(Fp8AttnProblem p, const void* v, const int64_t (&v_stride)[3], void* workspace,
                       std::size_t workspace_bytes, const char* size_fn, cudaStream_t stream) {
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (!runs_kernel(p.base)) return p.base.varlen() || p.base.empty() ? Result{} : fill_no_keys(p.base, stream);
  if (Result r = check_workspace(workspace, workspace_bytes, forward_workspace_bytes(p.base), size_fn); !r.ok())
    return r;
  p.vt = workspace;
  if (k_rows(p.base) == 0) return launch_attention(p, stream);  // packed, no key row: nothing to lay out
  sm90::fp8::VtProblem vt = vt_problem(p.base, workspace);
  vt.in = v;
  vt.in_dtype = DType::kE4M3;
  for (int i = 0; i < 3; ++i) vt.in_stride[i] = v_stride[i];
  if (cudaError_t e = sm90::fp8::make_vt(vt, stream); e != cudaSuccess) return cuda_error("FP8 V re-layout", e);
  return launch_attention(p, stream);
}

// The kernel's problem on the pre-passes' output: e4m3 copies, V^T and descales in the workspace.
Fp8AttnProblem quantised_problem(const AttnProblem& p, const QuantOptions& o, const AttentionFp8Workspace& w, char* ws) {
  Fp8AttnProblem prob;
  prob.base = p;
  prob.base.q = ws + w.q8;
  prob.base.k = ws + w.k8;
  prob.base.v = nullptr;
  set_contiguous_strides(p, p.seqlen_q, p.heads_q, prob.base.q_stride);
  set_contiguous_strides(p, p.seqlen_k, p.heads_kv, prob.base.k_stride);
  prob.vt = ws + w.vt;
  prob.q_descale = reinterpret_cast<const float*>(ws + w.q_descale);
  prob.k_descale = reinterpret_cast<const float*>(ws + w.k_descale);
  prob.v_descale = reinterpret_cast<const float*>(ws + w.v_descale);
  const int64_t q_descale_stride[3] = {p.heads_q * w.nq, w.nq, w.nq == 1 ? 0 : 1};
  const int64_t k_descale_stride[3] = {p.heads_kv * w.nk, w.nk, w.nk == 1 ? 0 : 1};
  for (int i = 0; i < 3; ++i) {
    prob.q_descale_stride[i] = q_descale_stride[i];
    prob.k_descale_stride[i] = k_descale_stride[i];
  }
  prob.v_descale_stride[0] = p.heads_kv;
  prob.v_descale_stride[1] = 1;
  prob.key_tile = w.key_tile;
  prob.unrotate_o = o.rotate_v;
  prob.o_rotation_seed = o.seed;
  if (!o.quantize_v) {  // the caller's 16-bit V, read by the kernel as it is
    prob.pv16 = true;
    prob.base.v = p.v;
    for (int i = 0; i < 3; ++i) prob.base.v_stride[i] = p.v_stride[i];
    prob.vt = nullptr;
    prob.v_descale = nullptr;
    prob.v_descale_stride[0] = prob.v_descale_stride[1] = 0;
  }
  return prob;
}

// attention_fp8 / attention_fp8_varlen after validation: p.q/k/v are the 16-bit inputs with their
// strides; they are rotated and quantised into the workspace, then the kernel runs on the copies.
Result run_attention_fp8(const AttnProblem& p, const QuantOptions& o, void* workspace, std::size_t workspace_bytes,
                         const char* size_fn, cudaStream_t stream) {
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (!runs_kernel(p)) return p.varlen() || p.empty() ? Result{} : fill_no_keys(p, stream);
  const AttentionFp8Workspace w = plan_workspace(p, o);
  if (Result r = check_workspace(workspace, workspace_bytes, w.total, size_fn); !r.ok()) return r;
  char* ws = static_cast<char*>(workspace);

  // Q and K: rotated (incoherent) and quantised into contiguous e4m3 copies.
  auto quantize = [&](const void* in, const int64_t (&in_stride)[3], int64_t seqlen, int64_t heads,
                      const int32_t* cu_seqlens, int64_t total_rows, std::size_t out_at, std::size_t descale_at,
                      bool block_quant, int block_rows, const char* what) -> Result {
    sm90::fp8::QuantizeRowsProblem q;
    q.in = in;
    q.in_dtype = p.dtype;
    for (int i = 0; i < 3; ++i) q.in_stride[i] = in_stride[i];
    q.out = ws + out_at;
    set_contiguous_strides(p, seqlen, heads, q.out_stride);
    q.descale = reinterpret_cast<float*>(ws + descale_at);
    q.batch = p.batch;
    q.seqlen = seqlen;
    q.heads = heads;
    q.head_dim = p.head_dim;
    q.rotate = o.incoherent;
    q.block_quant = block_quant;
    q.seed = o.seed;
    q.cu_seqlens = cu_seqlens;
    q.total_rows = total_rows;
    q.block_rows = block_rows;
    const cudaError_t e = sm90::fp8::quantize_rows(q, stream);
    return e == cudaSuccess ? Result{} : cuda_error(what, e);
  };
  if (Result r = quantize(p.q, p.q_stride, p.seqlen_q, p.heads_q, p.cu_seqlens_q, p.total_q, w.q8, w.q_descale,
                          o.block_quant, 0, "FP8 quantise q");
      !r.ok())
    return r;
  // A packed batch without a single key row (k may then be null): no K or V pre-pass; the kernel
  // loads no key and writes zeros and -inf.
  const bool has_keys = k_rows(p) > 0;
  if (!has_keys) return launch_attention(quantised_problem(p, o, w, ws), stream);
  // K's descale blocks are the kernel's key tiles when they are the wide ones.
  if (Result r = quantize(p.k, p.k_stride, p.seqlen_k, p.heads_kv, p.cu_seqlens_k, p.total_k, w.k8, w.k_descale,
                          o.block_quant, w.key_tile, "FP8 quantise k");
      !r.ok())
    return r;

  if (!o.quantize_v) return launch_attention(quantised_problem(p, o, w, ws), stream);  // V as it is

  // V: quantised per (batch entry, kv head) into the kernel's V^T layout: directly, or when rotated
  // via an e4m3 copy in the ordinary layout (the rotation needs whole rows; the re-layout moves bytes).
  sm90::fp8::VtProblem vt = vt_problem(p, ws + w.vt);
  if (o.rotate_v) {
    // (batch, heads_kv, 1) per-head descales are the (batch, heads_kv) array the kernel reads.
    if (Result r = quantize(p.v, p.v_stride, p.seqlen_k, p.heads_kv, p.cu_seqlens_k, p.total_k, w.v8, w.v_descale,
                            false, 0, "FP8 rotate + quantise v");
        !r.ok())
      return r;
    vt.in = ws + w.v8;
    vt.in_dtype = DType::kE4M3;
    set_contiguous_strides(p, p.seqlen_k, p.heads_kv, vt.in_stride);
  } else {
    vt.in = p.v;
    vt.in_dtype = p.dtype;
    for (int i = 0; i < 3; ++i) vt.in_stride[i] = p.v_stride[i];
    vt.descale = reinterpret_cast<float*>(ws + w.v_descale);
  }
  if (cudaError_t e = sm90::fp8::make_vt(vt, stream); e != cudaSuccess) return cuda_error("FP8 quantise v", e);

  return launch_attention(quantised_problem(p, o, w, ws), stream);
}

// A packed problem's index values, checked on the host when asked (check_index_values).
Result check_varlen_indices(const VarlenProblem& vp, bool requested, cudaStream_t stream) {
  if (vp.batch == 0 || !detail::check_index_values_requested(requested)) return {};
  if (Result r = check_hopper_device(); !r.ok()) return r;
  return detail::check_index_values_on_device(vp, stream);
}

}  // namespace

std::size_t forward_fp8_workspace_size(const Fp8ForwardArgs& args) {
  Fp8AttnProblem p;
  if (!validate_forward_fp8(args, &p).ok() || !runs_kernel(p.base) || p.pv16) return 0;
  return vt_bytes(p.base);
}

Result forward_fp8(const Fp8ForwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  Fp8AttnProblem p;
  if (Result r = validate_forward_fp8(args, &p); !r.ok()) return r;
  if (p.pv16) {  // a 16-bit V: the kernel reads it in place, so there is no V^T and no workspace
    if (Result r = check_hopper_device(); !r.ok()) return r;
    if (!runs_kernel(p.base)) return p.base.empty() ? Result{} : fill_no_keys(p.base, stream);
    return launch_attention(p, stream);
  }
  // One K descale per head, or none: every key tile reads the same one, so the wide key tile needs
  // no 224-row descale blocks here (K given per 128-row block keeps the 128-key tile).
  if (p.k_descale_stride[2] == 0) p.key_tile = heuristics::fp8_key_tile(p.base.head_dim, p.base.seqlen_k, false);
  const int64_t v_stride[3] = {args.v.strides[0], args.v.strides[1], args.v.strides[2]};
  return run_forward_fp8(p, args.v.data, v_stride, workspace, workspace_bytes, "forward_fp8_workspace_size", stream);
}

std::size_t attention_fp8_workspace_size(const Fp8AttentionArgs& args) {
  AttnProblem p;
  if (!validate_attention_fp8(args, &p).ok()) return 0;
  return plan_workspace(p, quant_options(args)).total;
}

Result attention_fp8(const Fp8AttentionArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  AttnProblem p;
  if (Result r = validate_attention_fp8(args, &p); !r.ok()) return r;
  return run_attention_fp8(p, quant_options(args), workspace, workspace_bytes, "attention_fp8_workspace_size", stream);
}

std::size_t forward_fp8_varlen_workspace_size(const Fp8VarlenForwardArgs& args) {
  VarlenProblem vp;
  Fp8AttnProblem p;
  if (!validate_forward_fp8_varlen(args, &vp, &p).ok() || !runs_kernel(p.base)) return 0;
  return forward_workspace_bytes(p.base);
}

Result forward_fp8_varlen(const Fp8VarlenForwardArgs& args, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream) {
  VarlenProblem vp;
  Fp8AttnProblem p;
  if (Result r = validate_forward_fp8_varlen(args, &vp, &p); !r.ok()) return r;
  if (Result r = check_varlen_indices(vp, args.check_index_values, stream); !r.ok()) return r;
  const int64_t v_stride[3] = {0, args.v.strides[0], args.v.strides[1]};  // (token, head) -> (0, token, head)
  return run_forward_fp8(p, args.v.data, v_stride, workspace, workspace_bytes, "forward_fp8_varlen_workspace_size",
                         stream);
}

std::size_t attention_fp8_varlen_workspace_size(const Fp8VarlenAttentionArgs& args) {
  VarlenProblem vp;
  if (!validate_attention_fp8_varlen(args, &vp).ok()) return 0;
  return plan_workspace(to_attn_problem(vp), quant_options(args)).total;
}

Result attention_fp8_varlen(const Fp8VarlenAttentionArgs& args, void* workspace, std::size_t workspace_bytes,
                            cudaStream_t stream) {
  VarlenProblem vp;
  if (Result r = validate_attention_fp8_varlen(args, &vp); !r.ok()) return r;
  if (Result r = check_varlen_indices(vp, args.check_index_values, stream); !r.ok()) return r;
  return run_attention_fp8(to_attn_problem(vp), quant_options(args), workspace, workspace_bytes,
                           "attention_fp8_varlen_workspace_size", stream);
}

Result quantize_fp8(const Fp8QuantizeArgs& args, cudaStream_t stream) {
  if (Result r = validate_quantize_fp8(args); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  sm90::fp8::QuantizeRowsProblem q;
  q.in = args.in.data;
  q.in_dtype = args.in.dtype;
  q.out = args.out.data;
  for (int i = 0; i < 3; ++i) {
    q.in_stride[i] = args.in.strides[i];
    q.out_stride[i] = args.out.strides[i];
  }
  q.descale = static_cast<float*>(args.descale.data);
  q.batch = args.in.sizes[0];
  q.seqlen = args.in.sizes[1];
  q.heads = args.in.sizes[2];
  q.head_dim = args.in.sizes[3];
  q.rotate = args.rotate;
  q.block_quant = args.block_quant;
  q.seed = args.seed;
  const cudaError_t e = sm90::fp8::quantize_rows(q, stream);
  return e == cudaSuccess ? Result{} : cuda_error("quantize_fp8", e);
}

}  // namespace hopattn
