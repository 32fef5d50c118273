// The C++ entry points: validate once, handle the empty cases, then dispatch through the table.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/device.hpp"
#include "api/fwd_tail_split.hpp"
#include "api/index_checks.hpp"
#include "api/instantiations.hpp"
#include "api/messages.hpp"
#include "api/problem.hpp"
#include "reference/reference.hpp"
#include "sm90/bwd/workspace.hpp"

#ifndef HOPATTN_VERSION_STRING
#define HOPATTN_VERSION_STRING "0.0.0+unknown"
#endif

namespace hopattn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kInt32: return "int32";
    case DType::kE4M3: return "e4m3";
  }
  return "unknown";
}

std::size_t dtype_size(DType t) {
  if (t == DType::kE4M3) return 1;
  return t == DType::kFP32 || t == DType::kInt32 ? 4 : 2;
}

TensorRef make_tensor(void* data, DType dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = 4;
  const int64_t s[4] = {d0, d1, d2, d3};
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    t.sizes[i] = s[i];
    t.strides[i] = stride;
    // Saturates instead of overflowing for absurd sizes: validation then rejects the view by its
    // sizes or its extent, with a message, rather than the product being undefined behaviour.
    if (__builtin_mul_overflow(stride, s[i], &stride)) stride = std::numeric_limits<int64_t>::max();
  }
  return t;
}

TensorRef make_tensor(void* data, DType dtype, int64_t d0, int64_t d1, int64_t d2) {
  TensorRef t = make_tensor(data, dtype, d0, d1, d2, 1);
  t.ndim = 3;
  t.sizes[3] = 0;
  t.strides[3] = 0;
  return t;
}

const char* version() { return HOPATTN_VERSION_STRING; }
const char* build_instantiations() { return build_instantiation_list(); }

// The tail split's workspace (api/fwd_tail_split.hpp): 0 for a problem that does not split, or for
// invalid args.
std::size_t forward_workspace_size(const ForwardArgs& args) {
  AttnProblem p;
  if (!validate_forward(args, Backend::kSm90, &p).ok()) return 0;
  return heuristics::tail_split_plan(p, split_planning_sm_count()).workspace_bytes;
}

Result check_device() { return check_hopper_device(); }

namespace {

// forward after validation; `pieces` > 1 (forward's workspace form, its plan for the current device)
// splits the last round's tiles into that many pieces in `workspace`, else none.
Result run_forward(AttnProblem& p, int pieces, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (p.empty()) return {};
  if (p.seqlen_k == 0) {  // every row sees no key: out = 0, lse = -inf
    cudaError_t e = reference::fill_no_keys(p, stream);
    return e == cudaSuccess ? Result{} : cuda_error("fill_no_keys", e);
  }
  if (pieces > 1) {
    p.tail_split_pieces = pieces;
    p.tail_split_workspace = workspace;
    p.tail_split_workspace_bytes = workspace_bytes;
  }
  const FwdKernelEntry* kernel = find_forward_kernel(p.dtype, static_cast<int>(p.head_dim));
  cudaError_t e = kernel->launch(p, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 forward launch", e);
}

}  // namespace

Result forward(const ForwardArgs& args, cudaStream_t stream) {
  AttnProblem p;
  if (Result r = validate_forward(args, Backend::kSm90, &p); !r.ok()) return r;
  return run_forward(p, 1, nullptr, 0, stream);
}

Result forward(const ForwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  AttnProblem p;
  if (Result r = validate_forward(args, Backend::kSm90, &p); !r.ok()) return r;
  // Checked before the device, like the arguments, so that a CPU-only test sees the same message
  // (the size then follows a 132-SM device).
  const heuristics::TailSplitPlan plan = heuristics::tail_split_plan(p, split_planning_sm_count());
  if (Result r = detail::check_workspace(workspace, workspace_bytes, plan.workspace_bytes, "forward_workspace_size");
      !r.ok())
    return r;
  return run_forward(p, plan.pieces, workspace, workspace_bytes, stream);
}

Result forward_reference_cuda(const ForwardArgs& args, cudaStream_t stream) {
  AttnProblem p;
  if (Result r = validate_forward(args, Backend::kCudaReference, &p); !r.ok()) return r;
  if (Result r = check_cuda_device(); !r.ok()) return r;
  if (p.empty()) return {};
  cudaError_t e = reference::forward_cuda(p, stream);
  return e == cudaSuccess ? Result{} : cuda_error("CUDA reference launch", e);
}

Result forward_cpu(const ForwardArgs& args) {
  AttnProblem p;
  if (Result r = validate_forward(args, Backend::kCpu, &p); !r.ok()) return r;
  if (p.empty()) return {};
  reference::forward_cpu(p);
  return {};
}

// ---- backward ----------------------------------------------------------------------------------

namespace {

Result zero_fill_device(const char* name, const TensorRef& t, cudaStream_t stream) {
  // zero_fill takes 4 dims: a tensor of fewer (varlen's packed 3) gets leading dims of size 1.
  int64_t sizes[4] = {1, 1, 1, 1}, strides[4] = {0, 0, 0, 0};
  const int lead = 4 - t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    sizes[lead + i] = t.sizes[i];
    strides[lead + i] = t.strides[i];
  }
  const cudaError_t e = reference::zero_fill(t.data, t.dtype, sizes, strides, stream);
  return e == cudaSuccess ? Result{} : cuda_error((std::string("zero_fill ") + name).c_str(), e);
}

// Bytes of workspace the kernel path of a validated problem needs: 0 when no kernel runs (no query
// rows, or no keys: those cases only write zeros).
std::size_t kernel_workspace_bytes(const AttnProblem& p) {
  return p.empty() || p.seqlen_k == 0 ? 0 : sm90::bwd::workspace_bytes(p);
}

}  // namespace

