// Definition of launch_softcap_main: the local (run-time window) backward kernel with softcapping.
// A problem without a window passes unbounded bounds (ws::make_window clamps them).
#pragma once

#include "sm90/bwd/bwd_launch.cuh"

namespace hopattn::sm90::bwd {

template <DType kDType, int kHeadDim>
cudaError_t launch_softcap_main(const AttnBackwardProblem& bp, const WorkspaceLayout& w, char* ws, cudaStream_t stream) {
  return launch_main<kDType, kHeadDim, true, true, true>(bp, w, ws, stream);
}

}  // namespace hopattn::sm90::bwd
