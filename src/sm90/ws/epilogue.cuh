// Forward epilogue of one consumer warpgroup: write lse (fp32, natural log) from registers, stage the
// normalised O through shared memory (the warpgroup's slice of the O buffer, or of V's or Q's where
// no separate one fits) and store it with one TMA copy per warpgroup (head_dim / 64 boxes of 64 x 64),
// which clips rows past seqlen_q and follows the caller's strides. Packed (varlen) tensors clip only
// at the last token, so a slice that crosses its sequence's end is written from registers instead.
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "api/problem.hpp"
#include "sm90/ws/fragment_layout.cuh"
#include "sm90/ws/named_barriers.hpp"

namespace hopattn::sm90::ws {

template <class Cfg, class Mainloop>
struct FwdEpilogue {
  using Element = typename Cfg::OutElement;  // of O (the inputs' type, or bf16/fp16 for FP8)
  static constexpr int kBlockM = Cfg::kBlockM, kHeadDim = Cfg::kHeadDim;
  using HD = cute::Int<kHeadDim>;
  using SmemLayoutO = typename Mainloop::SmemLayoutOWarpGroup;  // one warpgroup's 64 x head_dim tile
  // The PV GEMM of a single warpgroup: its accumulator fragment has the same register order as
  // the multi-warpgroup one, so stmatrix can be partitioned per warpgroup (thread index % 128).
  using MmaPVWarpGroup = decltype(cute::make_tiled_mma(typename Mainloop::AtomPV{}));

