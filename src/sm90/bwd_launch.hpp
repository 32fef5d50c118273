// Declaration of the per-(dtype, head dim) backward launcher. Each instantiation lives in its own
// generated translation unit (src/instantiations/bwd.cu.in), like the forward ones.
#pragma once

#include <cuda_runtime_api.h>

#include "api/problem.hpp"

namespace hopattn::sm90 {

// Enqueues preprocess, main kernel and postprocess for a validated, non-empty problem with
// seqlen_k > 0. `workspace` holds sm90::bwd::workspace_bytes(problem.fwd) bytes.
template <DType kDType, int kHeadDim>
cudaError_t run_bwd(const AttnBackwardProblem& problem, void* workspace, cudaStream_t stream);

}  // namespace hopattn::sm90
