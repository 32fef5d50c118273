/* hopattn C ABI: a flat, stable surface for bindings (the Python package loads it with ctypes).
 * Every call returns a status code (0 = success, values as hopattn::Status); on failure
 * hopattn_last_error() returns a message naming the bad argument (thread-local). */
#ifndef HOPATTN_C_H_
#define HOPATTN_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOPATTN_ABI_VERSION 12

enum hopattn_status {
  HOPATTN_SUCCESS = 0,
  HOPATTN_INVALID_ARGUMENT = 1,
  HOPATTN_UNSUPPORTED = 2,
  HOPATTN_UNSUPPORTED_DEVICE = 3,
  HOPATTN_CUDA_ERROR = 4,
};

enum hopattn_dtype { HOPATTN_BF16 = 0, HOPATTN_FP16 = 1, HOPATTN_FP32 = 2, HOPATTN_INT32 = 3, HOPATTN_E4M3 = 4 };

typedef struct hopattn_tensor {
  void* data;
  int32_t dtype; /* enum hopattn_dtype */
  int32_t ndim;
  int64_t sizes[4];
  int64_t strides[4]; /* in elements */
} hopattn_tensor;

/* Sliding window (ABI 6; see hopattn.hpp: Window): read only when has_window is non-zero, so a
 * zero-initialised struct means no window. window_left/window_right: -1 = unbounded on that side.
 * With causal, window_right must be -1 or 0. softcap (ABI 6; see ForwardArgs::softcap): 0 = off. */
typedef struct hopattn_fwd_args {
  hopattn_tensor q, k, v, out, lse; /* lse.data may be NULL */
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t has_window;
  int64_t window_left, window_right;
  float softcap; /* 0: off */
} hopattn_fwd_args;

typedef struct hopattn_bwd_args {
  hopattn_tensor q, k, v, out, dout, lse, dq, dk, dv;
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t deterministic;
  int32_t has_window; /* and the bounds: as the forward call's */
  int64_t window_left, window_right;
  float softcap; /* 0: off */
} hopattn_bwd_args;

/* Variable-length forward (ABI 4; see hopattn.hpp: VarlenForwardArgs). q/k/v/out packed as
 * (total_tokens, heads, head_dim); lse (heads_q, total_q) fp32, optional (lse.data NULL).
 * cu_seqlens_q/k: int32, 1-dim, batch + 1 entries. seqused_q/k: int32, 1-dim, batch entries,
 * optional (data NULL and ndim 0). On the GPU every tensor, the index tensors too, is device memory;
 * check_index_values (GPU only) copies the index tensors to the host, synchronising the stream,
 * and checks their values as the CPU reference always does. */
typedef struct hopattn_varlen_fwd_args {
  hopattn_tensor q, k, v, out, lse; /* lse.data may be NULL */
  hopattn_tensor cu_seqlens_q, cu_seqlens_k;
  hopattn_tensor seqused_q, seqused_k; /* optional: data NULL and ndim 0 */
  int64_t max_seqlen_q, max_seqlen_k;
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t check_index_values;
  int32_t has_window; /* and the bounds: as hopattn_fwd_args, per sequence */
  int64_t window_left, window_right;
  float softcap; /* 0: off */
} hopattn_varlen_fwd_args;

/* FP8 (see hopattn.hpp: Fp8AttentionArgs, Fp8ForwardArgs, Fp8QuantizeArgs). Absent optional
 * tensors (lse, descales): data NULL and ndim 0. */
typedef struct hopattn_fp8_attention_args {
  hopattn_tensor q, k, v, out, lse; /* q/k/v/out bf16 or fp16 */
  int32_t causal;
  int32_t has_softmax_scale;
  float softmax_scale;
  int32_t incoherent;  /* rotate Q and K by a random-sign Hadamard matrix before quantising */
  int32_t block_quant; /* one scale per 128 rows (else per (batch, head)) */
  uint32_t seed;
  int32_t rotate_v; /* with incoherent: rotate V too; O is rotated back inside */
  int32_t quantize_v; /* ABI 12. 0: V and P stay 16-bit, only Q K^T in e4m3 (Fp8AttentionArgs::quantize_v) */
} hopattn_fp8_attention_args;

typedef struct hopattn_fp8_fwd_args {
  hopattn_tensor q, k, v;                          /* e4m3 */
  hopattn_tensor q_descale, k_descale, v_descale;  /* fp32, optional */
  hopattn_tensor out, lse;                         /* out bf16/fp16; lse optional */
  int32_t causal;
  int32_t has_softmax_scale;
  float softmax_scale;
} hopattn_fp8_fwd_args;

