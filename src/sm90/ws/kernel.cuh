// The warp-specialised forward kernel: warpgroup 0 is the producer (one warp issues every TMA load,
// registers given away with setmaxnreg), warpgroups 1.. are consumers that each own 64 query rows
// of the tile. Both sides walk the same tile sequence: static, one tile (flattened grid) or many, or
// for packed batches drawn by the producer and handed to the consumers (VarlenTileScheduler).
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/ws/cluster_arrive.cuh"
#include "sm90/ws/epilogue.cuh"
#include "sm90/ws/mainloop.cuh"
#include "sm90/ws/named_barriers.hpp"
#include "sm90/ws/tail_split.cuh"
#include "sm90/ws/tile_scheduler.hpp"
#include "sm90/ws/warp_uniform.cuh"

#ifndef HOPATTN_FWD_TRACE  // 1: per-tile timestamps (ws/trace.cuh), for measuring builds only
#define HOPATTN_FWD_TRACE 0
#endif
#if HOPATTN_FWD_TRACE
#include "sm90/ws/trace.cuh"
#endif

namespace hopattn::sm90::ws {

template <class Cfg>
struct FwdWsKernel {
  using Mainloop = FwdMainloop<Cfg>;
  using Epilogue = FwdEpilogue<Cfg, Mainloop>;
  static_assert(!Cfg::kVarlen || Cfg::kPersistent, "varlen tiles are found by the persistent CTAs themselves");
  // The packed kernels that may draw tiles from a counter: those whose tiles are not folded by
  // default (heuristics::causal_fold_order folds 128-row tiles), i.e. d64's 192-row tiles, FP8,
  // or 16-bit and causal, without a run-time window or softcap. The others carry none of that
  // code: it cost the d128/d256 FP8 varlen kernels 20-80 more bytes of spills, and the 16-bit d64
  // non-causal one 4 LDL/STL per key block, which lost more (uniform mix +10%) than the order won.
  static constexpr bool kDynamicOrder =
      Cfg::kVarlen && Cfg::kBlockM != 128 && !Cfg::kLocal && (Cfg::kFp8 || Cfg::kCausalMask);
  // Rotated rounds (round_rotation.hpp) where the tiles of a head differ in cost without a mask:
  // 192-row tiles, whose last query block idles its padding warpgroups (Mainloop::kIdlePadding).
  static constexpr bool kRotateRounds = Mainloop::kIdlePadding && !Cfg::kCausalMask && Cfg::kPersistent;
  using Scheduler = std::conditional_t<
      Cfg::kVarlen, VarlenTileScheduler<Cfg::kCausalMask, Cfg::kBlockM, kDynamicOrder>,
      StaticTileScheduler<Cfg::kCausalMask, Cfg::kPersistent, Cfg::kSnake, Cfg::kTailSplit, kRotateRounds>>;
  // O in V's buffer with a cluster: the next tile's V reaches this CTA's buffer from both CTAs'
  // producers (multicast), so each producer must wait for both CTAs' O stores, not only its own
  // (kOutputStored is a CTA-local named barrier). An mbarrier per CTA takes one arrival from every
  // consumer warpgroup of the cluster, as FlashAttention-3's barrier_O does.
  static constexpr bool kClusterOInV = Cfg::kClusterM > 1 && Cfg::kOInV;
  struct ClusterOInVStorage : Mainloop::SharedStorage {
    uint64_t barrier_o;  // ClusterBarrier: every CTA's O store has read its V buffer
  };
  using SharedStorage = std::conditional_t<kClusterOInV, ClusterOInVStorage, typename Mainloop::SharedStorage>;
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    TileOrder<Cfg::kCausalMask> order;
#if HOPATTN_FWD_TRACE
    bwd::BwdTrace trace;
#endif
  };
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kNumThreads, 1)
    fwd_ws_kernel(const __grid_constant__ typename FwdWsKernel<Cfg>::Params params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using K = FwdWsKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using Pipeline = typename Mainloop::Pipeline;
  using PipelineState = typename Mainloop::PipelineState;
  using namespace cute;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename K::SharedStorage*>(smem_raw);
  const auto& mp = params.mainloop;

  const int warp_group = cutlass::canonical_warp_group_idx();

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(mp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.epilogue.tma_o.get_tma_descriptor());
    cutlass::arch::ClusterTransactionBarrier::init(&ss.barrier_q, 1);
    if constexpr (K::kDynamicOrder) K::Scheduler::init_slot(&ss.tile_slot, Cfg::kNumMmaThreads / 32);
    if constexpr (K::kClusterOInV) cutlass::arch::ClusterBarrier::init(&ss.barrier_o, Cfg::kClusterM * Cfg::kNumConsumerWG);
  }
  typename Pipeline::Params pipe_params;
  pipe_params.transaction_bytes = Mainloop::kKBytes;
  pipe_params.role = warp_group == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;  // the one thread that issues TMA
  pipe_params.num_consumers = Cfg::kNumMmaThreads;
  // With a cluster, a stage's empty barrier counts one arrival per consumer warpgroup of every CTA
  // that writes into it (both, by multicast), and each consumer warpgroup's release arrives on the
  // barriers of both CTAs; the full barrier expects the whole stage's bytes, both halves.
  using ClusterShape = Shape<Int<Cfg::kClusterM>, _1, _1>;
  Pipeline pipe_k(ss.pipe_k, pipe_params, ClusterShape{});
  pipe_params.transaction_bytes = Mainloop::kVBytes;  // FP8's kPv16: a 16-bit V stage is twice K's
  Pipeline pipe_v(ss.pipe_v, pipe_params, ClusterShape{});
  Mainloop::init_shared(mp, ss, threadIdx.x);
  // Barrier inits (and init_shared's writes) visible before anyone uses them: with a cluster, also to
  // the other CTA, whose multicasts and releases land on this CTA's barriers.
  if constexpr (Cfg::kClusterM > 1) cute::cluster_sync();
  else __syncthreads();

  // Nothing computed above may stay live across setmaxnreg: a register above the new budget
  // would be spilled around it. So each role builds its own scheduler and mask afterwards.
  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Cfg::kProducerRegs>();
    if (cutlass::canonical_warp_idx_sync() % 4 != 0) return;
    typename K::Scheduler sched{params.order};
    // elect.sync picks lane 0 (the warp is converged at every call), the thread named is_leader
    // above; electing rather than testing the lane id keeps TMA operands in uniform registers,
    // and re-electing at each use keeps the predicate out of the 24-register producer budget.
    // K and V run through separate pipelines with separate positions: with kKLead the K loads run
    // one block ahead of the V loads (the consumers need K_{j-1} for the next S before V_j for
    // P V_j); both positions have advanced by the same count at the end of every tile. Only the
    // elected lane (always lane 0: the warp is converged at every election) issues loads and
    // advances the positions; the other lanes' copies are never read.
    PipelineState st_k = cutlass::make_producer_start_state<Pipeline>();
    PipelineState st_v = st_k;
    // The Q buffer handshake counts tiles with keys only: consumers release Q once per such tile,
    // and the producer waits for that release (`pending`) before loading the next tile's Q. Tiles
    // with no visible key touch neither Q nor shared memory (their zeros go straight to global
    // memory), so no warpgroup can run ahead through them and arrive twice on one barrier phase.
    bool pending = false;
    // O in V's buffer (Cfg::kOInV): the previous tile's O store must have read V's buffer before
    // this tile's first V load overwrites it. Counted like `pending`, over tiles with keys.
    bool pending_o = false;
    uint32_t o_phase = 0;  // kClusterOInV: barrier_o's phase, one per tile with keys
    auto wait_output_stored = [&](uint32_t& phase) {
      if constexpr (K::kClusterOInV) {
        cutlass::arch::ClusterBarrier::wait(&ss.barrier_o, phase);
        phase ^= 1u;
      } else {
        cutlass::arch::NamedBarrier::sync(kOutputStoredThreads, barrier_id(FwdBarrier::kOutputStored));
      }
    };
    int k = 0;
    for (int idx = sched.first(); sched.valid(idx); idx = sched.template next<true>(k, &ss.tile_slot), ++k) {
      // Varlen: the tile and its key-block range are warp-uniform but computed from per-lane
      // loads, so the compiler keeps them, the key loop's counter and its stage in vector
      // registers, with one more divergence region per key block. redux.sync moves them to
      // uniform registers (FP8 d64 packed/fixed 1.06-1.11 -> 1.05-1.08, docs/perf-notes.md).
      WorkTile t = sched.tile(idx);
      if constexpr (Cfg::kVarlen) t = WorkTile{warp_uniform(t.m_block), warp_uniform(t.head), warp_uniform(t.batch)};
      if (t.m_block < 0) continue;  // the empty half of a folded unit (tile_scheduler.hpp)
      const typename Mainloop::SeqInfo si = Mainloop::seq_info(mp, t.batch);
      const typename Mainloop::Mask mask = Mainloop::make_mask(mp, si);
      typename Mainloop::KeyBlocks kb = Mainloop::keyed_blocks(mask, si, t.m_block);
      if constexpr (Cfg::kVarlen) kb = {warp_uniform(kb.begin), warp_uniform(kb.end)};
      if constexpr (Cfg::kTailSplit) {
        // redux.sync: the piece's bounds come out of integer divisions, which ptxas keeps in vector
        // registers and then treats the key loop as divergent (BSSY/WARPSYNC in it at N = 160).
        if (t.piece >= 0) {
          kb = piece_key_blocks(params.order.split, kb, t.piece);
          kb = {warp_uniform(kb.begin), warp_uniform(kb.end)};
        }
      }
      const int n_end = kb.end, n_begin = kb.begin;
      const typename Mainloop::Loader loader{mp, ss, t.head, si};
      if (n_end > n_begin) {
        // The first K block does not depend on the Q buffer: issue it before waiting for the
        // previous tile's consumers to release that buffer.
        if (cute::elect_one_sync()) {
          loader.load_k(pipe_k, st_k, n_end - 1);
          ++st_k;
        }
        if (pending) cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads + 32, barrier_id(FwdBarrier::kQueryEmpty));
        pending = true;
        if constexpr (Cfg::kOInV) {
          // Q and the first K go out under the previous tile's epilogue (FlashAttention-3's order);
          // the V loads wait for its O to leave V's buffer.
          if (cute::elect_one_sync()) loader.load_q(t.m_block);
          __syncwarp();
          if (pending_o) wait_output_stored(o_phase);
          pending_o = true;
        }
        if (cute::elect_one_sync()) {
          if constexpr (!Cfg::kOInV) loader.load_q(t.m_block);
          if constexpr (Cfg::kKLead) {
            for (int n = n_end - 2; n >= n_begin; --n) {
              loader.load_k(pipe_k, st_k, n);
              ++st_k;
              loader.load_v(pipe_v, st_v, n + 1);
              ++st_v;
            }
            loader.load_v(pipe_v, st_v, n_begin);
            ++st_v;
          } else {
            loader.load_v(pipe_v, st_v, n_end - 1);
            ++st_v;
            for (int n = n_end - 2; n >= n_begin; --n) {
              loader.load_k(pipe_k, st_k, n);
              ++st_k;
              loader.load_v(pipe_v, st_v, n);
              ++st_v;
            }
          }
        }
        __syncwarp();
      }
    }
    // Take the consumers' release of the last Q, so no arrival is left pending at exit.
    if (pending) cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads + 32, barrier_id(FwdBarrier::kQueryEmpty));
    if constexpr (Cfg::kOInV) {
      if (pending_o) wait_output_stored(o_phase);
    }
    if constexpr (K::kDynamicOrder) sched.drain(k, &ss.tile_slot);
    // Keep the producer alive until the consumers have released every stage it filled. With a
    // cluster, for V too: the other CTA's consumers arrive on this CTA's barriers, which must not
    // have exited (its shared memory could belong to the next CTA on this SM by then).
    if (cute::elect_one_sync()) {
      pipe_k.producer_tail(st_k);
      if constexpr (Cfg::kClusterM > 1) pipe_v.producer_tail(st_v);
    }
    __syncwarp();
  } else {
    cutlass::arch::warpgroup_reg_alloc<Cfg::kConsumerRegs>();
    typename K::Scheduler sched{params.order};
    const int thread_idx = threadIdx.x - 128;
    const int wg = thread_idx / 128;
    typename Mainloop::TiledMmaPV mma_pv;
    Mainloop::fill_ones(ss, thread_idx);  // kNormOnTc only
    PipelineState st;
    uint32_t q_phase = 0;
    if constexpr (Cfg::kPingPong) {
      // The last warpgroup hands the first turn to warpgroup 0.
      if (wg == Cfg::kNumConsumerWG - 1) cutlass::arch::NamedBarrier::arrive(256, barrier_id(FwdBarrier::kGemmTurnWG0, 0));
    }
    int k = 0;
    for (int idx = sched.first(); sched.valid(idx); idx = sched.template next<false>(k, &ss.tile_slot), ++k) {
#if HOPATTN_FWD_TRACE
      const uint64_t trace_top = thread_idx == 0 ? bwd::trace_clock() : 0;  // the scheduler has answered
      uint64_t trace_marks[kFwdTraceMarks] = {0, 0, 0, 0};
#endif
      WorkTile t = sched.tile(idx);
      if constexpr (Cfg::kVarlen) t = WorkTile{warp_uniform(t.m_block), warp_uniform(t.head), warp_uniform(t.batch)};
      if (t.m_block < 0) continue;  // the empty half of a folded unit (tile_scheduler.hpp)
      const typename Mainloop::SeqInfo si = Mainloop::seq_info(mp, t.batch);
      if (Cfg::kVarlen && t.m_block * Cfg::kBlockM >= si.rows_q) continue;  // no rows: see keyed_blocks
      const typename Mainloop::Mask mask = Mainloop::make_mask(mp, si);
      typename Mainloop::KeyBlocks kb = Mainloop::keyed_blocks(mask, si, t.m_block);
      if constexpr (Cfg::kVarlen) kb = {warp_uniform(kb.begin), warp_uniform(kb.end)};
      if constexpr (Cfg::kTailSplit) {
        // redux.sync: the piece's bounds come out of integer divisions, which ptxas keeps in vector
        // registers and then treats the key loop as divergent (BSSY/WARPSYNC in it at N = 160).
        if (t.piece >= 0) {
          kb = piece_key_blocks(params.order.split, kb, t.piece);
          kb = {warp_uniform(kb.begin), warp_uniform(kb.end)};
        }
      }
      if (kb.end <= kb.begin) {
        // No visible key: O = 0 and lse = -inf, written without shared memory (see the producer).
        K::Epilogue::store_empty(params.epilogue, thread_idx, t.m_block, t.head, si);
        continue;
      }
      if constexpr (Mainloop::kIdlePadding && !HOPATTN_FWD_TRACE) {
        // Rows that are never stored: take the tile's turns and releases only (Mainloop::idle_tile).
        // A split tile's pieces merge per warpgroup (tail_split.cuh) and keep the full walk.
        bool piece = false;
        if constexpr (Cfg::kTailSplit) piece = t.piece >= 0;
        if (!piece && Mainloop::padding_warpgroup(si, t.m_block, cutlass::canonical_warp_group_idx() - 1)) {
          Mainloop::idle_tile(ss, pipe_k, pipe_v, st, q_phase, kb);
          q_phase ^= 1u;
          // The Q release the other warpgroups make after the tile (see below), without a store.
          if constexpr (!Cfg::kEarlyQ)
            Mainloop::release_query();
          continue;
        }
      }
#if HOPATTN_FWD_TRACE
      const uint64_t trace_start = thread_idx == 0 ? bwd::trace_clock() : 0;
#endif
      Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<Cfg::kBlockM>, Int<Cfg::kHeadDim>>{});
      typename Mainloop::Softmax softmax = Mainloop::make_softmax(mp, t.m_block, t.head, t.batch, wg);
      Mainloop::mma_tile(mp, ss, pipe_k, pipe_v, st, q_phase, thread_idx, mask, t.m_block, kb, tOrO, softmax
#if HOPATTN_FWD_TRACE
                         , trace_marks
#endif
      );
      q_phase ^= 1u;
      // Q is released once per tile with keys. With a separate O buffer as soon as no GEMM reads Q
      // any more: after the last S GEMM inside mma_tile (kEarlyQ), else here, before the epilogue.
      if constexpr (Cfg::kOOutsideQ && !Cfg::kEarlyQ)
        Mainloop::release_query();
      float lse[Mainloop::kRowsPerThread];
      auto o_rc = acc_rowcol(tOrO);
      softmax.finalize(o_rc, mp.scale, lse);
      if constexpr (Cfg::kSoftcapRecipScore) {  // the scores were -r, the capped ones softcap (1 - 2r)
        CUTE_UNROLL
        for (int r = 0; r < Mainloop::kRowsPerThread; ++r) lse[r] += 0.5f * mp.scale;  // + softcap; -inf stays
      }
      Mainloop::finish_o(mp, ss, o_rc, thread_idx);
      if constexpr (Cfg::kOInV) {
        // Both warpgroups read every V stage: O may overwrite V only once both last P Vs are done.
        // Unconditional, since a split tile's pieces may store from one warpgroup or none.
        static_assert(Cfg::kNumConsumerWG == 2, "kValueEmpty is the third warpgroup's epilogue id");
        cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(FwdBarrier::kValueEmpty));
      }
      // A piece of a split tile: only the warpgroup that merges the pieces stores (tail_split.cuh).
      bool store_o = true;
      if constexpr (Cfg::kTailSplit) {
        if (t.piece >= 0)
          store_o = merge_tail_pieces<Cfg::kNumMmaThreads>(params.order.split, t.split_tile, t.piece, thread_idx,
                                                           barrier_id(FwdBarrier::kEpilogueWG0, wg), o_rc, lse);
      }
