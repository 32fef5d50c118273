// Declaration of the softcapped backward main kernel's launcher, which run_bwd calls for a problem
// with softcap > 0. Defined in sm90/bwd/softcap_main.cuh and instantiated in its own generated unit
// (src/instantiations/bwd_softcap.cu.in), so that the other backward kernels' units do not compile it.
#pragma once

#include <cuda_runtime_api.h>

#include "api/problem.hpp"
#include "sm90/bwd/workspace.hpp"

namespace hopattn::sm90::bwd {

template <DType kDType, int kHeadDim>
cudaError_t launch_softcap_main(const AttnBackwardProblem& bp, const WorkspaceLayout& w, char* ws, cudaStream_t stream);

}  // namespace hopattn::sm90::bwd
