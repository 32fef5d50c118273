// Definition of run_fwd_softcap<DType, HeadDim>: softcapped problems run the local kernels
// (FwdWsConfig kLocal + kSoftcap), whatever their mask. A problem without a window passes unbounded
// run-time bounds (make_window clamps them), so only the key-length boundary block is masked.
// Included by the generated fwd_softcap_*.cu units only: these kernels compile in their own
// translation units, beside (not inside) the other forward kernels of the same (dtype, head dim).
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/fwd_ws_launch.cuh"

#include "sm90/fwd_launch.hpp"

namespace hopattn::sm90 {

// The fixed-max kernels exist for bf16 at d64 and d128, where the recip-score form runs
// (FwdWsConfig::kSoftcapRecipScore); HOPATTN_SOFTCAP_FIXED_MAX=0 leaves them out of a build.
constexpr bool softcap_fixed_max_built(DType dtype, int head_dim) {
  return HOPATTN_SOFTCAP_FIXED_MAX && HOPATTN_SOFTCAP_RECIP_SCORE && dtype == DType::kBF16 && head_dim <= 128;
}

template <DType kDType, int kHeadDim>
cudaError_t run_fwd_softcap(const AttnProblem& pr, cudaStream_t stream) {
  if (pr.dtype != kDType || pr.head_dim != kHeadDim || !(pr.softcap > 0.f)) return cudaErrorInvalidValue;
  if (!ws::ws_indices_fit(pr)) return cudaErrorNotSupported;
  if constexpr (softcap_fixed_max_built(kDType, kHeadDim)) {
    // Caps up to 54.7 (ws/fixed_max.hpp): the kernels without a running max.
    if (ws::softcap_fixed_max_fits(pr.softcap)) {
      return ws::per_sequence_keys(pr)
                 ? ws::launch_fwd_ws<kDType, kHeadDim, true, ws::HOPATTN_WS_STAGE, 0, true, true, true, true>(pr, stream)
                 : ws::launch_fwd_ws<kDType, kHeadDim, true, ws::HOPATTN_WS_STAGE, 0, false, true, true, true>(pr, stream);
    }
  }
  return ws::per_sequence_keys(pr)
             ? ws::launch_fwd_ws<kDType, kHeadDim, true, ws::HOPATTN_WS_STAGE, 0, true, true, true>(pr, stream)
             : ws::launch_fwd_ws<kDType, kHeadDim, true, ws::HOPATTN_WS_STAGE, 0, false, true, true>(pr, stream);
}

}  // namespace hopattn::sm90
