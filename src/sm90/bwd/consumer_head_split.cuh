// The consumer warpgroups of the head_dim-split backward (head_dim 256), for a CTA of 64 keys.
// Per step of 64 queries:
//   warpgroup 0: S^T = K Q^T, P^T = exp2(...), P^T -> smem  |  warpgroup 1: dP^T = V dO^T
//   both: dV[:, half] += P^T dO[:, half]                    |  warpgroup 1: P^T <- smem,
//                                                           |    dS^T = P^T (dP^T - D) -> smem
//   both: dQ[:, half] = dS K[:, half], dK[:, half] += dS^T Q[:, half]; dQ staged in the halves of
//         this step's Q and dO buffers that only this warpgroup read (the dO half while dK still
//         runs), then bulk reduce-added.
// Each warpgroup holds dK and dV for its half of head_dim (2 x 64 fp32 per thread), the most that
// fits beside the 32-value score tile and the 64-value dQ tile. The two score GEMMs are each one
// full 64 x 64 x 256 tile (N = 64 keeps shared-memory reads per FLOP at the d128 kernel's level;
// splitting them by queries would make both warpgroups read all of K and V for N = 32 each).
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
__device__ __forceinline__ void consume_head_split(const typename BwdKernel<Cfg>::Params& params,
                                                   typename BwdKernel<Cfg>::SharedStorage& ss,
                                                   typename BwdKernel<Cfg>::Mainloop::Pipeline& pipe_q,
                                                   typename BwdKernel<Cfg>::Mainloop::Pipeline& pipe_do, int thread_idx) {
  using K = BwdKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using PipelineState = typename Mainloop::PipelineState;
  using Element = typename Cfg::Element;
  using namespace cute;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
  constexpr int kTileElems = kBlockN * kBlockM;  // one P^T or dS^T buffer
  using BM = Int<kBlockM>;
  using BN = Int<kBlockN>;
  using HD = Int<kHeadDim>;
  const auto& mp = params.mainloop;
  const typename K::Block blk = K::block(params);
  const typename Mainloop::SeqInfo si = Mainloop::seq_info(mp, blk.batch);
  const auto range = Mainloop::query_range(si, blk.n_block);
  const bool score_side = thread_idx < 128;  // warpgroup 0: S^T and P^T; warpgroup 1: dP^T and dS^T
  const int wg_thread = thread_idx % 128;

  typename Mainloop::TiledMmaSdP mma_sdp;  // one warpgroup's GEMM: sliced by the warpgroup-local index
  typename Mainloop::TiledMmadKV mma_dkv;
  typename Mainloop::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(wg_thread);
  typename Mainloop::TiledMmadKVSmemA mma_dkv_smem;  // dK, and warpgroup 1's dV
  auto thr_dkv = mma_dkv.get_thread_slice(thread_idx);
  auto thr_dq = mma_dq.get_thread_slice(thread_idx);

  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<BN, HD>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<BN, HD>{});
  clear(tdVrdV);
  clear(tdKrdK);

  if (range.m_begin < range.m_end) {
    typename Mainloop::template Operands<decltype(thr_sdp), decltype(thr_dkv), decltype(thr_dq)> op(ss, thr_sdp, thr_dkv, thr_dq);
    // dK takes dS^T from shared memory, and warpgroup 1's dV P^T (warpgroup 0's takes it from registers).
    auto thr_dkv_smem = mma_dkv_smem.get_thread_slice(thread_idx);
    Tensor tdKrdSt = thr_dkv_smem.partition_fragment_A(Mainloop::template smem<typename Mainloop::SmemLayoutdSt>(ss.ds.data()));
    Tensor tdVrPt = thr_dkv_smem.partition_fragment_A(Mainloop::template smem<typename Mainloop::SmemLayoutdSt>(ss.p.data()));
    Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BN, BM>{}));
    auto c_rc = ws::acc_rowcol(tScS);
    // P^T / dS^T between accumulator fragments and the swizzled tiles: stmatrix out, ldmatrix back
    // (8x8 16-bit tiles in accumulator order, the transfer the forward epilogue uses for O).
    auto store_tile = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
    auto load_tile = make_tiled_copy_C(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma_sdp);
    auto thr_store = store_tile.get_thread_slice(wg_thread);
    auto thr_load = load_tile.get_thread_slice(wg_thread);
    auto tile_buf = [&](Element* base, int buf) {
      return make_tensor(make_smem_ptr(base + buf * kTileElems), take<0, 2>(typename Mainloop::SmemLayoutdSt{}));
    };

    // Key j visible to query i iff i + lo_offset <= j <= i + hi_offset (masked kernels).
    const int lo_offset = si.seqlen_k - si.seqlen_q - si.left, hi_offset = si.seqlen_k - si.seqlen_q + si.right;
    const int key0 = blk.n_block * kBlockN;
    PipelineState st;
    int buf = 0;
    // A step's Q and dO stage goes back to the producer only once the bulk reduce-add of the dQ
    // staged in it has read it, which is checked early in the next step (hidden under its first GEMM).
    PipelineState staged_st;
    bool staged = false;
    auto release_staged = [&] {
      if (!staged) return;
      if (wg_thread == 0) tma_store_wait<0>();  // the signalling thread of this warpgroup's release
      pipe_q.consumer_release(staged_st);
      pipe_do.consumer_release(staged_st);
      staged = false;
    };
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_kv, 0);

    const int steps = range.m_end - range.m_begin, start = K::walk_start(params, blk, steps);
    const typename K::WalkSpan span = K::walk_span(params, blk, steps);
    for (int g = 0; g < mp.group; ++g) {
      const int head = blk.kv_head * mp.group + g;
      for (int j = span.first; j < span.last; ++j) {
        const int m = K::walk_block(range.m_begin, steps, start, j);
        Tensor tSrS = partition_fragment_C(mma_sdp, Shape<BN, BM>{});  // S^T, or dP^T on warpgroup 1
        // P^T (warpgroup 1: then dS^T) as 16-bit values: in the A-operand view for warpgroup 0's dV
        // GEMM (A from registers), and the same registers in accumulator order for stmatrix / ldmatrix.
        Tensor tPrP = cute::make_tensor<Element>(ws::acc_to_a_operand_layout(tSrS.layout()));
        Tensor tPrP_acc = make_tensor(tPrP.data(), tSrS.layout());
        Tensor tdKrdSt_buf = tdKrdSt(_, _, _, buf);  // wgmma_issue takes its A operand by reference
        Tensor tdVrPt_buf = tdVrPt(_, _, _, buf);
        Tensor tdQrdS_buf = op.dq_a(_, _, _, buf);
        if (score_side) {
          pipe_q.consumer_wait(st);
          ws::wgmma_issue<true>(mma_sdp, op.k, op.q(_, _, _, st.index()), tSrS);
          release_staged();
          warpgroup_wait<0>();
          scores_to_probs<Cfg::kCausal, Cfg::kLocal, Cfg::kSoftcap>(tSrS, tScS, op.lse(_, st.index()), key0, m * kBlockM,
                                                                    si.seqlen_k, lo_offset, hi_offset,
                                                                    Mainloop::step_needs_mask(si, blk.n_block, m),
                                                                    mp.scale_log2, mp.softcap);
          ws::convert_fragment(tSrS, tPrP);
          copy(store_tile, thr_store.retile_S(tPrP_acc), thr_store.partition_D(tile_buf(ss.p.data(), buf)));
          cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> ldmatrix and WGMMA reads
          cutlass::arch::NamedBarrier::arrive(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kPReady));
          pipe_do.consumer_wait(st);
          ws::wgmma_issue<false>(mma_dkv, tPrP, op.dout_t(_, _, _, st.index()), tdVrdV);
          cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kdSReady));
        } else {
          pipe_do.consumer_wait(st);
          ws::wgmma_issue<true>(mma_sdp, op.v, op.dout(_, _, _, st.index()), tSrS);
          release_staged();
          warpgroup_wait<0>();
          cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kPReady));
          // dV first, so the tensor cores work while dS^T is formed. P^T comes back as the 16-bit
          // values the dV GEMM uses (dS^T = P^T (dP^T - D) then carries P's bf16/fp16 rounding,
          // well inside the 16-bit rounding dS^T itself gets before its GEMMs).
          ws::wgmma_issue<false>(mma_dkv_smem, tdVrPt_buf, op.dout_t(_, _, _, st.index()), tdVrdV);
          copy(load_tile, thr_load.partition_S(tile_buf(ss.p.data(), buf)), thr_load.retile_D(tPrP_acc));
          auto dp_rc = ws::acc_rowcol(tSrS);
          auto p_rc = ws::acc_rowcol(tPrP_acc);
          CUTE_UNROLL
          for (int c = 0; c < size<1>(dp_rc); ++c) {
            const float d = op.dpsum(get<1>(c_rc(0, c)), st.index());
            CUTE_UNROLL
            for (int r = 0; r < size<0>(dp_rc); ++r) dp_rc(r, c) = static_cast<float>(p_rc(r, c)) * (dp_rc(r, c) - d);
          }
          if constexpr (Cfg::kSoftcap) {  // dS^T *= 1 - tanh^2 (softcap_grad), t from the 16-bit P
            CUTE_UNROLL
            for (int c = 0; c < size<1>(dp_rc); ++c) {
              const float lse = op.lse(get<1>(c_rc(0, c)), st.index());
              CUTE_UNROLL
              for (int r = 0; r < size<0>(dp_rc); ++r)
                dp_rc(r, c) *= softcap_grad(static_cast<float>(p_rc(r, c)), lse, mp.softcap_t);
            }
          }
          // Into P^T's registers: warpgroup 1's dV reads P^T from shared memory, not from them.
          ws::convert_fragment(tSrS, tPrP_acc);
          copy(store_tile, thr_store.retile_S(tPrP_acc), thr_store.partition_D(tile_buf(ss.ds.data(), buf)));
          cutlass::arch::fence_view_async_shared();
          cutlass::arch::NamedBarrier::arrive(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kdSReady));
          pipe_q.consumer_wait(st);
        }
        // dV done before dQ and dK are issued. Warpgroup 0 needs it: P^T's registers must be free by
        // then (with them live, ptxas serialises every WGMMA for want of registers, C7512).
        // Warpgroup 1's dV reads shared memory, but it waits as well (the order measured, v15).
        // Either ran under the dS^T phase, so this rarely waits.
        warpgroup_wait<0>();
        // dQ before dK, so that half of dQ is staged while dK runs (below).
        Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<BM, HD>{});
        ws::wgmma_issue<true>(mma_dq, tdQrdS_buf, op.dq_b, tdQrdQ);
        ws::wgmma_issue<false>(mma_dkv_smem, tdKrdSt_buf, op.q_t(_, _, _, st.index()), tdKrdK);

        // dQ (unscaled) into the fp32 accumulator. Staged in fragment order (Mainloop::dq_offset)
        // into the halves of this stage's Q and dO (columns of this warpgroup's head_dim half: the
        // other warpgroup's dK and dV GEMMs read only its own half, and the full-width S^T / dP^T
        // reads finished before the P / dS barriers), then two 16 KB bulk reduce-adds: vector
        // reduce-adds from every thread measured at half the speed (L2 atomic throughput).
        // Chunk 1 goes into the dO half as soon as dV and dQ are done (WGMMA groups complete in
        // issue order), under the dK GEMM; chunk 0 into the Q half only after dK, which reads it.
        const int wg = thread_idx / 128;
        float* chunk[2] = {reinterpret_cast<float*>(ss.q.data() + st.index() * kBlockM * kHeadDim) + wg * Mainloop::kdQChunkElems,
                           reinterpret_cast<float*>(ss.dout.data() + st.index() * kBlockM * kHeadDim) + wg * Mainloop::kdQChunkElems};
        static_assert(Mainloop::kdQPerThread == 64 && Mainloop::kdQChunkElems * 2 * (int)sizeof(float) == kBlockM * kHeadDim * (int)sizeof(Element));
        auto stage_chunk = [&](int c) {
          CUTE_UNROLL
          for (int v = 32 * c; v < 32 * c + 32; v += 4) {
            *reinterpret_cast<float4*>(chunk[c] + Mainloop::dq_offset(wg_thread, v % 32)) =
                make_float4(tdQrdQ(v), tdQrdQ(v + 1), tdQrdQ(v + 2), tdQrdQ(v + 3));
          }
        };
        warpgroup_wait<1>();  // dQ done; dK still reads this warpgroup's Q half
        stage_chunk(1);
        warpgroup_wait<0>();  // dK done: the Q half is free
        stage_chunk(0);
        cutlass::arch::fence_view_async_shared();  // staged dQ visible to the bulk copy (async proxy)
        cutlass::arch::NamedBarrier::sync(128, barrier_id(BwdBarrier::kdQStagedWG0) + wg);
        const int64_t tile = K::dq_tile(params, si, head, m);
        int* sem = K::dq_semaphore(params, tile);
        if (wg_thread == 0) {
          float* dq = params.dq_accum + tile * Mainloop::kdQElems + wg * 2 * Mainloop::kdQChunkElems;
          if (params.deterministic) wait_turn(sem, K::dq_turn(params, blk, si, m));
          bulk_reduce_add_f32(dq, chunk[0], Mainloop::kdQChunkElems * sizeof(float));
          bulk_reduce_add_f32(dq + Mainloop::kdQChunkElems, chunk[1], Mainloop::kdQChunkElems * sizeof(float));
          tma_store_arrive();  // commit the bulk group
          if (params.deterministic) bulk_wait_complete();
        }
        if (params.deterministic) {  // both halves added: pass the turn
          cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kdQReady));
          if (thread_idx == 0) store_release(sem, K::dq_turn(params, blk, si, m) + 1);
        }
        staged_st = st;
        staged = true;
        ++st;
        buf ^= 1;
      }
    }
    release_staged();  // the producer's tail waits for every stage; smem must outlive the bulk reads
  }
  // A piece that is not its unit's last counts itself done (its dQ adds) and leaves the store to the last.
  if (blk.piece >= 0 && !add_tail_piece<Cfg>(params, blk, tdKrdK, tdVrdV, ss, thread_idx)) {
    count_dq_done<Cfg>(params, blk, wg_thread == 0, thread_idx);
    return;
  }
  store_dk_dv<Cfg>(params, blk, si, thr_dkv, tdKrdK, tdVrdV, ss, thread_idx);
  count_dq_done<Cfg>(params, blk, wg_thread == 0, thread_idx);  // the bulk adds are wg_thread 0's
}

}  // namespace hopattn::sm90::bwd
