// The C ABI over the C++ API: converts plain structs, keeps the last error message per thread.
#include "hopattn/hopattn_c.h"

#include <cmath>
#include <string>

#include "hopattn/hopattn.hpp"

namespace {

thread_local std::string g_last_error;

int finish(const hopattn::Result& r) {
  g_last_error = r.message;
  return static_cast<int>(r.status);
}

bool to_tensor(const hopattn_tensor& c, const char* name, hopattn::TensorRef* t) {
  if (c.dtype < HOPATTN_BF16 || c.dtype > HOPATTN_E4M3) {
    g_last_error = std::string(name) + ": unknown dtype code " + std::to_string(c.dtype);
    return false;
  }
  if (c.ndim < 0 || c.ndim > 4) {
    g_last_error = std::string(name) + ": ndim " + std::to_string(c.ndim) + " out of range";
    return false;
  }
  t->data = c.data;
  t->dtype = static_cast<hopattn::DType>(c.dtype);
  t->ndim = c.ndim;
  for (int i = 0; i < 4; ++i) {
    t->sizes[i] = c.sizes[i];
    t->strides[i] = c.strides[i];
  }
  return true;
}

// Returns -1 after setting g_last_error when the C struct itself is malformed.
// The options the four attention structs share (ABI 6): causal, the optional softmax scale, the
// window (read only when has_window, so a zero-initialised struct has none) and softcap.
template <class CArgs, class Args>
void copy_attention_options(const CArgs& a, Args* out) {
  out->causal = a.causal != 0;
  if (a.has_softmax_scale) out->softmax_scale = a.softmax_scale;
  if (a.has_window) out->window = {a.window_left, a.window_right};
  out->softcap = a.softcap;
}

int to_args(const hopattn_fwd_args* a, hopattn::ForwardArgs* out) {
  if (a == nullptr) {
    g_last_error = "args is null";
    return HOPATTN_INVALID_ARGUMENT;
  }
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k, "k", &out->k) || !to_tensor(a->v, "v", &out->v) ||
      !to_tensor(a->out, "out", &out->out))
    return HOPATTN_INVALID_ARGUMENT;
  if (a->lse.data != nullptr && !to_tensor(a->lse, "lse", &out->lse)) return HOPATTN_INVALID_ARGUMENT;
  copy_attention_options(*a, out);
  return HOPATTN_SUCCESS;
}

int to_args(const hopattn_bwd_args* a, hopattn::BackwardArgs* out) {
  if (a == nullptr) {
    g_last_error = "args is null";
    return HOPATTN_INVALID_ARGUMENT;
  }
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k, "k", &out->k) || !to_tensor(a->v, "v", &out->v) ||
      !to_tensor(a->dout, "dout", &out->dout) || !to_tensor(a->dq, "dq", &out->dq) ||
      !to_tensor(a->dk, "dk", &out->dk) || !to_tensor(a->dv, "dv", &out->dv))
    return HOPATTN_INVALID_ARGUMENT;
  // out may be left out (data NULL, ndim 0) for the CPU call; lse, as in forward, whenever data is NULL.
  if (!(a->out.data == nullptr && a->out.ndim == 0) && !to_tensor(a->out, "out", &out->out))
    return HOPATTN_INVALID_ARGUMENT;
  if (a->lse.data != nullptr && !to_tensor(a->lse, "lse", &out->lse)) return HOPATTN_INVALID_ARGUMENT;
  copy_attention_options(*a, out);
  out->deterministic = a->deterministic != 0;
  return HOPATTN_SUCCESS;
}

// An optional tensor: left out when data is NULL and ndim is 0 (else converted and validated later).
bool to_optional_tensor(const hopattn_tensor& c, const char* name, hopattn::TensorRef* t) {
  if (c.data == nullptr && c.ndim == 0) return true;
  return to_tensor(c, name, t);
}

bool null_args(const void* a) {
  if (a != nullptr) return false;
  g_last_error = "args is null";
  return true;
}

