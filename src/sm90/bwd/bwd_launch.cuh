// Host side of the Hopper backward pass: carves the workspace, then enqueues the preprocess
// (D, base-2 lse, zeroed dQ accumulator), the warp-specialised main kernel (dK, dV, dQ partials)
// and the postprocess (dQ to the caller's dtype). run_bwd is what dispatch calls.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "api/bwd_heuristics.hpp"
#include "api/problem.hpp"
#include "sm90/bwd/kernel.cuh"
#include "sm90/bwd/prepost.cuh"
#include "sm90/bwd/softcap_main.hpp"
#include "sm90/bwd/workspace.hpp"
#include "sm90/bwd_launch.hpp"
#include "sm90/grid_dependency.cuh"
#include "sm90/launch_util.hpp"

namespace hopattn::sm90 {
namespace bwd {

// The preprocess, main kernel and postprocess must agree on it (one call, one answer).
inline bool use_dq_first_store(int head_dim) { return dq_first_store(head_dim) && heuristics::bwd_dq_first_store(); }
inline bool use_dq_overlap(int head_dim) { return dq_overlap(head_dim) && heuristics::bwd_dq_overlap(); }

// The tail split of this launch (workspace.hpp): the head_dim split without a mask, fixed-length and
// not deterministic (its turn order assumes whole units). The preprocess zeroes what it uses.
template <int kHeadDim, bool kCausal>
inline cudaError_t tail_split(const AttnBackwardProblem& bp, TailSplit* out) {
  *out = {};
  const AttnProblem& p = bp.fwd;
  const int mode = heuristics::bwd_tail_split_mode();
  if (kHeadDim != 256 || kCausal || mode == 0 || bp.deterministic || !bwd_tail_eligible(p)) return cudaSuccess;
  const int64_t units = (p.seqlen_k + 63) / 64 * p.heads_kv * p.batch;
  const int64_t steps = (p.seqlen_q + 63) / 64 * p.group();
  if (mode >= 2) {
    *out = {int(std::min<int64_t>(units, kMaxTailUnits)), int(std::min<int64_t>(mode, steps))};
    return cudaSuccess;
  }
  int sms = 0;
  if (cudaError_t e = current_device_sm_count(&sms); e != cudaSuccess) return e;
  *out = bwd_tail_split(units, steps, sms);
  return cudaSuccess;
}

// Heads per launch section (launch_order.hpp). Only plain causal fixed-length runs have units of
// different lengths to order; windowed, packed and deterministic runs keep the key blocks of one
// head side by side (deterministic causal ones rely on that order: BwdKernel::dq_turn).
template <class Cfg>
int section_heads(const AttnBackwardProblem& bp, bool deterministic) {
  const AttnProblem& p = bp.fwd;
  if (!Cfg::kCausal || Cfg::kLocal || deterministic || p.varlen()) return 1;
  // What one (batch, kv head) streams: Q and dO of its query heads, and their fp32 dQ accumulator.
  const long long bytes = p.group() * p.seqlen_q * Cfg::kHeadDim * (2 * sizeof(typename Cfg::Element) + 4);
  return heuristics::bwd_causal_section_heads(bytes, int(p.heads_kv * p.batch));
}

template <DType kDType, int kHeadDim, bool kCausal, bool kLocal = false, bool kSoftcap = false, int kQueryStep = 0>
cudaError_t launch_main(const AttnBackwardProblem& bp, const WorkspaceLayout& w, char* ws, cudaStream_t stream) {
  using Cfg = BwdConfig<kDType, kHeadDim, kCausal, kLocal, kSoftcap, kQueryStep>;
  if (w.query_step != Cfg::kBlockM) return cudaErrorInvalidValue;  // the workspace is laid out for another step
  using K = BwdKernel<Cfg>;
  const AttnProblem& p = bp.fwd;
  typename K::Params params{};
  params.mainloop = K::Mainloop::make_params(bp, reinterpret_cast<float*>(ws + w.lse_log2),
                                             reinterpret_cast<float*>(ws + w.dpsum), w.rows);
  params.dq_accum = reinterpret_cast<float*>(ws + w.dq_accum);
  params.semaphore = reinterpret_cast<int*>(ws + w.semaphore);
  params.dk = bp.dk;
  params.dv = bp.dv;
  for (int i = 0; i < 3; ++i) {
    params.dk_stride[i] = bp.dk_stride[i];
    params.dv_stride[i] = bp.dv_stride[i];
  }
  params.scale = p.scale;
  params.n_blocks = int((p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN);
  params.deterministic = bp.deterministic;
  params.section_heads = section_heads<Cfg>(bp, params.deterministic);
  params.dq_first_store = use_dq_first_store(kHeadDim);
  const int64_t units = int64_t(params.n_blocks) * p.heads_kv * p.batch;
  TailSplit split{};
  if (cudaError_t e = tail_split<kHeadDim, kCausal || kLocal>(bp, &split); e != cudaSuccess) return e;
  params.tail_first = int(units - split.units);
  params.tail_parts = split.parts > 0 ? split.parts : 1;
  params.tail_acc = reinterpret_cast<float*>(ws + w.tail_acc);
  params.tail_count = reinterpret_cast<int*>(ws + w.tail_count);
  params.dq_done = use_dq_overlap(kHeadDim) ? reinterpret_cast<int*>(ws + w.dq_done) : nullptr;
  params.trace = bwd_trace();
  const int64_t grid = units + int64_t(split.units) * (split.parts - 1);
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  if (cudaError_t e = set_max_dynamic_smem_once<&bwd_kernel<Cfg>>(K::kSmemBytes); e != cudaSuccess) return e;
  // Programmatic: its CTAs start (barrier init, K and V loads) while the preprocess drains; every
  // thread waits for the preprocess before it touches the rows' lse, D, counters or accumulator.
  return launch_maybe_programmatic(bwd_kernel<Cfg>, dim3(unsigned(grid)), dim3(Cfg::kNumThreads), K::kSmemBytes, stream,
                                   heuristics::bwd_programmatic_launch(), params);
}

}  // namespace bwd

namespace bwd {
// dQ from the fp32 accumulator to the caller's tensor, in the fragment order of DqMainloop's kernel.
template <class DqMainloop>
cudaError_t postprocess(PrePostParams pp, const AttnProblem& p, const WorkspaceLayout& w, cudaStream_t stream) {
  pp.m_blocks = int(w.seqlen_q_padded / DqMainloop::kBlockM);  // the postprocess's query blocks
  const int64_t tiles = p.batch * p.heads_q * pp.m_blocks;
  if (tiles > INT_MAX) return cudaErrorInvalidConfiguration;
  // Programmatic: its launch overlaps the main kernel's last CTAs; it waits for them at its top (all
  // of them, or under dq_overlap those of each tile's heads).
  return launch_maybe_programmatic(bwd_postprocess_kernel<DqMainloop>, dim3(unsigned(tiles)),
                                   dim3(DqMainloop::kdQElems / DqMainloop::kdQPerThread), 0, stream,
                                   pp.dq_done != nullptr || heuristics::bwd_programmatic_launch(), pp);
}
}  // namespace bwd

template <DType kDType, int kHeadDim>
cudaError_t run_bwd(const AttnBackwardProblem& bp, void* workspace, cudaStream_t stream) {
  if constexpr (!(kDType == DType::kBF16 || kDType == DType::kFP16) || !(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256)) {
    return cudaErrorNotSupported;
  } else {
    using Element = typename ws::ElementOf<kDType>::type;
    const AttnProblem& p = bp.fwd;
    if (p.dtype != kDType || p.head_dim != kHeadDim || bp.grad_dtype != kDType) return cudaErrorInvalidValue;
    // 32-bit sequence, head and tile indices in the kernels (TMA coordinates are 32-bit too).
    constexpr int64_t kMaxIndex = INT_MAX / 2;
    if (p.seqlen_q > kMaxIndex || p.seqlen_k > kMaxIndex || p.heads_q > kMaxIndex || p.batch > kMaxIndex)
      return cudaErrorNotSupported;
    const bwd::WorkspaceLayout w = bwd::workspace_layout(p);
    char* ws_bytes = static_cast<char*>(workspace);

    bwd::PrePostParams pp{};
    pp.out = p.out;
    pp.dout = bp.dout;
    pp.lse = p.lse;
    pp.dq = bp.dq;
    pp.lse_log2 = reinterpret_cast<float*>(ws_bytes + w.lse_log2);
    pp.dpsum = reinterpret_cast<float*>(ws_bytes + w.dpsum);
    pp.dq_accum = reinterpret_cast<float*>(ws_bytes + w.dq_accum);
    pp.semaphore = reinterpret_cast<int*>(ws_bytes + w.semaphore);
    pp.dq_first_store = bwd::use_dq_first_store(kHeadDim);
    bwd::TailSplit split{};
    if (cudaError_t e = bwd::tail_split<kHeadDim, false>(bp, &split); e != cudaSuccess) return e;
    pp.dq_done = bwd::use_dq_overlap(kHeadDim) ? reinterpret_cast<int*>(ws_bytes + w.dq_done) : nullptr;
    pp.dq_done_count = int(p.batch * p.heads_kv);
    constexpr int kBlockN = bwd::BwdConfig<kDType, kHeadDim, false>::kBlockN;  // every variant's (config.hpp)
    pp.dq_done_target = int((p.seqlen_k + kBlockN - 1) / kBlockN);            // the main grid's key blocks
    // A split unit's pieces count one each (dq_done_target): the split units are the launch's last.
    pp.tail_first = split.units > 0 ? int(int64_t(pp.dq_done_target) * p.heads_kv * p.batch - split.units) : INT_MAX;
    pp.tail_parts = split.units > 0 ? split.parts : 1;
    pp.group = int(p.group());
    pp.trace = bwd::bwd_trace();
    for (int i = 0; i < 3; ++i) {
      pp.o_stride[i] = p.o_stride[i];
      pp.do_stride[i] = bp.do_stride[i];
      pp.dq_stride[i] = bp.dq_stride[i];
    }
    pp.seqlen_q = int(p.seqlen_q);
    pp.seqlen_q_padded = int(w.seqlen_q_padded);
    pp.heads_q = int(p.heads_q);
    pp.batch = int(p.batch);
    pp.m_blocks = int(w.m_blocks);
    pp.scale = p.scale;
    pp.rows = w.rows;
    pp.cu_q = p.cu_seqlens_q;
    pp.used_q = p.seqused_q;
    pp.total_q = int(p.total_q);
    // What the main kernel's tail split adds into: zeroed by the preprocess.
    pp.tail_acc = reinterpret_cast<float*>(ws_bytes + w.tail_acc);
    pp.tail_count = reinterpret_cast<int*>(ws_bytes + w.tail_count);
    pp.tail_units = split.units;
    const int64_t rows = p.batch * p.heads_q * w.seqlen_q_padded;
    using PreShape = bwd::PreprocessShape<Element, kHeadDim>;
    const int64_t row_grid = PreShape::blocks(rows);
    if (row_grid > INT_MAX) return cudaErrorInvalidConfiguration;

    bwd::bwd_preprocess_kernel<Element, kHeadDim><<<unsigned(row_grid), PreShape::kThreads, 0, stream>>>(pp);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    // Windowed problems run the local kernel (run-time bounds), causal ones the causal kernel.
    // Softcapped ones run the softcap kernel, itself a local one (its own unit: bwd/softcap_main.hpp).
    const bool local = p.window_left >= 0 || (p.window_right >= 0 && !p.causal);
    // d128 unmasked fixed-length problems step 80 queries at a time (bwd_query_step), a kernel of
    // their own with its own dQ fragment order; the others share the head dim's default step.
    constexpr int kWideStep = bwd::bwd_query_step(kHeadDim, false, false);
    constexpr bool kHasWideStep = kWideStep != bwd::bwd_query_step(kHeadDim, true, true);
    const bool wide = kHasWideStep && w.query_step == kWideStep;
    cudaError_t e = p.softcap > 0.f ? bwd::launch_softcap_main<kDType, kHeadDim>(bp, w, ws_bytes, stream)
                    : local      ? bwd::launch_main<kDType, kHeadDim, true, true>(bp, w, ws_bytes, stream)
                    : p.causal   ? bwd::launch_main<kDType, kHeadDim, true>(bp, w, ws_bytes, stream)
                    : wide       ? bwd::launch_main<kDType, kHeadDim, false, false, false, kWideStep>(bp, w, ws_bytes, stream)
                                 : bwd::launch_main<kDType, kHeadDim, false>(bp, w, ws_bytes, stream);
    if (e != cudaSuccess) return e;
    if constexpr (kHasWideStep) {
      if (wide) return bwd::postprocess<bwd::BwdMainloop<bwd::BwdConfig<kDType, kHeadDim, false, false, false, kWideStep>>>(pp, p, w, stream);
    }
    return bwd::postprocess<bwd::BwdMainloop<bwd::BwdConfig<kDType, kHeadDim, false>>>(pp, p, w, stream);
  }
}

}  // namespace hopattn::sm90
