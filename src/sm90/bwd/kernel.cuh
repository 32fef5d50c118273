// The warp-specialised backward kernel: warpgroup 0 is the producer (warp 0 issues every TMA load,
// warp 1 the key split's dQ bulk adds; registers given away with setmaxnreg), warpgroups 1 and 2
// the consumers, splitting the CTA's keys (consumer_key_split.cuh) or head_dim between them. One CTA
// per (key block, kv head, batch); it walks every query block of every query head in the GQA group
// that sees its keys, in the same order on both sides.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/bwd/consumer_head_split.cuh"
#include "sm90/bwd/consumer_key_split.cuh"
#include "sm90/bwd/kernel_common.cuh"
#include "sm90/bwd/mainloop.cuh"
#include "sm90/grid_dependency.cuh"

namespace hopattn::sm90::bwd {

// The producer warp: K and V once, then Q (+ lse) and dO (+ D) per step, each pair of stages on
// the consumers' order of (query head, query block).
template <class Cfg>
__device__ __forceinline__ void produce(const typename BwdKernel<Cfg>::Params& params, typename BwdKernel<Cfg>::SharedStorage& ss,
                                        typename BwdKernel<Cfg>::Mainloop::Pipeline& pipe_q,
                                        typename BwdKernel<Cfg>::Mainloop::Pipeline& pipe_do) {
  using K = BwdKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using Pipeline = typename Mainloop::Pipeline;
  using PipelineState = typename Mainloop::PipelineState;
  const auto& mp = params.mainloop;
  const typename K::Block blk = K::block(params);
  const typename Mainloop::SeqInfo si = Mainloop::seq_info(mp, blk.batch);
  const auto range = Mainloop::query_range(si, blk.n_block);
  if (range.m_begin >= range.m_end) return;  // no query sees these keys: nothing to load
  const typename Mainloop::Loader loader{mp, ss, blk.kv_head, si};
  PipelineState st = cutlass::make_producer_start_state<Pipeline>();
  if (cute::elect_one_sync()) loader.load_kv(blk.n_block);
  // K and V are inputs; the rows' lse and D (loaded with Q and dO) come from the preprocess, which
  // may still be running (programmatic launch): wait for it only now.
  wait_for_primary_grid();
  const int steps = range.m_end - range.m_begin, start = K::walk_start(params, blk, steps);
  const typename K::WalkSpan span = K::walk_span(params, blk, steps);
  for (int g = 0; g < mp.group; ++g) {
    const int head = blk.kv_head * mp.group + g;
    for (int j = span.first; j < span.last; ++j) {
      const int m = K::walk_block(range.m_begin, steps, start, j);
      if (cute::elect_one_sync()) {
        loader.load_rows(pipe_q, st, mp.tma_q, ss.q.data(), mp.tma_lse, ss.lse.data(), head, m);
        loader.load_rows(pipe_do, st, mp.tma_do, ss.dout.data(), mp.tma_dpsum, ss.dpsum.data(), head, m);
      }
      __syncwarp();
      ++st;
    }
  }
  // Keep the producer alive until the consumers have released every stage it filled.
  if (cute::elect_one_sync()) {
    pipe_q.producer_tail(st);
    pipe_do.producer_tail(st);
  }
  __syncwarp();
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kNumThreads, 1)
    bwd_kernel(const __grid_constant__ typename BwdKernel<Cfg>::Params params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using K = BwdKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using Pipeline = typename Mainloop::Pipeline;
  using namespace cute;

  const uint64_t trace_start = params.trace.records != nullptr ? trace_clock() : 0;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K::SharedStorage*>(smem_raw);
  const auto& mp = params.mainloop;
  const int warp_group = cutlass::canonical_warp_group_idx();

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(mp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_v.get_tma_descriptor());
    cutlass::arch::ClusterTransactionBarrier::init(&ss.barrier_kv, 1);
  }
  typename Pipeline::Params pipe_params;
  pipe_params.transaction_bytes = Mainloop::kQBytes;
  pipe_params.role = warp_group == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;
  pipe_params.num_consumers = Cfg::kNumMmaThreads;
  Pipeline pipe_q(ss.pipe_q, pipe_params, Shape<_1, _1, _1>{});
  Pipeline pipe_do(ss.pipe_do, pipe_params, Shape<_1, _1, _1>{});
  __syncthreads();  // barrier inits visible before anyone waits on them

  // Programmatic launch (bwd_launch.cuh): the postprocess may be scheduled once every CTA of this
  // grid has started; it waits for the grid's end. Every thread waits for the preprocess (the
  // producer warp after its K/V loads) before touching the workspace rows, and before exiting: a
  // grid whose threads all exited without waiting could complete ahead of the preprocess.
  launch_dependents();
  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Cfg::kProducerRegs>();
    const int warp = cutlass::canonical_warp_idx_sync() % 4;
    if (warp != 0) wait_for_primary_grid();
    if (warp == 0) {
      produce<Cfg>(params, ss, pipe_q, pipe_do);
      wait_for_primary_grid();  // produce() returns early, before its wait, when no query sees these keys
    }
    if constexpr (!Cfg::kSplitHeadDim) {
      if (warp == 1) write_dq<Cfg>(params, ss);  // the key split's dQ bulk adds
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Cfg::kConsumerRegs>();
    wait_for_primary_grid();
    const int thread_idx = threadIdx.x - 128;
    if constexpr (Cfg::kSplitHeadDim) {
      consume_head_split<Cfg>(params, ss, pipe_q, pipe_do, thread_idx);
    } else {
      consume_key_split<Cfg>(params, ss, pipe_q, pipe_do, thread_idx);
    }
    if (thread_idx == 0) trace_cta(params.trace, 0, trace_start);  // the consumers' end, roughly the CTA's
  }
#endif
}

}  // namespace hopattn::sm90::bwd
