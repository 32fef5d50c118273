// The FP8 entry points: forward_fp8 (e4m3 tensors with descales), attention_fp8 (16-bit tensors,
// rotated and quantised inside), quantize_fp8 (the quantiser alone). Each validates once, handles
// the empty cases, lays out its workspace, then enqueues the pre-passes and the attention kernel.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "api/device.hpp"
#include "api/instantiations.hpp"
#include "api/problem.hpp"
#include "reference/reference.hpp"
#include "sm90/fp8/layout.hpp"
#include "sm90/fp8/quantize.hpp"

namespace hopattn {
namespace {

constexpr std::size_t kWorkspaceAlign = 256;
std::size_t align_up(std::size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

int64_t fp8_blocks(int64_t rows) { return (rows + kFp8BlockRows - 1) / kFp8BlockRows; }

std::size_t vt_bytes(const AttnProblem& p) {
  return std::size_t(p.batch * p.heads_kv * p.head_dim * sm90::fp8::vt_padded_seqlen(p.seqlen_k));
}

// Whether a validated problem runs the kernel at all (else only zeros / -inf are written).
bool runs_kernel(const AttnProblem& p) { return !p.empty() && p.seqlen_k > 0; }

// attention_fp8's workspace: e4m3 q, k (contiguous), V^T, the three descale arrays, and with a
// rotated V its e4m3 copy in the ordinary layout (rotate + quantise, then re-laid out).
struct AttentionFp8Workspace {
  std::size_t q8 = 0, k8 = 0, vt = 0, q_descale = 0, k_descale = 0, v_descale = 0, v8 = 0, total = 0;
  int64_t nq = 1, nk = 1;  // descale blocks per head
};

bool rotates_v(const Fp8AttentionArgs& a) { return a.incoherent && a.rotate_v; }

AttentionFp8Workspace plan_workspace(const AttnProblem& p, bool block_quant, bool rotate_v) {
  AttentionFp8Workspace w;
  if (!runs_kernel(p)) return w;
  w.nq = block_quant ? fp8_blocks(p.seqlen_q) : 1;
  w.nk = block_quant ? fp8_blocks(p.seqlen_k) : 1;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t offset = at;
    at += align_up(bytes);
    return offset;
  };
  w.q8 = take(std::size_t(p.batch * p.seqlen_q * p.heads_q * p.head_dim));
  w.k8 = take(std::size_t(p.batch * p.seqlen_k * p.heads_kv * p.head_dim));
  w.vt = take(vt_bytes(p));
  w.q_descale = take(sizeof(float) * std::size_t(p.batch * p.heads_q * w.nq));
  w.k_descale = take(sizeof(float) * std::size_t(p.batch * p.heads_kv * w.nk));
  w.v_descale = take(sizeof(float) * std::size_t(p.batch * p.heads_kv));
  if (rotate_v) w.v8 = take(std::size_t(p.batch * p.seqlen_k * p.heads_kv * p.head_dim));
  w.total = at;
  return w;
}

Result check_workspace(const void* workspace, std::size_t bytes, std::size_t needed, const char* size_fn) {
  if (needed == 0) return {};
  if (workspace == nullptr)
    return Result{Status::kInvalidArgument,
                  "workspace is null but " + std::to_string(needed) + " bytes are needed (" + size_fn + ")"};
  if (bytes < needed)
    return Result{Status::kInvalidArgument, "workspace_bytes=" + std::to_string(bytes) + " but " +
                                                std::to_string(needed) + " bytes are needed (" + size_fn + ")"};
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign != 0)
    return Result{Status::kInvalidArgument, "workspace is not 256-byte aligned"};
  return {};
}

// Rows with no key (seqlen_k == 0): out = 0, lse = -inf, as the 16-bit forward does.
Result fill_no_keys(const AttnProblem& p, cudaStream_t stream) {
  const cudaError_t e = reference::fill_no_keys(p, stream);
  return e == cudaSuccess ? Result{} : cuda_error("fill_no_keys", e);
}

Result launch_attention(const Fp8AttnProblem& prob, cudaStream_t stream) {
  const Fp8KernelEntry* kernel = find_fp8_kernel(prob.base.dtype, static_cast<int>(prob.base.head_dim));
  const cudaError_t e = kernel->launch(prob, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 FP8 forward launch", e);
}

void set_contiguous_strides(int64_t seqlen, int64_t heads, int64_t d, int64_t (&stride)[3]) {
  stride[0] = seqlen * heads * d;
  stride[1] = heads * d;
  stride[2] = d;
}

}  // namespace

std::size_t forward_fp8_workspace_size(const Fp8ForwardArgs& args) {
  Fp8AttnProblem p;
  if (!validate_forward_fp8(args, &p).ok() || !runs_kernel(p.base)) return 0;
  return vt_bytes(p.base);
}

Result forward_fp8(const Fp8ForwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  Fp8AttnProblem p;
  if (Result r = validate_forward_fp8(args, &p); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (p.base.empty()) return {};
  if (p.base.seqlen_k == 0) return fill_no_keys(p.base, stream);
  if (Result r = check_workspace(workspace, workspace_bytes, vt_bytes(p.base), "forward_fp8_workspace_size"); !r.ok())
    return r;
  sm90::fp8::VtProblem vt;
  vt.in = p.base.v;
  vt.in_dtype = DType::kE4M3;
  for (int i = 0; i < 3; ++i) vt.in_stride[i] = args.v.strides[i];
  vt.vt = workspace;
  vt.batch = p.base.batch;
  vt.seqlen = p.base.seqlen_k;
  vt.heads = p.base.heads_kv;
  vt.head_dim = p.base.head_dim;
  if (cudaError_t e = sm90::fp8::make_vt(vt, stream); e != cudaSuccess) return cuda_error("FP8 V re-layout", e);
  p.vt = workspace;
  return launch_attention(p, stream);
}

std::size_t attention_fp8_workspace_size(const Fp8AttentionArgs& args) {
  AttnProblem p;
  if (!validate_attention_fp8(args, &p).ok()) return 0;
  return plan_workspace(p, args.block_quant, rotates_v(args)).total;
}

Result attention_fp8(const Fp8AttentionArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  AttnProblem p;
  if (Result r = validate_attention_fp8(args, &p); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (p.empty()) return {};
  if (p.seqlen_k == 0) return fill_no_keys(p, stream);
  const AttentionFp8Workspace w = plan_workspace(p, args.block_quant, rotates_v(args));
  if (Result r = check_workspace(workspace, workspace_bytes, w.total, "attention_fp8_workspace_size"); !r.ok())
    return r;
  char* ws = static_cast<char*>(workspace);

  // Q and K: rotated (incoherent) and quantised into contiguous e4m3 copies.
  auto quantize = [&](const TensorRef& in, int64_t seqlen, int64_t heads, std::size_t out_at, std::size_t descale_at,
                      bool block_quant, const char* what) -> Result {
    sm90::fp8::QuantizeRowsProblem q;
    q.in = in.data;
    q.in_dtype = in.dtype;
    for (int i = 0; i < 3; ++i) q.in_stride[i] = in.strides[i];
    q.out = ws + out_at;
    set_contiguous_strides(seqlen, heads, p.head_dim, q.out_stride);
    q.descale = reinterpret_cast<float*>(ws + descale_at);
    q.batch = p.batch;
    q.seqlen = seqlen;
    q.heads = heads;
    q.head_dim = p.head_dim;
    q.rotate = args.incoherent;
    q.block_quant = block_quant;
    q.seed = args.seed;
    const cudaError_t e = sm90::fp8::quantize_rows(q, stream);
    return e == cudaSuccess ? Result{} : cuda_error(what, e);
  };
  if (Result r = quantize(args.q, p.seqlen_q, p.heads_q, w.q8, w.q_descale, args.block_quant, "FP8 quantise q"); !r.ok())
    return r;
  if (Result r = quantize(args.k, p.seqlen_k, p.heads_kv, w.k8, w.k_descale, args.block_quant, "FP8 quantise k"); !r.ok())
    return r;

  // V: quantised per (batch, kv head) into the kernel's V^T layout: directly, or when rotated via
  // an e4m3 copy in the ordinary layout (the rotation needs whole rows; the re-layout moves bytes).
  sm90::fp8::VtProblem vt;
  const bool rotate_v = rotates_v(args);
  if (rotate_v) {
    // (batch, heads_kv, 1) per-head descales are the (batch, heads_kv) array the kernel reads.
    if (Result r = quantize(args.v, p.seqlen_k, p.heads_kv, w.v8, w.v_descale, false, "FP8 rotate + quantise v"); !r.ok())
      return r;
    vt.in = ws + w.v8;
    vt.in_dtype = DType::kE4M3;
    set_contiguous_strides(p.seqlen_k, p.heads_kv, p.head_dim, vt.in_stride);
  } else {
    vt.in = args.v.data;
    vt.in_dtype = args.v.dtype;
    for (int i = 0; i < 3; ++i) vt.in_stride[i] = args.v.strides[i];
    vt.descale = reinterpret_cast<float*>(ws + w.v_descale);
  }
  vt.vt = ws + w.vt;
  vt.batch = p.batch;
  vt.seqlen = p.seqlen_k;
  vt.heads = p.heads_kv;
  vt.head_dim = p.head_dim;
  if (cudaError_t e = sm90::fp8::make_vt(vt, stream); e != cudaSuccess) return cuda_error("FP8 quantise v", e);

  Fp8AttnProblem prob;
  prob.base = p;
  prob.base.q = ws + w.q8;
  prob.base.k = ws + w.k8;
  prob.base.v = nullptr;
  set_contiguous_strides(p.seqlen_q, p.heads_q, p.head_dim, prob.base.q_stride);
  set_contiguous_strides(p.seqlen_k, p.heads_kv, p.head_dim, prob.base.k_stride);
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
  prob.unrotate_o = rotate_v;
  prob.o_rotation_seed = args.seed;
  return launch_attention(prob, stream);
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
