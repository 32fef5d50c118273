// Declaration of the per-(dtype, head dim) forward launcher. Each instantiation lives in its own
// generated translation unit (src/instantiations/fwd.cu.in), so a build compiles only what is listed.
#pragma once

#include <cuda_runtime_api.h>

#include "api/problem.hpp"

namespace hopattn::sm90 {

// Enqueues the forward pass for a validated, non-empty problem. Returns the launch's error code.
template <DType kDType, int kHeadDim>
cudaError_t run_fwd(const AttnProblem& problem, cudaStream_t stream);

// The same for a softcapped problem (softcap > 0), which run_fwd forwards here. Instantiated in
// its own generated unit (src/instantiations/fwd_softcap.cu.in, sm90/ws/fwd_softcap_launch.cuh).
template <DType kDType, int kHeadDim>
cudaError_t run_fwd_softcap(const AttnProblem& problem, cudaStream_t stream);

}  // namespace hopattn::sm90