  using GTensorO = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr)),
                                              typename Mainloop::GShape{}, typename Mainloop::GStrideRows{}));
  using TmaO = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, GTensorO{}, SmemLayoutO{},
                                            cute::Shape<cute::_64, HD>{}, cute::_1{}));

  struct Params {
    TmaO tma_o;
    float* lse;  // (batch, heads_q, seqlen_q) or varlen's (heads_q, total_q), contiguous, or null
    int64_t lse_stride_batch, lse_stride_head;
    int rows, heads_q, batch_extent;  // extents of the TMA view: (seqlen_q, batch) or (total_q, 1)
    Element* o;  // the same O as tma_o, for rows written from registers (store_rows)
    int64_t o_stride_batch, o_stride_row, o_stride_head;
  };
  using SeqInfo = typename Mainloop::SeqInfo;

  static Params make_params(const AttnProblem& pr) {
    using namespace cute;
    const bool packed = pr.varlen();
    const int rows = int(packed ? pr.total_q : pr.seqlen_q), batch_extent = packed ? 1 : int(pr.batch);
    auto mO = make_tensor(make_gmem_ptr(static_cast<Element*>(pr.out)),
                          make_shape(rows, int(kHeadDim), int(pr.heads_q), batch_extent),
                          make_stride(pr.o_stride[1], _1{}, pr.o_stride[2], pr.o_stride[0]));
    return {make_tma_copy(SM90_TMA_STORE{}, mO, SmemLayoutO{}, Shape<_64, HD>{}, _1{}),
            pr.lse,
            packed ? 0 : pr.heads_q * pr.seqlen_q,
            rows,
            rows,
            int(pr.heads_q),
            batch_extent,
            static_cast<Element*>(pr.out),
            pr.o_stride[0],
            pr.o_stride[1],
            pr.o_stride[2]};
  }

  // tOrO: normalised fp32 O of this thread (PV accumulator layout); lse: per held row.
  // Without a separate O buffer, returns with the slice free again (the TMA store has read it);
  // with one, the store is still in flight and the next call (or drain()) waits for it.
  template <class FragO, int kRows>
  __device__ static void store(const Params& p, typename Mainloop::SharedStorage& ss, int thread_idx,
                               int m_block, int head, const SeqInfo& si, const FragO& tOrO, const float (&lse)[kRows]) {
    using namespace cute;
    const int wg = thread_idx / 128;
    const int wg_thread = thread_idx % 128;

    // A packed slice with rows at or past seqused (its sequence's last slice): registers to gmem,
    // bounded by the sequence. The choice is uniform over the warpgroup, and this path touches no
    // shared memory, so it needs none of the slice handshakes below.
    if constexpr (Cfg::kVarlen) {
      if (m_block * kBlockM + wg * 64 + 64 > si.seqlen_q) {
        auto o_rc = acc_rowcol(tOrO);
        store_rows(p, thread_idx, m_block, head, si, [&](int r, int c) { return float(o_rc(r, c)); });
        store_lse(p, thread_idx, m_block, head, si, lse);
        return;
      }
    }

    // The slice may still be read by this warpgroup's previous TMA store, which only thread 0 can
    // wait for: with a separate O buffer it waits here (the store overlapped this whole tile), and
    // the warpgroup syncs before overwriting the slice. With O in the Q buffer thread 0 waited at
    // the end of the previous call, before Q was released and this tile's Q loaded over it.
    if constexpr (Cfg::kSeparateO) {
      if (wg_thread == 0) tma_store_wait<0>();
      cutlass::arch::NamedBarrier::sync(128, barrier_id(FwdBarrier::kEpilogueWG0, wg));
    }
    // Registers -> smem with stmatrix (8x8 16-bit tiles, matching the accumulator ownership).
    // With O in V's buffer the slice is free: the producer loaded no V since the previous store,
    // which this warpgroup's first warp waited for (kernel.cuh), and kValueEmpty ended the P Vs.
    Element* o_buffer = [&] {
      if constexpr (Cfg::kSeparateO) return ss.o.data();
      else if constexpr (Cfg::kOInV) return reinterpret_cast<Element*>(ss.v.data());
      else return ss.q.data();
    }();
    Tensor sO = make_tensor(make_smem_ptr(o_buffer + wg * cosize_v<SmemLayoutO>), SmemLayoutO{});
    Tensor tOrO16 = make_tensor_like<Element>(tOrO);
    convert_fragment(tOrO, tOrO16);
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, MmaPVWarpGroup{});
    auto thr_copy = smem_copy.get_thread_slice(wg_thread);
    copy(smem_copy, thr_copy.retile_S(tOrO16), thr_copy.partition_D(sO));
    // Make the generic-proxy smem writes visible to the TMA (async proxy), then let one thread
    // store once the whole warpgroup has written.
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(128, barrier_id(FwdBarrier::kEpilogueWG0, wg));
    // kRowShift: a warpgroup of padding rows above the sequence (whole warpgroups: the shift is a
    // multiple of 64) stores nothing; TMA is never given a negative row to store.
    if (wg_thread == 0 && !Mainloop::above_sequence(si, m_block * kBlockM + wg * 64)) {
      Tensor mO = p.tma_o.get_tma_tensor(make_shape(p.rows, int(kHeadDim), p.heads_q, p.batch_extent));
      Tensor mOs = Mainloop::Loader::template from_row<0, Cfg::kVarlen || Mainloop::kRowShift>(mO(_, _, head, si.batch),
                                                                                            si.offset_q);
      Tensor gO = local_tile(mOs, Shape<_64, HD>{}, make_coord(m_block * (kBlockM / 64) + wg, _0{}));
      auto cta = p.tma_o.get_slice(_0{});
      copy(p.tma_o, cta.partition_S(sO), cta.partition_D(gO));
      tma_store_arrive();
    }

    store_lse(p, thread_idx, m_block, head, si, lse);
    // O in the Q buffer: the next tile's Q may be loaded only after the store has read the slice.
    // (O in V's buffer: the caller waits, then tells the producer.)
    if constexpr (!Cfg::kOOutsideQ) {
      if (wg_thread == 0) tma_store_wait<0>();
    }
  }

  // A tile whose rows see no key: O = 0 and lse = -inf, stored straight from registers. It touches
  // no shared memory, so it needs no handshake with the producer (which may be loading the next
  // tile's Q into the buffer an epilogue would otherwise stage O through). Rare: causal tiles above
  // the diagonal when seqlen_q > seqlen_k, and varlen tiles past seqused_q or with no keys.
  __device__ static void store_empty(const Params& p, int thread_idx, int m_block, int head, const SeqInfo& si) {
    store_rows(p, thread_idx, m_block, head, si, [](int, int) { return 0.f; });
    float lse[Mainloop::kRowsPerThread];
    CUTE_UNROLL
    for (int r = 0; r < Mainloop::kRowsPerThread; ++r) lse[r] = -INFINITY;
    store_lse(p, thread_idx, m_block, head, si, lse);
  }

  // This thread's rows of O from registers, value(r, c) in the accumulator's (row, col) view, with
  // plain 4-byte stores (two adjacent columns each): rows [seqlen_q, rows_q) of the sequence (past
  // seqused) get 0, rows past rows_q are not written. Used for a tile's few boundary slices only.
  template <class Value>
  __device__ static void store_rows(const Params& p, int thread_idx, int m_block, int head, const SeqInfo& si,
                                    Value&& value) {
    using namespace cute;
    typename Mainloop::TiledMmaPV mma_pv;
    Tensor tOcO = acc_rowcol(
        mma_pv.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{})));
    Element* o = p.o + int64_t(si.batch) * p.o_stride_batch + int64_t(head) * p.o_stride_head;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(tOcO); ++r) {
      const int row = m_block * kBlockM + get<0>(tOcO(r, 0));
      if (row >= si.rows_q || Mainloop::above_sequence(si, row)) continue;
      const bool used = row < si.seqlen_q;
      Element* o_row = o + int64_t(si.offset_q + row) * p.o_stride_row;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(tOcO); c += 2) {  // columns come in adjacent pairs
        const uint32_t lo = Element(used ? value(r, c) : 0.f).raw();
        const uint32_t hi = Element(used ? value(r, c + 1) : 0.f).raw();
        *reinterpret_cast<uint32_t*>(o_row + get<1>(tOcO(r, c))) = lo | (hi << 16);
      }
    }
  }

  // The thread holding column 0 of a row (one per quad) writes that row's lse; -inf for rows past
  // seqused (varlen), nothing past the sequence's rows.
  template <int kRows>
  __device__ static void store_lse(const Params& p, int thread_idx, int m_block, int head, const SeqInfo& si,
                                   const float (&lse)[kRows]) {
    using namespace cute;
    if (p.lse == nullptr) return;
    typename Mainloop::TiledMmaPV mma_pv;
    Tensor tOcO = acc_rowcol(
        mma_pv.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{})));
    float* lse_rows = p.lse + int64_t(si.batch) * p.lse_stride_batch + int64_t(head) * p.lse_stride_head + si.offset_q;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int row = m_block * kBlockM + get<0>(tOcO(r, 0));
      if (get<1>(tOcO(r, 0)) == 0 && row < si.rows_q && !Mainloop::above_sequence(si, row))
        lse_rows[row] = row < si.seqlen_q ? lse[r] : -INFINITY;
    }
  }

  // Before the CTA exits: shared memory must outlive the last TMA store's reads of it.
  __device__ static void drain(int thread_idx) {
    if constexpr (Cfg::kSeparateO) {
      if (thread_idx % 128 == 0) cute::tma_store_wait<0>();
    }
  }
};

}  // namespace hopattn::sm90::ws
