// The consumer warpgroups of the key-split backward (head_dim 64, 128): each of the two owns 64 of
// the CTA's 128 keys for every GEMM of a step, so S^T, dP^T, P^T and dS^T never leave its
// registers except dS^T, which both need for dQ = dS K (each computing half of head_dim).
#pragma once

#include "sm90/bwd/config.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/bwd/kernel_common.cuh"
#include "sm90/bwd/mainloop.cuh"
#include "sm90/ws/fragment_layout.cuh"

namespace hopattn::sm90::bwd {

template <class Cfg>
__device__ __forceinline__ void consume_key_split(const typename BwdKernel<Cfg>::Params& params,
                                                  typename BwdKernel<Cfg>::SharedStorage& ss,
                                                  typename BwdKernel<Cfg>::Mainloop::Pipeline& pipe_q,
                                                  typename BwdKernel<Cfg>::Mainloop::Pipeline& pipe_do, int thread_idx) {
  using K = BwdKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using PipelineState = typename Mainloop::PipelineState;
  using Element = typename Cfg::Element;
  using namespace cute;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
  using BM = Int<kBlockM>;
  using BN = Int<kBlockN>;
  using HD = Int<kHeadDim>;
  const auto& mp = params.mainloop;
  const typename K::Block blk = K::block(params);
  const typename Mainloop::SeqInfo si = Mainloop::seq_info(mp, blk.batch);
  const auto range = Mainloop::query_range(si, blk.n_block);

  typename Mainloop::TiledMmaSdP mma_sdp;
  typename Mainloop::TiledMmadKV mma_dkv;
  typename Mainloop::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(thread_idx);
  auto thr_dkv = mma_dkv.get_thread_slice(thread_idx);
  auto thr_dq = mma_dq.get_thread_slice(thread_idx);

  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<BN, HD>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<BN, HD>{});
  clear(tdVrdV);
  clear(tdKrdK);

