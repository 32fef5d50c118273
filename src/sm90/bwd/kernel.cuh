// The warp-specialised backward kernel: warpgroup 0 is the producer (one warp issues every TMA
// load, registers given away with setmaxnreg), warpgroups 1 and 2 are consumers that each own 64
// keys of the CTA's key block. One CTA per (key block, kv head, batch); it walks every query block
// of every query head in the GQA group that sees its keys, in the same order on both sides.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/bwd/mainloop.cuh"
#include "sm90/ws/fragment_layout.cuh"

namespace hopattn::sm90::bwd {

template <class Cfg>
struct BwdKernel {
  using Mainloop = BwdMainloop<Cfg>;
  using SharedStorage = typename Mainloop::SharedStorage;
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");

  struct Params {
    typename Mainloop::Params mainloop;
    float* dq_accum;  // (batch, heads_q, seqlen_q_padded, head_dim) fp32, zeroed by the preprocess
    int* semaphore;   // (batch, heads_q, m_blocks), zeroed by the preprocess; deterministic mode only
    void* dk;
    void* dv;
    int64_t dk_stride[3], dv_stride[3];
    float scale;
    int n_blocks;
    bool deterministic;
    bool key_blocks_inner;
  };

  struct Block {
    int n_block, kv_head, batch;
  };
  // key_blocks_inner: the key blocks of one (batch, kv head) run side by side, sharing that head's
  // Q, dO and dQ accumulator through L2. Otherwise (causal only) key block 0, which sees the most
  // query blocks, goes first across all heads: longest first, but every resident CTA streams a
  // different head's Q and dO.
  __device__ static Block block(const Params& p) {
    const int idx = int(blockIdx.x);
    const int heads_kv = p.mainloop.heads_kv;
    if (!p.key_blocks_inner) {
      const int per_n = heads_kv * p.mainloop.batch;
      return {idx / per_n, idx % heads_kv, (idx % per_n) / heads_kv};
    }
    const int rest = idx / p.n_blocks;
    return {idx % p.n_blocks, rest % heads_kv, rest / heads_kv};
  }
};

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Adds `bytes` of fp32 from shared memory into global memory, element-wise, as one asynchronous
// bulk operation (CuTe wraps only the tensor-map form of cp.reduce.async.bulk). Completes through
// the bulk-group mechanism: commit with tma_store_arrive, wait with tma_store_wait / bulk_wait_complete.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, const float* smem, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem),
               "r"(cute::cast_smem_ptr_to_uint(smem)), "r"(bytes)
               : "memory");
}
// Waits until every committed bulk group has completed its global writes (not only its smem
// reads), then orders them before this thread's later generic-proxy accesses.
__device__ __forceinline__ void bulk_wait_complete() {
  asm volatile("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;" ::: "memory");
}