typedef struct hopattn_fp8_quantize_args {
  hopattn_tensor in, out, descale;
  int32_t rotate;
  int32_t block_quant;
  uint32_t seed;
} hopattn_fp8_quantize_args;

int hopattn_abi_version(void);
const char* hopattn_version(void);
const char* hopattn_last_error(void);
const char* hopattn_build_instantiations(void);

/* stream is a cudaStream_t (NULL = legacy default stream). */
int hopattn_forward(const hopattn_fwd_args* args, void* stream);
int hopattn_forward_reference_cuda(const hopattn_fwd_args* args, void* stream);
int hopattn_forward_cpu(const hopattn_fwd_args* args);
/* The forward with a workspace (hopattn.hpp: forward's workspace form): device memory of
 * hopattn_forward_workspace_size(args) bytes (0: no workspace needed, or invalid args), 256-byte
 * aligned, any content; it holds the tail split's partial results. */
size_t hopattn_forward_workspace_size(const hopattn_fwd_args* args);
int hopattn_forward_with_workspace(const hopattn_fwd_args* args, void* workspace, size_t workspace_bytes,
                                   void* stream);
int hopattn_check_device(void);

/* Variable-length forward: stream as above (device memory), or the CPU reference (host memory). */
int hopattn_forward_varlen(const hopattn_varlen_fwd_args* args, void* stream);
int hopattn_forward_varlen_cpu(const hopattn_varlen_fwd_args* args);
/* The same with a workspace (hopattn.hpp: forward_varlen's workspace form): device memory of
 * hopattn_forward_varlen_workspace_size(args) bytes (0: invalid args), 256-byte aligned, any
 * content; it holds the tile counter of the dynamic tile order. */
size_t hopattn_forward_varlen_workspace_size(const hopattn_varlen_fwd_args* args);
int hopattn_forward_varlen_with_workspace(const hopattn_varlen_fwd_args* args, void* workspace,
                                          size_t workspace_bytes, void* stream);

/* Backward: gradients dq, dk, dv of the forward call that produced out and lse.
 * workspace: device memory of hopattn_backward_workspace_size(args) bytes, 256-byte aligned. */
size_t hopattn_backward_workspace_size(const hopattn_bwd_args* args);
int hopattn_backward(const hopattn_bwd_args* args, void* workspace, size_t workspace_bytes, void* stream);
int hopattn_backward_cpu(const hopattn_bwd_args* args);

size_t hopattn_attention_fp8_workspace_size(const hopattn_fp8_attention_args* args);
int hopattn_attention_fp8(const hopattn_fp8_attention_args* args, void* workspace, size_t workspace_bytes, void* stream);
size_t hopattn_forward_fp8_workspace_size(const hopattn_fp8_fwd_args* args);
int hopattn_forward_fp8(const hopattn_fp8_fwd_args* args, void* workspace, size_t workspace_bytes, void* stream);
int hopattn_quantize_fp8(const hopattn_fp8_quantize_args* args, void* stream);

/* Variable-length backward (ABI 5; see hopattn.hpp: VarlenBackwardArgs). GPU only: device memory,
 * the index tensors too. The tensors and options of the hopattn_forward_varlen call that produced
 * out and lse (lse (heads_q, total_q) fp32 is required), plus dout like out and dq/dk/dv like q/k/v
 * (packed; q's dtype). Every row of every sequence is written (rows past seqused get 0); rows past
 * cu_seqlens[batch] are not. seqused_q/k optional as in hopattn_varlen_fwd_args. */
typedef struct hopattn_varlen_bwd_args {
  hopattn_tensor q, k, v, out, dout, lse, dq, dk, dv;
  hopattn_tensor cu_seqlens_q, cu_seqlens_k;
  hopattn_tensor seqused_q, seqused_k; /* optional: data NULL and ndim 0 */
  int64_t max_seqlen_q, max_seqlen_k;
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t deterministic;      /* as hopattn_bwd_args */
  int32_t check_index_values; /* as hopattn_varlen_fwd_args */
  int32_t has_window; /* and the bounds: as the forward call's */
  int64_t window_left, window_right;
  float softcap; /* 0: off */
} hopattn_varlen_bwd_args;

