// Declaration of the per-(output dtype, head dim) FP8 forward launcher; each instantiation lives in
// its own generated translation unit (src/instantiations/fp8.cu.in).
#pragma once

#include <cuda_runtime_api.h>

#include "api/problem.hpp"

namespace hopattn::sm90 {

// Enqueues the FP8 forward pass for a validated, non-empty problem whose V^T is already in place.
template <DType kOutDType, int kHeadDim>
cudaError_t run_fwd_fp8(const Fp8AttnProblem& problem, cudaStream_t stream);

}  // namespace hopattn::sm90
