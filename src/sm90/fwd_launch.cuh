// TEMPORARY placeholder, replaced by the real kernel.
#pragma once
#include "sm90/fwd_launch.hpp"
namespace hopattn::sm90 {
template <DType kDType, int kHeadDim>
cudaError_t run_fwd(const AttnProblem&, cudaStream_t) { return cudaErrorNotYetImplemented; }
}