// Writes one warpgroup's (keys, head_dim) gradient tile, times `scale`, rows past seqlen_k clipped.
// Adjacent column pairs leave as one 32-bit store.
template <class Element, class Frag, class Coords>
__device__ __forceinline__ void store_kv_grad(Element* base, int64_t row_stride, int key0, int seqlen_k, const Frag& acc,
                                              const Coords& coords, float scale) {
  using namespace cute;
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const int key = key0 + get<0>(coords(i));
    if (key < seqlen_k) {
      cutlass::Array<float, 2> v;
      v[0] = acc(i) * scale;
      v[1] = acc(i + 1) * scale;
      *reinterpret_cast<cutlass::Array<Element, 2>*>(base + key * row_stride + get<1>(coords(i))) =
          cutlass::NumericArrayConverter<Element, float, 2>{}(v);
    }
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kNumThreads, 1)
    bwd_kernel(const __grid_constant__ typename BwdKernel<Cfg>::Params params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using K = BwdKernel<Cfg>;
  using Mainloop = typename K::Mainloop;
  using Pipeline = typename Mainloop::Pipeline;
  using PipelineState = typename Mainloop::PipelineState;
  using Element = typename Cfg::Element;
  using namespace cute;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
  using BM = Int<kBlockM>;
  using BN = Int<kBlockN>;
  using HD = Int<kHeadDim>;

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

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Cfg::kProducerRegs>();
    if (cutlass::canonical_warp_idx_sync() % 4 != 0) return;
    const typename K::Block blk = K::block(params);
    const auto range = Mainloop::query_range(mp, blk.n_block);
    if (range.m_begin >= range.m_end) return;  // no query sees these keys: nothing to load
    const typename Mainloop::Loader loader{mp, ss, blk.kv_head, blk.batch};
    PipelineState st = cutlass::make_producer_start_state<Pipeline>();
    if (cute::elect_one_sync()) loader.load_kv(blk.n_block);
    for (int g = 0; g < mp.group; ++g) {
      const int head = blk.kv_head * mp.group + g;
      for (int m = range.m_begin; m < range.m_end; ++m) {
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
  } else {
    cutlass::arch::warpgroup_reg_alloc<Cfg::kConsumerRegs>();
    const typename K::Block blk = K::block(params);
    const auto range = Mainloop::query_range(mp, blk.n_block);
    const int thread_idx = threadIdx.x - 128;

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
      Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Mainloop::SmemLayoutK{});
      Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Mainloop::SmemLayoutK{});
      Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename Mainloop::SmemLayoutKt{});
      Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Mainloop::SmemLayoutQ{});
      Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename Mainloop::SmemLayoutQt{});
      Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename Mainloop::SmemLayoutQ{});
      Tensor sdOt = make_tensor(make_smem_ptr(ss.dout.data()), typename Mainloop::SmemLayoutQt{});
      Tensor sdS = make_tensor(make_smem_ptr(ss.ds.data()), typename Mainloop::SmemLayoutdS{});
      Tensor sLse = make_tensor(make_smem_ptr(ss.lse.data()), typename Mainloop::SmemLayoutRow{});
      Tensor sDpsum = make_tensor(make_smem_ptr(ss.dpsum.data()), typename Mainloop::SmemLayoutRow{});

      Tensor tSrK = thr_sdp.partition_fragment_A(sK);  // smem descriptors
      Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);
      Tensor tdPrV = thr_sdp.partition_fragment_A(sV);
      Tensor tdPrdO = thr_sdp.partition_fragment_B(sdO);
      Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt);
      Tensor tdKrQt = thr_dkv.partition_fragment_B(sQt);
      Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);
      Tensor tdQrKt = thr_dq.partition_fragment_B(sKt);
      Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BN, BM>{}));
      auto c_rc = ws::acc_rowcol(tScS);

      const int seqlen_k = mp.seqlen_k;
      const int diag_offset = mp.seqlen_k - mp.seqlen_q;  // key j visible to query i iff j <= i + diag_offset
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
          ws::wgmma_issue<true>(mma_sdp, tSrK, tSrQ(_, _, _, st.index()), tSrS);
          pipe_do.consumer_wait(st);
          ws::wgmma_issue<true>(mma_sdp, tdPrV, tdPrdO(_, _, _, st.index()), tdPrdP);
          warpgroup_wait<1>();  // S^T done; dP^T may still run

          // P^T = exp2(S^T * scale * log2(e) - lse * log2(e)); masked entries become 0 (lse is +inf
          // for padded and key-less rows, so their columns vanish too).
          auto s_rc = ws::acc_rowcol(tSrS);
          const bool needs_mask = Mainloop::step_needs_mask(mp, blk.n_block, m);
          CUTE_UNROLL
          for (int c = 0; c < size<1>(s_rc); ++c) {
            const int col = get<1>(c_rc(0, c));
            const float lse = sLse(col, st.index());
            const int key_limit = min(seqlen_k, m * kBlockM + col + diag_offset + 1);  // causal or not: keys < limit
            CUTE_UNROLL
            for (int r = 0; r < size<0>(s_rc); ++r) {
              float s = s_rc(r, c);
              if (needs_mask) {
                const int key = key0 + get<0>(c_rc(r, c));
                if (key >= (Cfg::kCausal ? key_limit : seqlen_k)) s = -INFINITY;
              }
              s_rc(r, c) = ws::fast_exp2(s * mp.scale_log2 - lse);
            }
          }
          warpgroup_wait<0>();  // dP^T done
          // dS^T = P^T * (dP^T - D), in place of dP^T.
          auto dp_rc = ws::acc_rowcol(tdPrdP);
          CUTE_UNROLL
          for (int c = 0; c < size<1>(dp_rc); ++c) {
            const float d = sDpsum(get<1>(c_rc(0, c)), st.index());
            CUTE_UNROLL
            for (int r = 0; r < size<0>(dp_rc); ++r) dp_rc(r, c) = s_rc(r, c) * (dp_rc(r, c) - d);
          }

          // dV += P^T dO and dK += dS^T Q, both with A from registers.
          Tensor tPrP = cute::make_tensor<Element>(ws::acc_to_a_operand_layout(tSrS.layout()));
          ws::convert_fragment(tSrS, tPrP);
          ws::wgmma_issue<false>(mma_dkv, tPrP, tdVrdOt(_, _, _, st.index()), tdVrdV);
          Tensor tdSrdS = cute::make_tensor<Element>(ws::acc_to_a_operand_layout(tdPrdP.layout()));
          ws::convert_fragment(tdPrdP, tdSrdS);
          ws::wgmma_issue<false>(mma_dkv, tdSrdS, tdKrQt(_, _, _, st.index()), tdKrdK);

          // dS^T to shared memory with stmatrix (8x8 16-bit tiles in accumulator order, the same
          // store the forward epilogue uses for O), then dQ = dS K over both warpgroups' keys: each
          // warpgroup computes half of head_dim. Thread 0 first makes sure the previous step's
          // bulk reduce has finished reading the dQ staging buffer, which is rewritten below.
          {
            Tensor tdSrdS_acc = make_tensor(tdSrdS.data(), tdPrdP.layout());
            Tensor sdSt_buf = make_tensor(make_smem_ptr(ss.ds.data() + ds_buf * (kBlockN * kBlockM)),
                                          take<0, 2>(typename Mainloop::SmemLayoutdSt{}));
            auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
            auto thr_copy = smem_copy.get_thread_slice(thread_idx);
            copy(smem_copy, thr_copy.retile_S(tdSrdS_acc), thr_copy.partition_D(sdSt_buf));
          }
          if (thread_idx == 0) tma_store_wait<0>();
          cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> WGMMA (async proxy)
          cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kdSReady));
          Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<BM, HD>{});
          Tensor tdQrdS_buf = tdQrdS(_, _, _, ds_buf);
          ws::wgmma_issue<true>(mma_dq, tdQrdS_buf, tdQrKt, tdQrdQ);
          warpgroup_wait<0>();  // dV, dK, dQ done: Q and dO of this stage are no longer read
          pipe_q.consumer_release(st);
          pipe_do.consumer_release(st);

          // dQ (unscaled) into the fp32 accumulator: staged in fragment order, then one bulk
          // reduce-add of the whole tile (the L2 does the adds at line rate; per-element atomics
          // from every thread were the bottleneck). Deterministic mode: key blocks take turns per
          // query block in increasing order, so the fp32 sums are formed in a fixed order.
          static_assert(Mainloop::kdQPerThread % 4 == 0);
          CUTE_UNROLL
          for (int j = 0; j < Mainloop::kdQPerThread / 4; ++j) {
            *reinterpret_cast<float4*>(ss.dq.data() + (j * Cfg::kNumMmaThreads + thread_idx) * 4) =
                make_float4(tdQrdQ(4 * j), tdQrdQ(4 * j + 1), tdQrdQ(4 * j + 2), tdQrdQ(4 * j + 3));
          }
          cutlass::arch::fence_view_async_shared();  // staged dQ visible to the bulk copy (async proxy)
          cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kdQReady));
          if (thread_idx == 0) {
            const int64_t tile = (int64_t(blk.batch) * mp.heads_q + head) * (mp.seqlen_q_padded / kBlockM) + m;
            float* dq = params.dq_accum + tile * Mainloop::kdQElems;
            int* sem = params.semaphore + tile;
            if (params.deterministic) {
              while (load_acquire(sem) != blk.n_block) {
              }
            }
            bulk_reduce_add_f32(dq, ss.dq.data(), Mainloop::kdQElems * sizeof(float));
            tma_store_arrive();  // commit the bulk group
            if (params.deterministic) {
              bulk_wait_complete();  // the adds are done in global memory, not only read from smem
              store_release(sem, blk.n_block + 1);
            }
          }
          ++st;
          ds_buf ^= 1;
        }
      }
    }

    if (thread_idx == 0) tma_store_wait<0>();  // shared memory must outlive the last bulk read

    // dK = scale * dS^T Q summed, dV as accumulated; keys past seqlen_k are not written.
    Tensor tdKVcdKV = thr_dkv.partition_C(make_identity_tensor(Shape<BN, HD>{}));
    const int key0 = blk.n_block * kBlockN;
    Element* dk = static_cast<Element*>(params.dk) + blk.batch * params.dk_stride[0] + blk.kv_head * params.dk_stride[2];
    Element* dv = static_cast<Element*>(params.dv) + blk.batch * params.dv_stride[0] + blk.kv_head * params.dv_stride[2];
    store_kv_grad(dk, params.dk_stride[1], key0, mp.seqlen_k, tdKrdK, tdKVcdKV, params.scale);
    store_kv_grad(dv, params.dv_stride[1], key0, mp.seqlen_k, tdVrdV, tdKVcdKV, 1.f);
  }
#endif
}

}  // namespace hopattn::sm90::bwd
