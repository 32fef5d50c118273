// Definition of run_fwd<DType, HeadDim>: the FlashAttention-3 warp-specialised kernel
// (sm90/ws/) by default, else (HOPATTN_FWD_KERNEL=mma, or a shape it declines) the first-path
// mma.sync kernel, whose launcher run_fwd_mma builds FwdParams, the flattened grid and smem size.
#pragma once

// First: the ws kernel enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/fwd_ws_launch.cuh"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "sm90/fwd_launch.hpp"
#include "sm90/fwd_mma_kernel.cuh"
#include "sm90/fwd_params.hpp"
#include "sm90/kernel_choice.hpp"
#include "sm90/launch_util.hpp"

namespace hopattn::sm90 {

template <DType kDType, int kHeadDim>
cudaError_t run_fwd_mma(const AttnProblem& pr, cudaStream_t stream) {
  using Cfg = FwdTileConfig<kHeadDim>;
  if (pr.head_dim != kHeadDim || pr.dtype != kDType || ws::per_sequence_keys(pr)) return cudaErrorInvalidValue;
  // Row and tile indices are 32-bit in the kernel (offsets are 64-bit); the + kBlockM headroom
  // keeps the causal limit arithmetic (row + seqlen_k - seqlen_q) from overflowing.
  constexpr int64_t kMaxSeqlen = INT_MAX / 2;
  if (pr.seqlen_q > kMaxSeqlen || pr.seqlen_k > kMaxSeqlen || pr.heads_q > INT_MAX || pr.batch > INT_MAX)
    return cudaErrorInvalidValue;

  FwdParams p{};
  p.q = pr.q;
  p.k = pr.k;
  p.v = pr.v;
  p.out = pr.out;
  p.lse = pr.lse;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = pr.q_stride[i];
    p.k_stride[i] = pr.k_stride[i];
    p.v_stride[i] = pr.v_stride[i];
    p.o_stride[i] = pr.o_stride[i];
  }
  p.seqlen_q = static_cast<int>(pr.seqlen_q);
  p.seqlen_k = static_cast<int>(pr.seqlen_k);
  p.heads_q = static_cast<int>(pr.heads_q);
  p.group = static_cast<int>(pr.group());
  p.scale = pr.scale;
  p.scale_log2 = pr.scale * static_cast<float>(M_LOG2E);

  const int64_t num_m_blocks = (pr.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  const int64_t num_ctas = num_m_blocks * pr.heads_q * pr.batch;
  if (num_ctas > INT_MAX) return cudaErrorInvalidConfiguration;  // grid.x limit is 2^31 - 1
  p.num_m_blocks = static_cast<int>(num_m_blocks);

  const auto kernel = pr.causal ? &fwd_mma_kernel<kDType, kHeadDim, true> : &fwd_mma_kernel<kDType, kHeadDim, false>;
  // Above 48 KB dynamic shared memory must be opted into per kernel (once per device).
  if (cudaError_t e = pr.causal ? set_max_dynamic_smem_once<&fwd_mma_kernel<kDType, kHeadDim, true>>(Cfg::kSmemBytes)
                                : set_max_dynamic_smem_once<&fwd_mma_kernel<kDType, kHeadDim, false>>(Cfg::kSmemBytes);
      e != cudaSuccess)
    return e;
  kernel<<<static_cast<unsigned>(num_ctas), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <DType kDType, int kHeadDim>
cudaError_t run_fwd(const AttnProblem& pr, cudaStream_t stream) {
  if (pr.softcap > 0.f) return run_fwd_softcap<kDType, kHeadDim>(pr, stream);
  // Packed (varlen) batches, per-sequence key counts and sliding windows exist only in the
  // warp-specialised kernel: no fallback (the mma kernel's mask is causal or nothing).
  if (ws::per_sequence_keys(pr) || pr.window_left >= 0 || (pr.window_right >= 0 && !pr.causal))
    return ws::run_fwd_ws<kDType, kHeadDim>(pr, stream);
  if (forward_kernel_family() == FwdKernelFamily::kWarpSpecialized) {
    const cudaError_t e = ws::run_fwd_ws<kDType, kHeadDim>(pr, stream);
    if (e != cudaErrorNotSupported) return e;
  }
  return run_fwd_mma<kDType, kHeadDim>(pr, stream);
}

}  // namespace hopattn::sm90