  if (range.m_begin < range.m_end) {
    typename Mainloop::template Operands<decltype(thr_sdp), decltype(thr_dkv), decltype(thr_dq)> op(ss, thr_sdp, thr_dkv, thr_dq);
    Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BN, BM>{}));
    auto c_rc = ws::acc_rowcol(tScS);

    // Key j visible to query i iff i + lo_offset <= j <= i + hi_offset (masked kernels).
    const int lo_offset = si.seqlen_k - si.seqlen_q - si.left, hi_offset = si.seqlen_k - si.seqlen_q + si.right;
    const int key0 = blk.n_block * kBlockN;
    PipelineState st;
    int ds_buf = 0;
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_kv, 0);

    for (int g = 0; g < mp.group; ++g) {
      const int head = blk.kv_head * mp.group + g;
      for (int m = range.m_begin; m < range.m_end; ++m) {
        Tensor tSrS = partition_fragment_C(mma_sdp, Shape<BN, BM>{});
        Tensor tdPrdP = partition_fragment_C(mma_sdp, Shape<BN, BM>{});
        pipe_q.consumer_wait(st);
        ws::wgmma_issue<true>(mma_sdp, op.k, op.q(_, _, _, st.index()), tSrS);
        pipe_do.consumer_wait(st);
        ws::wgmma_issue<true>(mma_sdp, op.v, op.dout(_, _, _, st.index()), tdPrdP);
        warpgroup_wait<1>();  // S^T done; dP^T may still run

        scores_to_probs<Cfg::kCausal, Cfg::kLocal, Cfg::kSoftcap>(tSrS, tScS, op.lse(_, st.index()), key0, m * kBlockM,
                                                                  si.seqlen_k, lo_offset, hi_offset,
                                                                  Mainloop::step_needs_mask(si, blk.n_block, m),
                                                                  mp.scale_log2, mp.softcap);
        warpgroup_wait<0>();  // dP^T done
        // dS^T = P^T * (dP^T - D), in place of dP^T.
        auto s_rc = ws::acc_rowcol(tSrS);
        auto dp_rc = ws::acc_rowcol(tdPrdP);
        CUTE_UNROLL
        for (int c = 0; c < size<1>(dp_rc); ++c) {
          const float d = op.dpsum(get<1>(c_rc(0, c)), st.index());
          CUTE_UNROLL
          for (int r = 0; r < size<0>(dp_rc); ++r) dp_rc(r, c) = s_rc(r, c) * (dp_rc(r, c) - d);
        }
        if constexpr (Cfg::kSoftcap) {  // dS^T *= 1 - tanh^2 (softcap_grad)
          CUTE_UNROLL
          for (int c = 0; c < size<1>(dp_rc); ++c) {
            const float lse = op.lse(get<1>(c_rc(0, c)), st.index());
            CUTE_UNROLL
            for (int r = 0; r < size<0>(dp_rc); ++r) dp_rc(r, c) *= softcap_grad(s_rc(r, c), lse, mp.softcap_t);
          }
        }

        // FlashAttention-3's order: dS^T to shared memory first, then dV += P^T dO (A from registers)
        // runs under the fence and the dS barrier; dQ = dS K (or dQ^T = K^T dS^T) over both
        // warpgroups' keys, each warpgroup computing half of head_dim; then dK += dS^T Q (A from
        // registers), and the dQ staging runs under dK. dS^T goes to shared memory with stmatrix (8x8
        // 16-bit tiles in accumulator order, transposing when the keys are the contiguous mode,
        // kdQSwapAB). The fence makes the stores visible to the WGMMA's shared-memory reads; the
        // barrier makes both warpgroups' halves of dS^T complete.
        Tensor tPrP = cute::make_tensor<Element>(ws::acc_to_a_operand_layout(tSrS.layout()));
        ws::convert_fragment(tSrS, tPrP);
        Tensor tdSrdS = cute::make_tensor<Element>(ws::acc_to_a_operand_layout(tdPrdP.layout()));
        ws::convert_fragment(tdPrdP, tdSrdS);
        {
          Tensor tdSrdS_acc = make_tensor(tdSrdS.data(), tdPrdP.layout());
          Tensor sdSt_buf = make_tensor(make_smem_ptr(ss.ds.data() + ds_buf * (kBlockN * kBlockM)),
                                        take<0, 2>(typename Mainloop::SmemLayoutdSt{}));
          using StoreAtom = std::conditional_t<Mainloop::kdQSwapAB, SM90_U16x8_STSM_T, SM90_U32x4_STSM_N>;
          auto smem_copy = make_tiled_copy_C(Copy_Atom<StoreAtom, Element>{}, mma_sdp);
          auto thr_copy = smem_copy.get_thread_slice(thread_idx);
          copy(smem_copy, thr_copy.retile_S(tdSrdS_acc), thr_copy.partition_D(sdSt_buf));
        }
        ws::wgmma_issue<false>(mma_dkv, tPrP, op.dout_t(_, _, _, st.index()), tdVrdV);
        cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> WGMMA (async proxy)
        cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kdSReady));
        Tensor tdQrdQ = partition_fragment_C(mma_dq, typename Mainloop::dQTileShape{});
        if constexpr (Mainloop::kdQSwapAB) {
          Tensor tdQrdS_buf = op.dq_b(_, _, _, ds_buf);
          ws::wgmma_issue<true>(mma_dq, op.dq_a, tdQrdS_buf, tdQrdQ);
        } else {
          Tensor tdQrdS_buf = op.dq_a(_, _, _, ds_buf);
          ws::wgmma_issue<true>(mma_dq, tdQrdS_buf, op.dq_b, tdQrdQ);
        }
        ws::wgmma_issue<false>(mma_dkv, tdSrdS, op.q_t(_, _, _, st.index()), tdKrdK);
        warpgroup_wait<1>();  // dV and dQ done (dK may run): dO of this stage is no longer read
        pipe_do.consumer_release(st);

        // dQ (unscaled) into the fp32 accumulator: staged in fragment order, then one bulk
        // reduce-add per warpgroup half of the tile (the L2 does the adds at line rate; per-element
        // atomics from every thread were the bottleneck), issued by the dQ writer warp (write_dq) so
        // that the consumers only arrive and go on to the next step. A warpgroup's half is free once
        // the writer's previous bulk add has read it (kdQEmptyWG0 + wg); the warpgroups do not meet
        // here, only at kdSReady.
        static_assert(Mainloop::kdQPerThread % 4 == 0);
        const int wg = thread_idx / 128;
        cutlass::arch::NamedBarrier::sync(128 + 32, barrier_id(BwdBarrier::kdQEmptyWG0) + wg);
        CUTE_UNROLL
        for (int j = 0; j < Mainloop::kdQPerThread / 4; ++j) {
          *reinterpret_cast<float4*>(ss.dq.data() + Mainloop::dq_offset(thread_idx, 4 * j)) =
              make_float4(tdQrdQ(4 * j), tdQrdQ(4 * j + 1), tdQrdQ(4 * j + 2), tdQrdQ(4 * j + 3));
        }
        cutlass::arch::fence_view_async_shared();  // staged dQ visible to the bulk copy (async proxy)
        cutlass::arch::NamedBarrier::arrive(128 + 32, barrier_id(BwdBarrier::kdQFullWG0) + wg);
        warpgroup_wait<0>();  // dK done: Q of this stage is no longer read
        pipe_q.consumer_release(st);
        ++st;
        ds_buf ^= 1;
      }
    }
  }

  store_dk_dv<Cfg>(params, blk, si, thr_dkv, tdKrdK, tdVrdV, ss, thread_idx);
}