std::size_t backward_workspace_size(const BackwardArgs& args) {
  AttnBackwardProblem p;
  if (!validate_backward(args, Backend::kSm90, &p).ok()) return 0;
  return kernel_workspace_bytes(p.fwd);
}

Result backward(const BackwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  AttnBackwardProblem p;
  if (Result r = validate_backward(args, Backend::kSm90, &p); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  const AttnProblem& f = p.fwd;
  if (f.batch == 0) return {};
  // No query rows: nothing flows into K or V (with heads_q == 0, heads_kv may still be > 0).
  if (f.heads_q == 0 || f.seqlen_q == 0) {
    if (Result r = zero_fill_device("dk", args.dk, stream); !r.ok()) return r;
    return zero_fill_device("dv", args.dv, stream);
  }
  if (f.seqlen_k == 0) return zero_fill_device("dq", args.dq, stream);  // no key: out = 0 for every row

  const std::size_t needed = kernel_workspace_bytes(f);
  if (Result r = detail::check_workspace(workspace, workspace_bytes, needed, "backward_workspace_size"); !r.ok())
    return r;
  const BwdKernelEntry* kernel = find_backward_kernel(f.dtype, static_cast<int>(f.head_dim));
  const cudaError_t e = kernel->launch(p, workspace, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 backward launch", e);
}

Result backward_cpu(const BackwardArgs& args) {
  AttnBackwardProblem p;
  if (Result r = validate_backward(args, Backend::kCpu, &p); !r.ok()) return r;
  // The reference writes every element of dq, dk and dv, including the empty cases: seqlen_q == 0
  // or heads_q == 0 gives dk = dv = 0, seqlen_k == 0 gives dq = 0.
  reference::backward_cpu(p);
  return {};
}

// ---- varlen ------------------------------------------------------------------------------------

namespace {

// HOPATTN_DEBUG_CHECKS=1 turns on every call's check_index_values; read once per process.
bool debug_checks_env() {
  static const bool on = [] {
    const char* v = std::getenv("HOPATTN_DEBUG_CHECKS");
    return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

}  // namespace

namespace detail {

bool check_index_values_requested(bool flag) { return flag || debug_checks_env(); }

// check_index_values: copy the index arrays to the host (in stream order, then wait) and check them.
Result check_index_values_on_device(const VarlenProblem& p, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(p.batch);
  std::vector<int32_t> cu_q(n + 1), cu_k(n + 1), used_q(p.seqused_q ? n : 0), used_k(p.seqused_k ? n : 0);
  const struct { int32_t* dst; const int32_t* src; std::size_t count; const char* name; } copies[] = {
      {cu_q.data(), p.cu_seqlens_q, n + 1, "cu_seqlens_q"},
      {cu_k.data(), p.cu_seqlens_k, n + 1, "cu_seqlens_k"},
      {used_q.data(), p.seqused_q, used_q.size(), "seqused_q"},
      {used_k.data(), p.seqused_k, used_k.size(), "seqused_k"}};
  for (const auto& c : copies) {
    if (c.count == 0) continue;
    const cudaError_t e = cudaMemcpyAsync(c.dst, c.src, c.count * sizeof(int32_t), cudaMemcpyDefault, stream);
    if (e != cudaSuccess) return cuda_error((std::string("check_index_values: copying ") + c.name).c_str(), e);
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return cuda_error("check_index_values: cudaStreamSynchronize", e);
  return check_varlen_index_values(p, cu_q.data(), cu_k.data(), p.seqused_q ? used_q.data() : nullptr,
                                   p.seqused_k ? used_k.data() : nullptr);
}

}  // namespace detail

namespace {

// Bytes of a varlen forward's workspace: one 256-byte slot for the tile counter of the kernels that
// deal their tiles dynamically (sm90/ws/tile_scheduler.hpp). The same for every valid call, so that
// a caller can allocate it before knowing which kernel runs.
constexpr std::size_t kVarlenTileCounterBytes = detail::kWorkspaceAlign;

// forward_varlen after validation; tile_counter (zeroed by the launcher on `stream`) or null.
Result run_forward_varlen(const VarlenForwardArgs& args, const VarlenProblem& vp, int* tile_counter,
                          cudaStream_t stream) {
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (vp.batch > 0 && detail::check_index_values_requested(args.check_index_values))
    if (Result r = detail::check_index_values_on_device(vp, stream); !r.ok()) return r;
  // No rows to write (a sequence longer than max_seqlen_q is the caller's error, see the header).
  if (vp.empty() || vp.total_q == 0 || vp.max_seqlen_q == 0) return {};
  AttnProblem p = to_attn_problem(vp);
  p.tile_counter = tile_counter;
  const FwdKernelEntry* kernel = find_forward_kernel(p.dtype, static_cast<int>(p.head_dim));
  const cudaError_t e = kernel->launch(p, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 varlen forward launch", e);
}

}  // namespace

Result forward_varlen(const VarlenForwardArgs& args, cudaStream_t stream) {
  VarlenProblem vp;
  if (Result r = validate_forward_varlen(args, Backend::kSm90, &vp); !r.ok()) return r;
  return run_forward_varlen(args, vp, nullptr, stream);
}

std::size_t forward_varlen_workspace_size(const VarlenForwardArgs& args) {
  VarlenProblem vp;
  return validate_forward_varlen(args, Backend::kSm90, &vp).ok() ? kVarlenTileCounterBytes : 0;
}

Result forward_varlen(const VarlenForwardArgs& args, void* workspace, std::size_t workspace_bytes,
                      cudaStream_t stream) {
  VarlenProblem vp;
  if (Result r = validate_forward_varlen(args, Backend::kSm90, &vp); !r.ok()) return r;
  // Checked before the device, like the arguments, so that a CPU-only test sees the same message.
  if (Result r = detail::check_workspace(workspace, workspace_bytes, kVarlenTileCounterBytes,
                                         "forward_varlen_workspace_size");
      !r.ok())
    return r;
  return run_forward_varlen(args, vp, static_cast<int*>(workspace), stream);
}

std::size_t backward_varlen_workspace_size(const VarlenBackwardArgs& args) {
  VarlenProblem vp;
  AttnBackwardProblem p;
  if (!validate_backward_varlen(args, &vp, &p).ok()) return 0;
  return kernel_workspace_bytes(p.fwd);
}

Result backward_varlen(const VarlenBackwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  VarlenProblem vp;
  AttnBackwardProblem p;
  if (Result r = validate_backward_varlen(args, &vp, &p); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (vp.batch > 0 && detail::check_index_values_requested(args.check_index_values))
    if (Result r = detail::check_index_values_on_device(vp, stream); !r.ok()) return r;
  if (vp.batch == 0) return {};
  // Degenerate calls with no query row or no key row at all: the gradients are zeros (the whole
  // tensors, see the header); the kernels need at least one of each.
  if (vp.heads_q == 0 || vp.total_q == 0 || vp.max_seqlen_q == 0) {
    if (Result r = zero_fill_device("dk", args.dk, stream); !r.ok()) return r;
    return zero_fill_device("dv", args.dv, stream);
  }
  if (vp.total_k == 0 || vp.max_seqlen_k == 0) return zero_fill_device("dq", args.dq, stream);
  const std::size_t needed = kernel_workspace_bytes(p.fwd);
  if (Result r = detail::check_workspace(workspace, workspace_bytes, needed, "backward_varlen_workspace_size"); !r.ok())
    return r;
  const BwdKernelEntry* kernel = find_backward_kernel(p.fwd.dtype, static_cast<int>(p.fwd.head_dim));
  const cudaError_t e = kernel->launch(p, workspace, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 varlen backward launch", e);
}

Result forward_varlen_cpu(const VarlenForwardArgs& args) {
  VarlenProblem p;
  if (Result r = validate_forward_varlen(args, Backend::kCpu, &p); !r.ok()) return r;
  if (p.empty()) return {};
  reference::forward_varlen_cpu(p);
  return {};
}

}  // namespace hopattn