int to_args(const hopattn_varlen_fwd_args* a, hopattn::VarlenForwardArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k, "k", &out->k) || !to_tensor(a->v, "v", &out->v) ||
      !to_tensor(a->out, "out", &out->out) || !to_tensor(a->cu_seqlens_q, "cu_seqlens_q", &out->cu_seqlens_q) ||
      !to_tensor(a->cu_seqlens_k, "cu_seqlens_k", &out->cu_seqlens_k) ||
      !to_optional_tensor(a->seqused_q, "seqused_q", &out->seqused_q) ||
      !to_optional_tensor(a->seqused_k, "seqused_k", &out->seqused_k))
    return HOPATTN_INVALID_ARGUMENT;
  // lse, as in forward: left out whenever data is NULL.
  if (a->lse.data != nullptr && !to_tensor(a->lse, "lse", &out->lse)) return HOPATTN_INVALID_ARGUMENT;
  out->max_seqlen_q = a->max_seqlen_q;
  out->max_seqlen_k = a->max_seqlen_k;
  copy_attention_options(*a, out);
  out->check_index_values = a->check_index_values != 0;
  return HOPATTN_SUCCESS;
}

int to_args(const hopattn_fp8_attention_args* a, hopattn::Fp8AttentionArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k, "k", &out->k) || !to_tensor(a->v, "v", &out->v) ||
      !to_tensor(a->out, "out", &out->out) || !to_optional_tensor(a->lse, "lse", &out->lse))
    return HOPATTN_INVALID_ARGUMENT;
  out->causal = a->causal != 0;
  if (a->has_softmax_scale) out->softmax_scale = a->softmax_scale;
  out->incoherent = a->incoherent != 0;
  out->block_quant = a->block_quant != 0;
  out->seed = a->seed;
  out->rotate_v = a->rotate_v != 0;
  out->quantize_v = a->quantize_v != 0;
  return HOPATTN_SUCCESS;
}

int to_args(const hopattn_fp8_fwd_args* a, hopattn::Fp8ForwardArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k, "k", &out->k) || !to_tensor(a->v, "v", &out->v) ||
      !to_optional_tensor(a->q_descale, "q_descale", &out->q_descale) ||
      !to_optional_tensor(a->k_descale, "k_descale", &out->k_descale) ||
      !to_optional_tensor(a->v_descale, "v_descale", &out->v_descale) || !to_tensor(a->out, "out", &out->out) ||
      !to_optional_tensor(a->lse, "lse", &out->lse))
    return HOPATTN_INVALID_ARGUMENT;
  out->causal = a->causal != 0;
  if (a->has_softmax_scale) out->softmax_scale = a->softmax_scale;
  return HOPATTN_SUCCESS;
}

// The packed-batch part shared by the two FP8 varlen structs: tensors, index tensors and options.
template <class CArgs, class Args>
bool to_fp8_varlen_common(const CArgs& a, Args* out) {
  if (!to_tensor(a.q, "q", &out->q) || !to_tensor(a.k, "k", &out->k) || !to_tensor(a.v, "v", &out->v) ||
      !to_tensor(a.out, "out", &out->out) || !to_optional_tensor(a.lse, "lse", &out->lse) ||
      !to_tensor(a.cu_seqlens_q, "cu_seqlens_q", &out->cu_seqlens_q) ||
      !to_tensor(a.cu_seqlens_k, "cu_seqlens_k", &out->cu_seqlens_k) ||
      !to_optional_tensor(a.seqused_q, "seqused_q", &out->seqused_q) ||
      !to_optional_tensor(a.seqused_k, "seqused_k", &out->seqused_k))
    return false;
  out->max_seqlen_q = a.max_seqlen_q;
  out->max_seqlen_k = a.max_seqlen_k;
  out->causal = a.causal != 0;
  if (a.has_softmax_scale) out->softmax_scale = a.softmax_scale;
  out->check_index_values = a.check_index_values != 0;
  return true;
}

int to_args(const hopattn_fp8_varlen_attention_args* a, hopattn::Fp8VarlenAttentionArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_fp8_varlen_common(*a, out)) return HOPATTN_INVALID_ARGUMENT;
  out->incoherent = a->incoherent != 0;
  out->block_quant = a->block_quant != 0;
  out->rotate_v = a->rotate_v != 0;
  out->seed = a->seed;
  return HOPATTN_SUCCESS;
}

int to_args(const hopattn_fp8_varlen_fwd_args* a, hopattn::Fp8VarlenForwardArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_fp8_varlen_common(*a, out) || !to_optional_tensor(a->q_descale, "q_descale", &out->q_descale) ||
      !to_optional_tensor(a->k_descale, "k_descale", &out->k_descale) ||
      !to_optional_tensor(a->v_descale, "v_descale", &out->v_descale))
    return HOPATTN_INVALID_ARGUMENT;
  return HOPATTN_SUCCESS;
}

