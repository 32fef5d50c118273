// PLACEHOLDER while the backward kernel is written: reports "not supported".
#pragma once
#include "sm90/bwd_launch.hpp"
namespace hopattn::sm90 {
template <DType kDType, int kHeadDim>
cudaError_t run_bwd(const AttnBackwardProblem&, void*, cudaStream_t) { return cudaErrorNotSupported; }
}  // namespace hopattn::sm90
