// The table of compiled sm90 kernels. CMake generates its contents (instantiation_table.cpp) from
// the one list HOPATTN_DTYPES x HOPATTN_HEAD_DIMS, so dispatch is a lookup, not a macro switch.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "api/problem.hpp"

namespace hopattn {

using FwdLauncher = cudaError_t (*)(const AttnProblem&, cudaStream_t);

struct FwdKernelEntry {
  DType dtype;
  int head_dim;
  FwdLauncher launch;
};

// Backward: the launcher runs preprocess, main kernel and postprocess on `workspace`
// (sm90::bwd::workspace_bytes(problem) bytes, 256-byte aligned).
using BwdLauncher = cudaError_t (*)(const AttnBackwardProblem&, void* workspace, cudaStream_t);

struct BwdKernelEntry {
  DType dtype;
  int head_dim;
  BwdLauncher launch;
};

const BwdKernelEntry* find_backward_kernel(DType dtype, int head_dim);
inline bool has_backward_kernel(DType dtype, int head_dim) { return find_backward_kernel(dtype, head_dim) != nullptr; }

// FP8 forward: e4m3 q/k and V^T in the layout of sm90/fp8/layout.hpp; `dtype` is the output's.
using Fp8Launcher = cudaError_t (*)(const Fp8AttnProblem&, cudaStream_t);

struct Fp8KernelEntry {
  DType dtype;
  int head_dim;
  Fp8Launcher launch;
};

const Fp8KernelEntry* find_fp8_kernel(DType out_dtype, int head_dim);
inline bool has_fp8_kernel(DType out_dtype, int head_dim) { return find_fp8_kernel(out_dtype, head_dim) != nullptr; }

// The CUDA reference keeps one row of O in shared memory; this bounds it (any head dim up to it).
constexpr int64_t kMaxReferenceHeadDim = 512;

const FwdKernelEntry* find_forward_kernel(DType dtype, int head_dim);
inline bool has_forward_kernel(DType dtype, int head_dim) { return find_forward_kernel(dtype, head_dim) != nullptr; }
const char* build_instantiation_list();  // "fwd:bf16:64,...,bwd:bf16:64,...,fp8:bf16:64,..."

}  // namespace hopattn