int to_args(const hopattn_fp8_quantize_args* a, hopattn::Fp8QuantizeArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_tensor(a->in, "in", &out->in) || !to_tensor(a->out, "out", &out->out) ||
      !to_tensor(a->descale, "descale", &out->descale))
    return HOPATTN_INVALID_ARGUMENT;
  out->rotate = a->rotate != 0;
  out->block_quant = a->block_quant != 0;
  out->seed = a->seed;
  return HOPATTN_SUCCESS;
}

}  // namespace

extern "C" {

int hopattn_abi_version(void) { return HOPATTN_ABI_VERSION; }
const char* hopattn_version(void) { return hopattn::version(); }
const char* hopattn_last_error(void) { return g_last_error.c_str(); }
const char* hopattn_build_instantiations(void) { return hopattn::build_instantiations(); }

int hopattn_forward(const hopattn_fwd_args* args, void* stream) {
  hopattn::ForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward(a, static_cast<cudaStream_t>(stream)));
}

int hopattn_forward_reference_cuda(const hopattn_fwd_args* args, void* stream) {
  hopattn::ForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_reference_cuda(a, static_cast<cudaStream_t>(stream)));
}

int hopattn_forward_cpu(const hopattn_fwd_args* args) {
  hopattn::ForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_cpu(a));
}

size_t hopattn_forward_workspace_size(const hopattn_fwd_args* args) {
  hopattn::ForwardArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::forward_workspace_size(a);
}

int hopattn_forward_with_workspace(const hopattn_fwd_args* args, void* workspace, size_t workspace_bytes,
                                   void* stream) {
  hopattn::ForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

int hopattn_check_device(void) { return finish(hopattn::check_device()); }

int hopattn_forward_varlen(const hopattn_varlen_fwd_args* args, void* stream) {
  hopattn::VarlenForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_varlen(a, static_cast<cudaStream_t>(stream)));
}

size_t hopattn_forward_varlen_workspace_size(const hopattn_varlen_fwd_args* args) {
  hopattn::VarlenForwardArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::forward_varlen_workspace_size(a);
}

