// The FP8 forward's launcher: the warp-specialised kernel of src/sm90/ws/ with an Fp8FwdConfig
// (e4m3 operands, block-scaled softmax, P in e4m3 against V^T). run_fwd_fp8 is what dispatch calls.
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include <cstdlib>
#include <string>

#include "sm90/fp8_launch.hpp"
#include "sm90/ws/fwd_ws_launch.cuh"

namespace hopattn::sm90 {

#ifdef HOPATTN_FP8_DEV_VARIANTS
// Tuning builds only (cmake -DHOPATTN_FP8_DEV_VARIANTS=ON): HOPATTN_FP8_VARIANT=<BM>x<N>e<every>
// picks a compiled variant (query rows, key tile, every how many exponentials run on the FMA pipe).
template <DType kOutDType, int kHeadDim, bool kCausal>
cudaError_t launch_fp8_dev_variant(const char* v, const Fp8AttnProblem& prob, cudaStream_t stream) {
  const AttnProblem& pr = prob.base;
  const std::string name(v);
#define HOPATTN_FP8_VARIANT(BM, BN, E)                                                                                  \
  if (name == #BM "x" #BN "e" #E)                                                                                       \
    return ws::launch_ws_config<ws::Fp8FwdConfig<kOutDType, kHeadDim, kCausal, ws::kStageE, BN, BM, E>>(prob, pr, stream);
  HOPATTN_FP8_VARIANT(128, 128, 4)
  if constexpr (kHeadDim == 64) {
    HOPATTN_FP8_VARIANT(192, 128, 0)
    HOPATTN_FP8_VARIANT(192, 128, 4)
  } else {
    HOPATTN_FP8_VARIANT(128, 128, 3)
    HOPATTN_FP8_VARIANT(128, 128, 2)
  }
#undef HOPATTN_FP8_VARIANT
  return cudaErrorInvalidValue;
}
#endif

template <DType kOutDType, int kHeadDim>
cudaError_t run_fwd_fp8(const Fp8AttnProblem& prob, cudaStream_t stream) {
  const AttnProblem& pr = prob.base;
  if (pr.dtype != kOutDType || pr.head_dim != kHeadDim) return cudaErrorInvalidValue;
  if (!ws::ws_indices_fit(pr)) return cudaErrorNotSupported;
#ifdef HOPATTN_FP8_DEV_VARIANTS
  if (const char* v = std::getenv("HOPATTN_FP8_VARIANT")) {
    return pr.causal ? launch_fp8_dev_variant<kOutDType, kHeadDim, true>(v, prob, stream)
                     : launch_fp8_dev_variant<kOutDType, kHeadDim, false>(v, prob, stream);
  }
#endif
  if (pr.causal) return ws::launch_ws_config<ws::Fp8FwdConfig<kOutDType, kHeadDim, true>>(prob, pr, stream);
  return ws::launch_ws_config<ws::Fp8FwdConfig<kOutDType, kHeadDim, false>>(prob, pr, stream);
}

}  // namespace hopattn::sm90
