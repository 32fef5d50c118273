// Host side of the warp-specialised (FlashAttention-3) forward: builds the TMA descriptors and
// kernel parameters from a validated AttnProblem, sizes the grid (per tile or one CTA per SM for
// the persistent schedule) and launches. run_fwd_ws is what dispatch calls.
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "api/heuristics.hpp"
#include "api/tuning_override.hpp"
#include "api/varlen_heuristics.hpp"
#include "api/problem.hpp"
#include "sm90/fp8/tile_counter.hpp"
#include "sm90/launch_util.hpp"
#include "sm90/ws/kernel.cuh"
#include "sm90/ws/tail_split.hpp"

namespace hopattn::sm90::ws {

// The tail split of a call planned with pr.tail_split_pieces pieces (api/fwd_tail_split.hpp): the
// split tiles are the last round's, re-derived here from the kernel's own tile count; a workspace
// smaller than their layout is refused rather than overrun. The counters are zeroed on the stream.
template <class Cfg>
cudaError_t set_tail_split(const AttnProblem& pr, int num_sms, cudaStream_t stream, TileOrder<false>* order) {
  const int tiles = order->num_tiles(), rest = tiles % num_sms;
  if (rest == 0) return cudaSuccess;
  const std::size_t counter_bytes = tail_split_counter_bytes(rest, Cfg::kBlockM);
  // Every piece needs a key block: an empty one would store its tile as unseen (zeros).
  const int64_t key_blocks = (pr.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  if (pr.tail_split_pieces > key_blocks || pr.tail_split_workspace == nullptr ||
      pr.tail_split_workspace_bytes <
          tail_split_workspace_bytes(rest, pr.tail_split_pieces, Cfg::kBlockM, Cfg::kHeadDim))
    return cudaErrorInvalidValue;
  auto* base = static_cast<unsigned char*>(pr.tail_split_workspace);
  order->split = TailSplit{tiles - rest, rest, pr.tail_split_pieces, reinterpret_cast<int*>(base),
                           reinterpret_cast<float*>(base + counter_bytes)};
  return cudaMemsetAsync(base, 0, counter_bytes, stream);
}

// A clustered launch (Cfg::kClusterM CTAs a cluster): the round-robin hands cluster c's CTAs the
// adjacent work indices k * grid + kClusterM * c + rank, i.e. query blocks 2u and 2u + 1 of one
// (batch, head) when the query blocks per head are even (the caller's condition), so both CTAs walk
// the same key blocks. As many clusters as can be resident, at most one unit of work each.
template <class Cfg>
cudaError_t launch_clustered(const typename FwdWsKernel<Cfg>::Params& params, cudaStream_t stream) {
  using K = FwdWsKernel<Cfg>;
  constexpr int kCm = Cfg::kClusterM;
  if (params.order.num_m_blocks % kCm != 0) return cudaErrorNotSupported;
  int clusters = 0;
  if (cudaError_t e = max_active_clusters_once<&fwd_ws_kernel<Cfg>>(kCm, Cfg::kNumThreads, K::kSmemBytes, &clusters);
      e != cudaSuccess)
    return e;
  const int units = K::Scheduler::grid_size(params.order, INT_MAX) / kCm;  // work indices: tiles and pieces
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_launch_config(unsigned(kCm * (units < clusters ? units : clusters)),
                                                       unsigned(Cfg::kNumThreads), size_t(K::kSmemBytes),
                                                       unsigned(kCm), stream, &attr);
  return cudaLaunchKernelEx(&cfg, fwd_ws_kernel<Cfg>, params);
}

// Launches the kernel of one configuration Cfg (FwdWsConfig or Fp8FwdConfig) on a validated
// problem (AttnProblem, or Fp8AttnProblem whose .base it describes).
template <class Cfg, class Problem>
cudaError_t launch_ws_config(const Problem& prob, const AttnProblem& pr, cudaStream_t stream) {
  using K = FwdWsKernel<Cfg>;

  // A paged cache: the 16-bit varlen kernels only, one TMA box per key tile inside one page.
  if (pr.paged()) {
    if constexpr (!Cfg::kVarlen || Cfg::kFp8) {
      return cudaErrorNotSupported;
    } else {
      if (pr.page_size % Cfg::kBlockN != 0 || pr.num_pages > INT_MAX || pr.page_size > INT_MAX)
        return cudaErrorNotSupported;
    }
  }

  typename K::Params params{};
  params.mainloop = K::Mainloop::make_params(prob);
  params.epilogue = K::Epilogue::make_params(pr);
#if HOPATTN_FWD_TRACE
  params.trace = bwd::bwd_trace();  // nulls unless HOPATTN_BWD_TRACE=1
#endif
  const int64_t num_m_blocks = (pr.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  // A quarter of the int range: the scheduler computes indices up to num_tiles + 2 * grid, or
  // 2 * (num_units + grid) folded (num_units <= num_tiles).
  if (num_m_blocks * pr.heads_q * pr.batch > INT_MAX / 4) return cudaErrorInvalidConfiguration;
  params.order = {int(num_m_blocks), int(pr.heads_q), int(pr.batch), false};
  if constexpr (Cfg::kCausalMask) {
    params.order.snake = heuristics::causal_snake_order(pr.seqlen_q);
    params.order.fold = Cfg::kPersistent && heuristics::causal_fold_order(Cfg::kBlockM);
    // The unfolded 16-bit fixed-length order in L2-sized sections (l2_section.hpp), where they pay.
    // HOPATTN_WS_SECTION: unset, the rule (half of a 50 MB L2); 0, off; N, N pairs. Sections take
    // the snake (unless HOPATTN_WS_SNAKE=0): without it, at 2k the rounds alias with the sections
    // (H100: 0.94x main; with it 1.07x).
    if constexpr (!Cfg::kFp8 && !Cfg::kVarlen && !Cfg::kLocal) {
      if (!params.order.fold) {
        static const int forced = heuristics::env_override("HOPATTN_WS_SECTION");
        const int section = forced >= 0 ? forced
                            : num_m_blocks > kMaxSectionedQueryBlocks
                                ? 0
                                : causal_l2_section(pr.seqlen_k, Cfg::kHeadDim, 2, int(pr.heads_q), int(pr.heads_kv),
                                                    int(pr.batch), int64_t(24) << 20);
        params.order.section = effective_section(section, int(pr.heads_q * pr.batch));
        if (params.order.section > 0 && heuristics::fwd_tuning().snake < 0) params.order.snake = true;
      }
    }
  }
  if constexpr (Cfg::kVarlen) {  // VarlenTileScheduler counts the real tiles from cu_seqlens_q
    params.order.cu_q = pr.cu_seqlens_q;
    params.order.rows_q = int(pr.varlen() ? pr.total_q : pr.seqlen_q);
    params.order.balanced = heuristics::varlen_balanced_order();
    // Packed calls with a tile counter take the dynamic order in the kernels that have it, unless
    // folded (two tiles per draw; the static fold balances those). The FP8 calls keep the counter
    // after V^T in their workspace, zeroed by the V^T pass; the 16-bit ones get it from
    // forward_varlen's workspace (pr.tile_counter) and zero it here, on the stream.
    if constexpr (K::kDynamicOrder) {
      if (pr.varlen() && !params.order.fold && heuristics::varlen_dynamic_order()) {
        if constexpr (Cfg::kFp8) {
          params.order.counter = fp8::varlen_tile_counter(prob.vt, pr.heads_kv, pr.head_dim, pr.total_k, pr.batch);
        } else if (pr.tile_counter != nullptr) {
          if (cudaError_t e = cudaMemsetAsync(pr.tile_counter, 0, sizeof(int), stream); e != cudaSuccess) return e;
          params.order.counter = pr.tile_counter;
        }
      }
    }
  }

  params.order.prepare();
  int grid = params.order.num_tiles();
  if constexpr (Cfg::kPersistent) {
    int num_sms = 0;
    if (cudaError_t e = current_device_sm_count(&num_sms); e != cudaSuccess) return e;
    if constexpr (Cfg::kTailSplit) {
      // A cluster's pair of work indices must be one piece of the two tiles of a pair: an odd
      // number of split tiles (an odd SM count) would shift them, so such a call does not split.
      const bool pairs_align = Cfg::kClusterM == 1 || (params.order.num_tiles() % num_sms) % 2 == 0;
      if (pr.tail_split_pieces > 1 && pairs_align) {
        if (cudaError_t e = set_tail_split<Cfg>(pr, num_sms, stream, &params.order); e != cudaSuccess) return e;
      }
    }
    grid = K::Scheduler::grid_size(params.order, num_sms);
    if constexpr (K::kRotateRounds) {
      static const int forced = heuristics::env_override("HOPATTN_WS_ROTATE");  // 0: the plain round-robin
      if (forced != 0) params.order.set_rotation(grid, params.order.split.num_indices(params.order.num_tiles()));
    }
  }

  // Above 48 KB, dynamic shared memory must be opted into per kernel (once per device).
  if (cudaError_t e = set_max_dynamic_smem_once<&fwd_ws_kernel<Cfg>>(K::kSmemBytes); e != cudaSuccess) return e;
  if constexpr (Cfg::kClusterM > 1) {
    return launch_clustered<Cfg>(params, stream);
  } else {
    fwd_ws_kernel<Cfg><<<grid, Cfg::kNumThreads, K::kSmemBytes, stream>>>(params);
    return cudaGetLastError();
  }
}

// Launches one configuration; kFlags picks the stage (kStageA/B/C in tile_shape.hpp).
template <DType kDType, int kHeadDim, bool kCausal, unsigned kFlags, int kBlockNOverride = 0, bool kVarlen = false,
          bool kLocal = false, bool kSoftcap = false, bool kFixedMax = false, int kBlockMOverride = 0>
cudaError_t launch_fwd_ws(const AttnProblem& pr, cudaStream_t stream) {
  return launch_ws_config<FwdWsConfig<kDType, kHeadDim, kCausal, kFlags, kBlockNOverride, kVarlen, kLocal, kSoftcap,
                                      kFixedMax, kBlockMOverride>>(pr, pr, stream);
}

// Per-sequence key counts run the varlen kernels: packed batches (cu_seqlens), or a fixed-length
// batch with seqused_k (the KV-cache call's chunked prefill, batched or paged views).
inline bool per_sequence_keys(const AttnProblem& pr) {
  return pr.varlen() || pr.seqused_k != nullptr || pr.paged();
}

// A window other than causal's (a left bound, or a right one without causal): the local kernels.
inline bool needs_local_kernel(const AttnProblem& pr) {
  return pr.window_left >= 0 || (pr.window_right >= 0 && !pr.causal);
}

// Sequence, head and tile indices are 32-bit in the kernel (TMA coordinates are 32-bit too); the
// halved range keeps row + seqlen_k - seqlen_q from overflowing in the causal limit.
inline bool ws_indices_fit(const AttnProblem& pr) {
  constexpr int64_t kMaxIndex = INT_MAX / 2;
  return pr.seqlen_q <= kMaxIndex && pr.seqlen_k <= kMaxIndex && pr.heads_q <= kMaxIndex && pr.batch <= kMaxIndex;
}

// Fixed-length, unmasked: d128's key tile by seqlen_k, the config's default elsewhere.
template <DType kDType, int kHeadDim, unsigned kFlags, int kBlockNOverride = 0>
cudaError_t run_fwd_ws_noncausal(const AttnProblem& pr, cudaStream_t stream) {
  if constexpr (kHeadDim == 128 && kBlockNOverride == 0) {
    switch (heuristics::d128_noncausal_key_tile(pr.seqlen_k)) {
      case 128: return launch_fwd_ws<kDType, kHeadDim, false, kFlags, 128>(pr, stream);
      case 160: return launch_fwd_ws<kDType, kHeadDim, false, kFlags, 160>(pr, stream);
      default: break;
    }
  }
  return launch_fwd_ws<kDType, kHeadDim, false, kFlags, kBlockNOverride>(pr, stream);
}

#ifndef HOPATTN_WS_STAGE
#define HOPATTN_WS_STAGE kStageE  // build-time default schedule; the probe overrides per call
#endif

// The dispatch entry point. Returns cudaErrorNotSupported for what this path cannot do, so the
// caller can fall back to another kernel.
template <DType kDType, int kHeadDim, unsigned kFlags = HOPATTN_WS_STAGE, int kBlockNOverride = 0>
cudaError_t run_fwd_ws(const AttnProblem& pr, cudaStream_t stream) {
  if constexpr (!(kDType == DType::kBF16 || kDType == DType::kFP16) ||
                !(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256)) {
    return cudaErrorNotSupported;
  } else {
    if (pr.dtype != kDType || pr.head_dim != kHeadDim) return cudaErrorInvalidValue;
    if (!ws_indices_fit(pr)) return cudaErrorNotSupported;
    if (pr.softcap != 0.f) return cudaErrorNotSupported;  // run_fwd_softcap (fwd_softcap_launch.cuh)
    // Windowed problems run the local kernels (run-time bounds), causal ones the causal kernels.
    if (needs_local_kernel(pr)) {
      return per_sequence_keys(pr)
                 ? launch_fwd_ws<kDType, kHeadDim, true, kFlags, kBlockNOverride, true, true>(pr, stream)
                 : launch_fwd_ws<kDType, kHeadDim, true, kFlags, kBlockNOverride, false, true>(pr, stream);
    }
    if (per_sequence_keys(pr)) {  // one kernel per mask: lengths vary, so the default key tile for all
      return pr.causal ? launch_fwd_ws<kDType, kHeadDim, true, kFlags, kBlockNOverride, true>(pr, stream)
                      : launch_fwd_ws<kDType, kHeadDim, false, kFlags, kBlockNOverride, true>(pr, stream);
    }
    if (pr.causal) {
      // Short sequences, where the default tiles pad and mask much more: d64 with 128 query rows
      // (not 192), d256 with 64-key tiles (not 80, which do not divide the 128-row diagonal).
      if constexpr (kHeadDim == 64 && kBlockNOverride == 0) {
        if (heuristics::d64_causal_query_tile(pr.seqlen_q, pr.seqlen_k) == 128)
          return launch_fwd_ws<kDType, kHeadDim, true, kFlags, 0, false, false, false, false, 128>(pr, stream);
      }
      if constexpr (kHeadDim == 256 && kBlockNOverride == 0) {
        if (heuristics::d256_causal_key_tile(pr.seqlen_q, pr.seqlen_k) == 64)
          return launch_fwd_ws<kDType, kHeadDim, true, kFlags, 64>(pr, stream);
      }
      return launch_fwd_ws<kDType, kHeadDim, true, kFlags, kBlockNOverride>(pr, stream);
    }
    // d128 and d256 in CTA pairs that share each K/V load (kBitCluster), where the rule takes them.
    if constexpr (kHeadDim >= 128 && kBlockNOverride == 0 && (kFlags & kBitPersistent) != 0) {
      const int64_t query_blocks = (pr.seqlen_q + 127) / 128;  // both head dims' 128-row tiles
      if (heuristics::fwd_cluster(kHeadDim, query_blocks, pr.seqlen_k))
        return run_fwd_ws_noncausal<kDType, kHeadDim, kFlags | kBitCluster>(pr, stream);
    }
    return run_fwd_ws_noncausal<kDType, kHeadDim, kFlags, kBlockNOverride>(pr, stream);
  }
}

}  // namespace hopattn::sm90::ws