/* workspace: device memory of hopattn_backward_varlen_workspace_size(args) bytes (0 for malformed or
 * invalid args), 256-byte aligned; stream as for hopattn_forward. */
size_t hopattn_backward_varlen_workspace_size(const hopattn_varlen_bwd_args* args);
int hopattn_backward_varlen(const hopattn_varlen_bwd_args* args, void* workspace, size_t workspace_bytes,
                            void* stream);

/* KV-cache attention, decoding and chunked prefill (see hopattn.hpp: KvCacheArgs). q/out
 * (batch, seqlen_q, heads_q, head_dim); k_cache/v_cache (batch, max_seqlen_k, heads_kv, head_dim),
 * or with page_table (num_pages, page_size, heads_kv, head_dim); cache_seqlens int32 (batch);
 * page_table int32 (batch, max_pages);
 * k_new/v_new (batch, seqlen_new, heads_kv, head_dim), appended to the cache IN PLACE; lse fp32
 * (batch, heads_q, seqlen_q). Optional tensors (page_table, k_new, v_new, lse): data NULL and
 * ndim 0. On the GPU every tensor is device memory; workspace: device memory of
 * hopattn_attention_with_kvcache_workspace_size(args) bytes, 256-byte aligned (NULL when 0).
 * Sliding window (ABI 7; see hopattn.hpp: KvCacheArgs::window): as hopattn_fwd_args's, per
 * sequence with seqlen_k = the sequence's cache length after the append; read only when has_window
 * is non-zero, so a zero-initialised struct means no window. */
typedef struct hopattn_kvcache_args {
  hopattn_tensor q, k_cache, v_cache, cache_seqlens, page_table, k_new, v_new, out, lse;
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t num_splits; /* 0: heuristic */
  int32_t check_index_values;
  int32_t has_window; /* (ABI 7) and the bounds: -1 = unbounded side; with causal, window_right -1 or 0 */
  int64_t window_left, window_right; /* (ABI 7) */
  float softcap; /* (ABI 8; see KvCacheArgs::softcap) 0: off */
} hopattn_kvcache_args;

size_t hopattn_attention_with_kvcache_workspace_size(const hopattn_kvcache_args* args);
int hopattn_attention_with_kvcache(const hopattn_kvcache_args* args, void* workspace, size_t workspace_bytes,
                                   void* stream);
int hopattn_attention_with_kvcache_cpu(const hopattn_kvcache_args* args);

/* FP8 on packed variable-length batches (ABI 9; see hopattn.hpp: Fp8VarlenAttentionArgs,
 * Fp8VarlenForwardArgs). Tensors and index tensors as hopattn_varlen_fwd_args (device memory);
 * absent optional tensors (lse, seqused, descales): data NULL and ndim 0. */
typedef struct hopattn_fp8_varlen_attention_args {
  hopattn_tensor q, k, v, out, lse; /* q/k/v/out bf16 or fp16, packed */
  hopattn_tensor cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k;
  int64_t max_seqlen_q, max_seqlen_k;
  int32_t causal;
  int32_t has_softmax_scale;
  float softmax_scale;
  int32_t incoherent;
  int32_t block_quant;
  int32_t rotate_v;
  uint32_t seed;
  int32_t check_index_values;
} hopattn_fp8_varlen_attention_args;

typedef struct hopattn_fp8_varlen_fwd_args {
  hopattn_tensor q, k, v;                         /* e4m3, packed */
  hopattn_tensor q_descale, k_descale, v_descale; /* fp32, optional */
  hopattn_tensor out, lse;                        /* out bf16/fp16; lse optional */
  hopattn_tensor cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k;
  int64_t max_seqlen_q, max_seqlen_k;
  int32_t causal;
  int32_t has_softmax_scale;
  float softmax_scale;
  int32_t check_index_values;
} hopattn_fp8_varlen_fwd_args;

size_t hopattn_attention_fp8_varlen_workspace_size(const hopattn_fp8_varlen_attention_args* args);
int hopattn_attention_fp8_varlen(const hopattn_fp8_varlen_attention_args* args, void* workspace,
                                 size_t workspace_bytes, void* stream);
size_t hopattn_forward_fp8_varlen_workspace_size(const hopattn_fp8_varlen_fwd_args* args);
int hopattn_forward_fp8_varlen(const hopattn_fp8_varlen_fwd_args* args, void* workspace, size_t workspace_bytes,
                               void* stream);

#ifdef __cplusplus
}
#endif
#endif /* HOPATTN_C_H_ */
