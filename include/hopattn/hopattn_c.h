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

#define HOPATTN_ABI_VERSION 2

enum hopattn_status {
  HOPATTN_SUCCESS = 0,
  HOPATTN_INVALID_ARGUMENT = 1,
  HOPATTN_UNSUPPORTED = 2,
  HOPATTN_UNSUPPORTED_DEVICE = 3,
  HOPATTN_CUDA_ERROR = 4,
};

enum hopattn_dtype { HOPATTN_BF16 = 0, HOPATTN_FP16 = 1, HOPATTN_FP32 = 2 };

typedef struct hopattn_tensor {
  void* data;
  int32_t dtype; /* enum hopattn_dtype */
  int32_t ndim;
  int64_t sizes[4];
  int64_t strides[4]; /* in elements */
} hopattn_tensor;

typedef struct hopattn_fwd_args {
  hopattn_tensor q, k, v, out, lse; /* lse.data may be NULL */
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
} hopattn_fwd_args;

typedef struct hopattn_bwd_args {
  hopattn_tensor q, k, v, out, dout, lse, dq, dk, dv;
  int32_t causal;
  int32_t has_softmax_scale; /* 0: use 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t deterministic;
} hopattn_bwd_args;

int hopattn_abi_version(void);
const char* hopattn_version(void);
const char* hopattn_last_error(void);
const char* hopattn_build_instantiations(void);

/* stream is a cudaStream_t (NULL = legacy default stream). */
int hopattn_forward(const hopattn_fwd_args* args, void* stream);
int hopattn_forward_reference_cuda(const hopattn_fwd_args* args, void* stream);
int hopattn_forward_cpu(const hopattn_fwd_args* args);
size_t hopattn_forward_workspace_size(const hopattn_fwd_args* args);
int hopattn_check_device(void);

/* Backward: gradients dq, dk, dv of the forward call that produced out and lse.
 * workspace: device memory of hopattn_backward_workspace_size(args) bytes, 256-byte aligned. */
size_t hopattn_backward_workspace_size(const hopattn_bwd_args* args);
int hopattn_backward(const hopattn_bwd_args* args, void* workspace, size_t workspace_bytes, void* stream);
int hopattn_backward_cpu(const hopattn_bwd_args* args);

#ifdef __cplusplus
}
#endif
#endif /* HOPATTN_C_H_ */
