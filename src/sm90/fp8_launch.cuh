// The FP8 forward's launcher: the warp-specialised kernel of src/sm90/ws/ with an Fp8FwdConfig
// (e4m3 operands, block-scaled softmax, P in e4m3 against V^T). run_fwd_fp8 is what dispatch calls.
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include "api/fp8_heuristics.hpp"
#include "sm90/fp8/layout.hpp"
#include "sm90/fp8_launch.hpp"
#include "sm90/ws/fwd_ws_launch.cuh"

namespace hopattn::sm90 {

template <DType kOutDType, int kHeadDim>
cudaError_t run_fwd_fp8(const Fp8AttnProblem& prob, cudaStream_t stream) {
  const AttnProblem& pr = prob.base;
  if (pr.dtype != kOutDType || pr.head_dim != kHeadDim) return cudaErrorInvalidValue;
  if (!ws::ws_indices_fit(pr)) return cudaErrorNotSupported;
  using ws::Fp8FwdConfig;
  using ws::kStageE;
  if (pr.varlen()) {  // packed batches (attention_fp8_varlen): V^T in the packed layout, 128-key tiles
    if (prob.key_tile != 0 || prob.pv16) return cudaErrorInvalidValue;
    return pr.causal ? ws::launch_ws_config<Fp8FwdConfig<kOutDType, kHeadDim, true, kStageE, 0, 0, true>>(prob, pr, stream)
                     : ws::launch_ws_config<Fp8FwdConfig<kOutDType, kHeadDim, false, kStageE, 0, 0, true>>(prob, pr, stream);
  }
  if (prob.pv16) {  // attention_fp8 with quantize_v = false: 16-bit V and P, the config's own key tile
    if (prob.key_tile != 0 || prob.vt != nullptr || prob.unrotate_o) return cudaErrorInvalidValue;
    using Pv16Causal = Fp8FwdConfig<kOutDType, kHeadDim, true, kStageE, 0, 0, false, true>;
    using Pv16Full = Fp8FwdConfig<kOutDType, kHeadDim, false, kStageE, 0, 0, false, true>;
    return pr.causal ? ws::launch_ws_config<Pv16Causal>(prob, pr, stream) : ws::launch_ws_config<Pv16Full>(prob, pr, stream);
  }
  if constexpr (kHeadDim == 128) {
    if (prob.key_tile == fp8::kWideKeyBlock) {  // K descales per 224 rows or per head
      constexpr int kN = fp8::kWideKeyBlock;
      if (!pr.causal && heuristics::fp8_cluster(kHeadDim, (pr.seqlen_q + 127) / 128, pr.seqlen_k))
        return ws::launch_ws_config<Fp8FwdConfig<kOutDType, kHeadDim, false, kStageE | ws::kBitCluster, kN>>(prob, pr, stream);
      return pr.causal ? ws::launch_ws_config<Fp8FwdConfig<kOutDType, kHeadDim, true, kStageE, kN>>(prob, pr, stream)
                       : ws::launch_ws_config<Fp8FwdConfig<kOutDType, kHeadDim, false, kStageE, kN>>(prob, pr, stream);
    }
  }
  if (prob.key_tile != 0) return cudaErrorInvalidValue;
  if (pr.causal) return ws::launch_ws_config<ws::Fp8FwdConfig<kOutDType, kHeadDim, true>>(prob, pr, stream);
  if constexpr (kHeadDim >= 128) {  // CTA pairs sharing K / V^T loads, as the 16-bit kernel's (heuristics)
    if (heuristics::fp8_cluster(kHeadDim, (pr.seqlen_q + 127) / 128, pr.seqlen_k))
      return ws::launch_ws_config<ws::Fp8FwdConfig<kOutDType, kHeadDim, false, kStageE | ws::kBitCluster>>(prob, pr, stream);
  }
  return ws::launch_ws_config<ws::Fp8FwdConfig<kOutDType, kHeadDim, false>>(prob, pr, stream);
}

}  // namespace hopattn::sm90