int hopattn_forward_varlen_with_workspace(const hopattn_varlen_fwd_args* args, void* workspace,
                                          size_t workspace_bytes, void* stream) {
  hopattn::VarlenForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_varlen(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

int hopattn_forward_varlen_cpu(const hopattn_varlen_fwd_args* args) {
  hopattn::VarlenForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_varlen_cpu(a));
}

size_t hopattn_backward_workspace_size(const hopattn_bwd_args* args) {
  hopattn::BackwardArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::backward_workspace_size(a);
}

int hopattn_backward(const hopattn_bwd_args* args, void* workspace, size_t workspace_bytes, void* stream) {
  hopattn::BackwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::backward(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

int hopattn_backward_cpu(const hopattn_bwd_args* args) {
  hopattn::BackwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::backward_cpu(a));
}

size_t hopattn_attention_fp8_workspace_size(const hopattn_fp8_attention_args* args) {
  hopattn::Fp8AttentionArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::attention_fp8_workspace_size(a);
}

int hopattn_attention_fp8(const hopattn_fp8_attention_args* args, void* workspace, size_t workspace_bytes, void* stream) {
  hopattn::Fp8AttentionArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::attention_fp8(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

size_t hopattn_forward_fp8_workspace_size(const hopattn_fp8_fwd_args* args) {
  hopattn::Fp8ForwardArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::forward_fp8_workspace_size(a);
}

int hopattn_forward_fp8(const hopattn_fp8_fwd_args* args, void* workspace, size_t workspace_bytes, void* stream) {
  hopattn::Fp8ForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_fp8(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

size_t hopattn_attention_fp8_varlen_workspace_size(const hopattn_fp8_varlen_attention_args* args) {
  hopattn::Fp8VarlenAttentionArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::attention_fp8_varlen_workspace_size(a);
}

int hopattn_attention_fp8_varlen(const hopattn_fp8_varlen_attention_args* args, void* workspace,
                                 size_t workspace_bytes, void* stream) {
  hopattn::Fp8VarlenAttentionArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::attention_fp8_varlen(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

size_t hopattn_forward_fp8_varlen_workspace_size(const hopattn_fp8_varlen_fwd_args* args) {
  hopattn::Fp8VarlenForwardArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::forward_fp8_varlen_workspace_size(a);
}

int hopattn_forward_fp8_varlen(const hopattn_fp8_varlen_fwd_args* args, void* workspace, size_t workspace_bytes,
                               void* stream) {
  hopattn::Fp8VarlenForwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::forward_fp8_varlen(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

int hopattn_quantize_fp8(const hopattn_fp8_quantize_args* args, void* stream) {
  hopattn::Fp8QuantizeArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::quantize_fp8(a, static_cast<cudaStream_t>(stream)));
}

}  // extern "C"

// ---- varlen backward (ABI 5) -------------------------------------------------------------------

namespace {

int to_args(const hopattn_varlen_bwd_args* a, hopattn::VarlenBackwardArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k, "k", &out->k) || !to_tensor(a->v, "v", &out->v) ||
      !to_tensor(a->out, "out", &out->out) || !to_tensor(a->dout, "dout", &out->dout) ||
      !to_tensor(a->dq, "dq", &out->dq) || !to_tensor(a->dk, "dk", &out->dk) || !to_tensor(a->dv, "dv", &out->dv) ||
      !to_tensor(a->cu_seqlens_q, "cu_seqlens_q", &out->cu_seqlens_q) ||
      !to_tensor(a->cu_seqlens_k, "cu_seqlens_k", &out->cu_seqlens_k) ||
      !to_optional_tensor(a->seqused_q, "seqused_q", &out->seqused_q) ||
      !to_optional_tensor(a->seqused_k, "seqused_k", &out->seqused_k))
    return HOPATTN_INVALID_ARGUMENT;
  // lse, as in forward: left out whenever data is NULL (the library then reports it as required).
  if (a->lse.data != nullptr && !to_tensor(a->lse, "lse", &out->lse)) return HOPATTN_INVALID_ARGUMENT;
  out->max_seqlen_q = a->max_seqlen_q;
  out->max_seqlen_k = a->max_seqlen_k;
  copy_attention_options(*a, out);
  out->deterministic = a->deterministic != 0;
  out->check_index_values = a->check_index_values != 0;
  return HOPATTN_SUCCESS;
}

}  // namespace

extern "C" {

size_t hopattn_backward_varlen_workspace_size(const hopattn_varlen_bwd_args* args) {
  hopattn::VarlenBackwardArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::backward_varlen_workspace_size(a);
}

int hopattn_backward_varlen(const hopattn_varlen_bwd_args* args, void* workspace, size_t workspace_bytes, void* stream) {
  hopattn::VarlenBackwardArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::backward_varlen(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

}  // extern "C"

// ---- KV-cache decoding ---------------------------------------------------------------------------

namespace {

int to_args(const hopattn_kvcache_args* a, hopattn::KvCacheArgs* out) {
  if (null_args(a)) return HOPATTN_INVALID_ARGUMENT;
  if (!to_tensor(a->q, "q", &out->q) || !to_tensor(a->k_cache, "k_cache", &out->k_cache) ||
      !to_tensor(a->v_cache, "v_cache", &out->v_cache) ||
      !to_tensor(a->cache_seqlens, "cache_seqlens", &out->cache_seqlens) ||
      !to_optional_tensor(a->page_table, "page_table", &out->page_table) ||
      !to_optional_tensor(a->k_new, "k_new", &out->k_new) || !to_optional_tensor(a->v_new, "v_new", &out->v_new) ||
      !to_tensor(a->out, "out", &out->out) || !to_optional_tensor(a->lse, "lse", &out->lse))
    return HOPATTN_INVALID_ARGUMENT;
  // causal, scale, window and softcap as copy_attention_options.
  out->causal = a->causal != 0;
  if (a->has_softmax_scale) out->softmax_scale = a->softmax_scale;
  if (a->has_window) out->window = {a->window_left, a->window_right};  // ABI 7
  out->softcap = a->softcap;                                            // ABI 8
  out->num_splits = a->num_splits;
  out->check_index_values = a->check_index_values != 0;
  return HOPATTN_SUCCESS;
}

}  // namespace

extern "C" {

size_t hopattn_attention_with_kvcache_workspace_size(const hopattn_kvcache_args* args) {
  hopattn::KvCacheArgs a;
  if (to_args(args, &a) != HOPATTN_SUCCESS) return 0;
  return hopattn::attention_with_kvcache_workspace_size(a);
}

int hopattn_attention_with_kvcache(const hopattn_kvcache_args* args, void* workspace, size_t workspace_bytes,
                                   void* stream) {
  hopattn::KvCacheArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::attention_with_kvcache(a, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)));
}

int hopattn_attention_with_kvcache_cpu(const hopattn_kvcache_args* args) {
  hopattn::KvCacheArgs a;
  if (int rc = to_args(args, &a); rc != HOPATTN_SUCCESS) return rc;
  return finish(hopattn::attention_with_kvcache_cpu(a));
}

}  // extern "C"