#if HOPATTN_FWD_TRACE
      const uint64_t trace_pre_store = thread_idx == 0 ? bwd::trace_clock() : 0;  // finalize and syncs done
#endif
      if (store_o) K::Epilogue::store(params.epilogue, ss, thread_idx, t.m_block, t.head, si, tOrO, lse);
#if HOPATTN_FWD_TRACE
      if (thread_idx == 0)
        trace_fwd_tile(params.trace, kb.end - kb.begin, trace_top, trace_start, trace_marks, trace_pre_store);
#endif
      if constexpr (Cfg::kOInV) {
        // Every tile with keys arrives once, stored or not, as the producer counts. Only the
        // issuing thread (thread 0 of the warpgroup) can wait for its store's reads; its warp
        // arrives, and the other three warps go on to the next tile. The warp test goes through
        // canonical_warp_idx_sync (a shuffle), which ptxas knows is warp-uniform: with
        // `thread_idx % 128 < 32` it treated the tile loop as divergent and moved the key loop's
        // descriptor arithmetic out of uniform registers (60 more R2UR, BSSY/WARPSYNC in the loop).
        if (cutlass::canonical_warp_idx_sync() % 4 == 0) {
          if (thread_idx % 128 == 0) cute::tma_store_wait<0>();
          __syncwarp();
          if constexpr (K::kClusterOInV) {
            // Lane c arrives on CTA c's barrier.
            arrive_on_cta_if(&ss.barrier_o, threadIdx.x % 32, threadIdx.x % 32 < Cfg::kClusterM);
          } else {
            cutlass::arch::NamedBarrier::arrive(kOutputStoredThreads, barrier_id(FwdBarrier::kOutputStored));
          }
        }
      }
      if constexpr (!Cfg::kOOutsideQ) {
        // The Q/O buffer is free (the O store has read it): the producer may load the next Q.
        Mainloop::release_query();
      }
    }
    K::Epilogue::drain(thread_idx);
    if constexpr (Cfg::kPingPong) {
      // Consume the turn the last warpgroup passed after its final GEMMs, so no arrival is left
      // pending on the barrier when the CTA exits.
      if (wg == 0) cutlass::arch::NamedBarrier::sync(256, barrier_id(FwdBarrier::kGemmTurnWG0, 0));
    }
  }
#endif
}

}  // namespace hopattn::sm90::ws
