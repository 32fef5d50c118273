// The C++ entry points: validate once, handle the empty cases, then dispatch through the table.
#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>

#include "api/device.hpp"
#include "api/instantiations.hpp"
#include "api/problem.hpp"
#include "reference/reference.hpp"

#ifndef HOPATTN_VERSION_STRING
#define HOPATTN_VERSION_STRING "0.0.0+unknown"
#endif

namespace hopattn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
  }
  return "unknown";
}

std::size_t dtype_size(DType t) { return t == DType::kFP32 ? 4 : 2; }

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
    stride *= s[i];
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

std::size_t forward_workspace_size(const ForwardArgs&) { return 0; }

Result check_device() { return check_hopper_device(); }

Result forward(const ForwardArgs& args, cudaStream_t stream) {
  AttnProblem p;
  if (Result r = validate_forward(args, Backend::kSm90, &p); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (p.empty()) return {};
  if (p.seqlen_k == 0) {  // every row sees no key: out = 0, lse = -inf
    cudaError_t e = reference::fill_no_keys(p, stream);
    return e == cudaSuccess ? Result{} : cuda_error("fill_no_keys", e);
  }
  const FwdKernelEntry* kernel = find_forward_kernel(p.dtype, static_cast<int>(p.head_dim));
  cudaError_t e = kernel->launch(p, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 forward launch", e);
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

}  // namespace hopattn