// The dQ writer warp of the key split (a producer-warpgroup warp): for every step the consumers
// run, it waits for each warpgroup's staged half of dQ (kdQFullWG0 + wg), adds it to the fp32
// accumulator with one bulk reduce-add, and hands that half back (kdQEmptyWG0 + wg) once the add
// has read it. The consumers arrive and sync on those barriers instead of meeting each other there.
// The accumulator is not zeroed (dq_first_store): the tile's first partial is stored, the others
// wait for that store to land before adding. Deterministic mode: key blocks take turns per query
// block in a fixed order (BwdKernel::dq_turn), so the fp32 sums are too, and turn 0 stores. Both
// waits stall this warp only; the consumers need a half back one step later.
template <class Cfg>
__device__ __forceinline__ void write_dq(const typename BwdKernel<Cfg>::Params& params,
                                         typename BwdKernel<Cfg>::SharedStorage& ss) {
  using K = BwdKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using cute::tma_store_arrive, cute::tma_store_wait;
  const auto& mp = params.mainloop;
  const typename K::Block blk = K::block(params);
  const typename Mainloop::SeqInfo si = Mainloop::seq_info(mp, blk.batch);
  const auto range = Mainloop::query_range(si, blk.n_block);
  if (range.m_begin >= range.m_end) return;  // the consumers run no step either
  const bool leader = cute::elect_one_sync();
  constexpr unsigned kThreads = 128 + 32;  // one consumer warpgroup and this warp
  constexpr int kHalf = Mainloop::kdQElems / 2;
  constexpr uint32_t kHalfBytes = kHalf * sizeof(float);
  const unsigned full0 = barrier_id(BwdBarrier::kdQFullWG0), empty0 = barrier_id(BwdBarrier::kdQEmptyWG0);
  cutlass::arch::NamedBarrier::arrive(kThreads, empty0);  // both halves start free
  cutlass::arch::NamedBarrier::arrive(kThreads, empty0 + 1);
  for (int g = 0; g < mp.group; ++g) {
    const int head = blk.kv_head * mp.group + g;
    for (int m = range.m_begin; m < range.m_end; ++m) {
      const int64_t tile = K::dq_tile(params, si, head, m);
      int* sem = K::dq_semaphore(params, tile);
      float* dst = params.dq_accum + tile * Mainloop::kdQElems;
      bool first = false;  // this block stores the tile's first partial (both halves)
      int turn = 0;
      // No hand-back after the last step: every arrive has a matching consumer sync.
      const bool hand_back = g + 1 < mp.group || m + 1 < range.m_end;
      CUTE_UNROLL
      for (int w = 0; w < 2; ++w) {
        cutlass::arch::NamedBarrier::sync(kThreads, full0 + w);
        if (leader) {
          if (w == 0) {
            if (params.deterministic) {
              turn = K::dq_turn(params, blk, si, m);
              wait_turn(sem, turn);
              first = turn == 0 && params.dq_first_store;
            } else {
              first = params.dq_first_store && take_dq_ticket(sem);
            }
          }
          if (first) {
            bulk_store_f32(dst + w * kHalf, ss.dq.data() + w * kHalf, kHalfBytes);
          } else {
            bulk_reduce_add_f32(dst + w * kHalf, ss.dq.data() + w * kHalf, kHalfBytes);
          }
          tma_store_arrive();  // commit the bulk group
        }
      }
      // Half 0's group was committed first, so it is read first: hand it back before half 1's wait.
      if (leader) tma_store_wait<1>();
      __syncwarp();
      if (hand_back) cutlass::arch::NamedBarrier::arrive(kThreads, empty0);
      if (leader) {
        if (params.deterministic) {
          bulk_wait_complete();  // the adds are done in global memory, not only read from smem
        } else {
          tma_store_wait<0>();  // read from shared memory: the half may be restaged
        }
      }
      __syncwarp();
      if (hand_back) cutlass::arch::NamedBarrier::arrive(kThreads, empty0 + 1);
      if (leader) {
        if (params.deterministic) {
          store_release(sem, turn + 1);
        } else if (first) {  // after the hand-back: the consumers need not wait for the store's global writes
          bulk_wait_complete();
          publish_dq_store(sem);
        }
      }
    }
  }
}

}  // namespace hopattn::sm90::bwd
