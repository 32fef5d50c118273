// The forward main loop of one query tile: the producer warp's TMA loads (Q once, K/V per key block
// into a kStages-deep ring guarded by PipelineTmaAsync full/empty mbarriers) and the consumer
// warpgroups' WGMMAs (S = Q K^T from smem, O += P V with P from registers) around the softmax.
#pragma once

// First: it enables CuTe's extended WGMMA N shapes, which must precede any CuTe include.
#include "sm90/ws/tile_shape.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "api/problem.hpp"
#include "sm90/fp8/layout.hpp"
#include "sm90/fp8/unrotate.cuh"
#include "sm90/ws/cluster_arrive.cuh"
#include "sm90/ws/fragment_layout.cuh"
#include "sm90/ws/mask.cuh"
#include "sm90/ws/named_barriers.hpp"
#include "sm90/ws/softmax.cuh"
#include "sm90/ws/tile_scheduler.hpp"
#include "sm90/ws/warp_uniform.cuh"
#if defined(HOPATTN_FWD_TRACE) && HOPATTN_FWD_TRACE
#include "sm90/ws/trace.cuh"  // mma_tile's stamps (trace builds only)
#endif

namespace hopattn::sm90::ws {

// c (+)= a b over the K mode, one WGMMA per k-slice, inside a batch the caller opens
// (warpgroup_arrive) and commits: the shared body of wgmma_issue and wgmma_issue_with_norm.
template <bool kZeroInit, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_k_loop(TiledMma& mma, TA& a, const TB& b, TC& c) {
  using namespace cute;
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// Issues one warpgroup-wide WGMMA sequence over the K mode and commits it as one batch; the caller
// decides when to wait (warpgroup_wait<N>), which is what lets GEMMs overlap the softmax.
template <bool kZeroInit, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_issue(TiledMma& mma, TA& a, const TB& b, TC& c) {
  using namespace cute;
  constexpr bool kRegA = !is_same_v<typename TA::value_type, GmmaDescriptor>;  // P in registers
  if constexpr (kRegA) warpgroup_fence_operand(a);  // keep P's conversion before the async read
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  wgmma_k_loop<kZeroInit>(mma, a, b, c);
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(a);
}

// One WGMMA batch: c (+)= a b, then O's normaliser cn = p x ones (FwdMainloop::kNormOnTc) from zero.
// Batched with a GEMM the caller waits for anyway, the normaliser runs asynchronously like it,
// and its accumulator is live only from issue to that wait.
template <bool kZeroInit, class Mma, class MmaNorm, class TA, class TB, class TC, class TP, class TBN, class TCN>
__device__ __forceinline__ void wgmma_issue_with_norm(Mma& mma, TA& a, const TB& b, TC& c, MmaNorm& mma_n, TP& p,
                                                      const TBN& bn, TCN& cn) {
  using namespace cute;
  constexpr bool kRegA = !is_same_v<typename TA::value_type, GmmaDescriptor>;
  if constexpr (kRegA) warpgroup_fence_operand(a);
  warpgroup_fence_operand(p);
  warpgroup_fence_operand(c);
  warpgroup_fence_operand(cn);
  warpgroup_arrive();
  wgmma_k_loop<kZeroInit>(mma, a, b, c);
  wgmma_k_loop<true>(mma_n, p, bn, cn);
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  warpgroup_fence_operand(cn);
  warpgroup_fence_operand(p);
  if constexpr (kRegA) warpgroup_fence_operand(a);
}

// Keeps the P V wait after the softmax: call it right before that warpgroup_wait<0>, with `never`
// a value the softmax just computed that is never negative. The source and the PTX put the wait
// after the softmax, but ptxas moves `wgmma.wait_group 0` up to the softmax's start, so each
// softmax first waits for its own P V (scripts/sass_overlap.py counts it). A store of every P word
// in a branch never taken, guarded by a softmax result, keeps it in place. The P V GEMM reads P
// from registers (the RS form), but that is not the whole reason ptxas hoists: an SS-form P V
// (perf-notes, "P V in SS form") is hoisted the same way, and a branch storing no P word moves
// the wait only 13 of 64 EX2 down. Cost: an FSETP and a branch per key block. Whether the overlap
// pays depends on the configuration (Cfg::kHoldP): measured, it helps bf16 d256 and costs FP8
// (docs/perf-notes.md, "P's registers held until the wait").
template <class FragP>
__device__ __forceinline__ void hold_p_registers(const FragP& tOrP, float never) {
  auto words = cute::recast<uint32_t>(tOrP);
  if (never < 0.f) {
    CUTE_UNROLL
    for (int i = 0; i < cute::size(words); ++i) asm volatile("st.shared.b32 [%0], %1;" ::"r"(4 * i), "r"(words(i)));
  }
}

// The FP8 P operand: an m64nNk32 e4m3 WGMMA's A fragment is ((4 k, 2 rows, 2 k-halves), MMA_M,
// N/32) per thread, holding columns 4t..4t+3 and 16+4t..16+4t+3 of each 32. The fp32 accumulator
// holds columns 2t, 2t+1 (+8j). Rather than exchanging bytes between threads, each thread packs its
// own four columns {2t, 2t+1, 8+2t, 9+2t} of each 16 into A positions 4t..4t+3; V^T's keys are
// stored in the matching order (fp8::vt_key_position), so the sum over keys is unchanged.
template <int kBlockN>
__device__ __forceinline__ auto make_fp8_p_fragment() {
  using namespace cute;
  return cute::make_tensor<cutlass::float_e4m3_t>(Layout<Shape<Shape<_4, _2, _2>, _1, Int<kBlockN / 32>>>{});
}
template <class FragS, class FragP>
__device__ __forceinline__ void convert_p_fp8(const FragS& tSrS, FragP& tOrP) {
  using namespace cute;
  constexpr int kChunks = decltype(size<2>(tOrP))::value;
  Tensor ordered = cute::make_tensor<float>(tOrP.layout());
  CUTE_UNROLL
  for (int kk = 0; kk < kChunks; ++kk) {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      CUTE_UNROLL
      for (int rh = 0; rh < 2; ++rh) {
        CUTE_UNROLL
        for (int i = 0; i < 4; ++i)
          ordered(make_coord(i, rh, h), 0, kk) = tSrS(make_coord(i & 1, rh, 4 * kk + 2 * h + (i >> 1)), 0, 0);
      }
    }
  }
  convert_fragment(ordered, tOrP);  // cvt.rn.satfinite.e4m3x2.f32: P in [0, 256] never saturates
}

// The widest K-major swizzle atom whose row (128, 64 or 32 bytes) divides a row of kCols elements.
template <class Element, int kCols>
constexpr auto k_major_smem_atom() {
  using namespace cute;
  constexpr int kRowBytes = kCols * int(sizeof_bits<Element>::value) / 8;
  if constexpr (kRowBytes % 128 == 0) return GMMA::Layout_K_SW128_Atom<Element>{};
  else if constexpr (kRowBytes % 64 == 0) return GMMA::Layout_K_SW64_Atom<Element>{};
  else return GMMA::Layout_K_SW32_Atom<Element>{};
}

template <class Cfg>
struct FwdMainloop {
  using Element = typename Cfg::Element;    // Q and K
  using ElementV = typename Cfg::ElementV;  // V and P: Element, or 16-bit in FP8's kPv16 kernels
  using OutElement = typename Cfg::OutElement;
  static constexpr bool kFp8 = Cfg::kFp8;
  static constexpr bool kV8 = kFp8 && !Cfg::kPv16;  // V^T and P in e4m3
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
  static constexpr int kStages = Cfg::kStages;
  using BM = cute::Int<kBlockM>;
  using BN = cute::Int<kBlockN>;
  using HD = cute::Int<kHeadDim>;

  // 128-byte swizzle: WGMMA reads 8x(64 x 16-bit) core matrices bank-conflict free, and TMA writes
  // the same layout. Q/K are K-major (head_dim contiguous). V is stored as it is in gmem (head_dim
  // contiguous) and used directly as the MN-major B operand of O = P V (16-bit WGMMA can
  // transpose B), so no transpose pass is needed: its smem shape is (head_dim, keys, stage).
  // Q's swizzle atoms (8 rows x 64 columns) are laid out along head_dim first, so every 64-row
  // warpgroup slice is one contiguous block: the epilogue reuses a warpgroup's slice for its O tile
  // (and TMA-stores it) while other warpgroups may still be reading their Q rows.
  // The swizzle atom is the widest whose row fits head_dim: 128 bytes for every 16-bit case and
  // for e4m3 at d >= 128; e4m3 d64 rows are 64 bytes and take the 64-byte swizzle.
  using AtomLayoutQK = decltype(k_major_smem_atom<Element, kHeadDim>());
  using SmemLayoutQ = decltype(cute::tile_to_shape(AtomLayoutQK{}, cute::Shape<BM, HD>{}, cute::Step<cute::_2, cute::_1>{}));
  // O's staging slice (one warpgroup's 64 x head_dim) need only be contiguous as a whole. Inside it
  // the atoms run along rows first, so that each 64-column band is one 64 x 64 TMA box: the store is
  // head_dim / 64 UTMASTGs (d128: 2), where head_dim-first order (Q's) cuts it into 8-row boxes
  // (d128: 16, issued one by one by the warpgroup's thread 0 at every tile's end).
  using SmemLayoutOWarpGroup = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<OutElement>{},
                                                            cute::Shape<cute::_64, HD>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(AtomLayoutQK{}, cute::Shape<BN, HD, cute::Int<kStages>>{}));
  // 16-bit: V's atoms (64 head_dim x 8 keys) run along keys first, so one TMA box covers 64
  // head_dim columns of all kBlockN keys (head_dim-first order would cut boxes to 8 keys each).
  // e4m3: V^T arrives keys-contiguous (K-major, what FP8 WGMMA requires), 128 keys per row.
  static constexpr auto smem_layout_vt() {
    using namespace cute;
    if constexpr (kV8)
      return tile_to_shape(k_major_smem_atom<ElementV, kBlockN>(), Shape<HD, BN, Int<kStages>>{});
    else
      return tile_to_shape(GMMA::Layout_MN_SW128_Atom<ElementV>{}, Shape<HD, BN, Int<kStages>>{}, Step<_2, _1, _3>{});
  }
  using SmemLayoutVt = decltype(smem_layout_vt());

  // One 64-row WGMMA atom per consumer warpgroup, stacked along M.
  using WarpGroupsAlongM = cute::Layout<cute::Shape<cute::Int<Cfg::kNumConsumerWG>, cute::_1, cute::_1>>;
  using AtomQK = decltype(cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, BN, HD>>());
  using AtomPV = decltype(cute::GMMA::rs_op_selector<ElementV, ElementV, float, cute::Shape<cute::_64, HD, BN>,
                                                     cute::GMMA::Major::K,
                                                     kV8 ? cute::GMMA::Major::K : cute::GMMA::Major::MN>());
  using TiledMmaQK = decltype(cute::make_tiled_mma(AtomQK{}, WarpGroupsAlongM{}));
  using TiledMmaPV = decltype(cute::make_tiled_mma(AtomPV{}, WarpGroupsAlongM{}));
  // kSoftcapFixedMax: O's normaliser is P times a (keys x 8) tile of ones in shared memory, an
  // N = 8 WGMMA batched with the next S GEMM, or with the tile's last P V (wgmma_issue_with_norm):
  // every column of the result is a row's sum of the 16-bit P that P V multiplies. Not an mma.sync
  // per 16 keys: an HMMA waits for the tensor cores beside the other warpgroups' WGMMAs (session
  // 50: it kept half of the fixed max's gain; session 51: this WGMMA is 3-6% faster at d128).
  static constexpr bool kNormOnTc = Cfg::kSoftcapFixedMax;
  // Only the kernels that use it build the ones tile: the 8-bit V's MN atom (16 x 8) does not
  // divide its 8 x kBlockN shape, and the FP8 kernels never read it.
  static constexpr auto ones_layout() {
    if constexpr (kNormOnTc)
      return cute::tile_to_shape(cute::GMMA::Layout_MN_INTER_Atom<ElementV>{}, cute::Shape<cute::_8, BN>{});
    else
      return cute::Layout<cute::Shape<cute::_1>>{};
  }
  using SmemLayoutOnes = decltype(ones_layout());
  static constexpr auto norm_atom() {
    if constexpr (kNormOnTc)
      return cute::GMMA::rs_op_selector<ElementV, ElementV, float, cute::Shape<cute::_64, cute::_8, BN>,
                                        cute::GMMA::Major::K, cute::GMMA::Major::MN>();
    else
      return AtomPV{};
  }
  using TiledMmaNorm = decltype(cute::make_tiled_mma(norm_atom(), WarpGroupsAlongM{}));
  static_assert(cute::size<1>(typename TiledMmaQK::AtomShape_MNK{}) == kBlockN,
                "S GEMM must be one WGMMA wide: include sm90/ws headers before any CuTe header, or "
                "compile with -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED");
  static_assert(cute::size<1>(typename TiledMmaPV::AtomShape_MNK{}) == kHeadDim, "O GEMM must be one WGMMA wide");
  static_assert(!Cfg::kOInV || cute::cosize_v<SmemLayoutVt> * sizeof(ElementV) >= kBlockM * kHeadDim * sizeof(OutElement),
                "O staged in V's buffer must fit in its stages");

  // Global views: Q/K as (seq, head_dim, head, batch), V as (head_dim, seq, head, batch), from the
  // caller's strides, so any strided view TMA can address works (strides are 16-byte multiples).
  using GShape = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStrideRows = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using GStrideCols = cute::Stride<cute::_1, int64_t, int64_t, int64_t>;
  template <class Stride, class E = Element>
  using GTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<const E*>(nullptr)), GShape{}, Stride{}));
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GTensor<GStrideRows>{}, SmemLayoutQ{},
                                            cute::Shape<BM, HD>{}, cute::_1{}));
  // V as (head_dim, keys): 16-bit V is head_dim-contiguous; FP8's V^T is keys-contiguous.
  using GStrideV = std::conditional_t<kV8, GStrideRows, GStrideCols>;
  // Cfg::kClusterM > 1: each CTA of the cluster loads 1 / kClusterM of every K/V tile (CuTe cuts the
  // box) and multicasts it into the same stage of every CTA of the cluster.
  static constexpr int kClusterM = Cfg::kClusterM;
  static_assert(kClusterM <= 2, "release_stage_in_pair arrives on two CTAs");
  // How a consumer warpgroup of a 2-CTA cluster releases a K/V stage. CUTLASS's consumer_release
  // holds a per-thread (pred, cta) pair per pipeline; at 240 registers ptxas spills both pairs and
  // reads them back with 3-4 LDL per key block. release_stage_in_pair takes them from %tid.x at
  // each release: no LDL, and at d256 0.8% faster (H100, 16k, 7 of 7 rounds), but at d128 1.5%
  // slower at 16k and 1% at 8k (7 of 7; the loop's instruction count unchanged, its schedule not).
  // So d128 keeps CUTLASS's release and its LDLs (docs/perf-notes.md, session 55).
  static constexpr bool kPairReleaseFromTid = kClusterM > 1 && Cfg::kHeadDim == 256;
  using TmaLoadKV = std::conditional_t<(kClusterM > 1), cute::SM90_TMA_LOAD_MULTICAST, cute::SM90_TMA_LOAD>;
  using TmaK = decltype(cute::make_tma_copy(TmaLoadKV{}, GTensor<GStrideRows>{}, cute::take<0, 2>(SmemLayoutK{}),
                                            cute::Shape<BN, HD>{}, cute::Int<kClusterM>{}));
  using TmaV = decltype(cute::make_tma_copy(TmaLoadKV{}, GTensor<GStrideV, ElementV>{},
                                            cute::take<0, 2>(SmemLayoutVt{}), cute::Shape<HD, BN>{},
                                            cute::Int<kClusterM>{}));

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKBytes = kBlockN * kHeadDim * sizeof(Element);   // one K stage
  static constexpr uint32_t kVBytes = kBlockN * kHeadDim * sizeof(ElementV);  // one V stage

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;

  // The tiles. Each member's size is a multiple of its 1024-byte alignment, so the struct has no
  // tail padding and SharedStorage's barriers start right after it.
  struct TileStorage {
    // Q, and (unless Cfg::kOOutsideQ) after the last S GEMM of a tile, that tile's O.
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<ElementV, cute::cosize_v<SmemLayoutVt>, 1024> v;
    // O on its way to gmem when Cfg::kSeparateO (else O reuses v, Cfg::kOInV, or q).
    cute::array_aligned<OutElement, Cfg::kSeparateO ? cute::cosize_v<SmemLayoutQ> : 0, 1024> o;
  };
  // kNormOnTc: the ones of O's normaliser too, written once per CTA (fill_ones). A separate type,
  // not a member of size 0, which would still take 128 bytes and move every barrier (C++17 has no
  // [[no_unique_address]]): the other kernels keep their shared-memory layout.
  struct TileStorageWithOnes : TileStorage {
    cute::array_aligned<ElementV, cute::cosize_v<SmemLayoutOnes>, 128> ones;
  };
  struct SharedStorage : std::conditional_t<kNormOnTc, TileStorageWithOnes, TileStorage> {
    typename Pipeline::SharedStorage pipe_k;
    typename Pipeline::SharedStorage pipe_v;
    uint64_t barrier_q;  // ClusterTransactionBarrier storage: Q arrived
    TileSlot tile_slot;  // varlen, dynamic order: the producer hands each work index over here
    // FP8 with a rotated V: the rotation's sign bits, bit c of word c / 32 for column c (written
    // once per CTA before the role split, read by every epilogue; nothing held in registers).
    uint32_t o_signs[kFp8 ? kHeadDim / 32 : 1];
  };

  // FP8 descales (Fp8AttnProblem's), absent from the 16-bit kernels' parameters.
  struct Descales {
    const float* q;
    const float* k;
    const float* v;
    int64_t q_stride[3], k_stride[3], v_stride[2];
    uint32_t o_rotation_seed;
    int unrotate_o;  // V^T holds V M: write O M^T
  };
  struct NoDescales {};

  struct Params {
    TmaQ tma_q;
    TmaK tma_k;
    TmaV tma_v;
    // Fixed-length batches: the lengths. Varlen: the max_seqlen bounds (tile counts only).
    int seqlen_q, seqlen_k, heads_q, heads_kv, batch, group;
    float scale, scale_log2;
    std::conditional_t<kFp8, Descales, NoDescales> descale;
    // Extents of the TMA views along rows and batch: (seqlen, batch), or (total tokens, 1) when
    // packed. Varlen: the index arrays (device memory; cu_q null for fixed-length batches).
    int rows_q, rows_k, batch_extent;
    int rows_v;  // V's key extent: rows_k, or the padded columns of FP8's V^T
    int kv_extent;  // K/V views' batch extent: batch_extent, or num_pages for a paged cache
    const int32_t* cu_q;
    const int32_t* cu_k;
    const int32_t* used_q;
    const int32_t* used_k;
    int window_left, window_right;  // the masked kernels' bounds (mask.cuh: make_window)
    Softcap softcap;                // read by the kSoftcap kernels only
    // A paged cache (kPaged kernels, AttnProblem::page_table): K/V views are (page_size, .., page)
    // and key block n of sequence b is block n % page_blocks of page page_table[b][n / page_blocks].
    const int32_t* page_table;
    int64_t page_table_stride;
    int page_blocks;  // key blocks per page (page_size / kBlockN)
    int row_shift;    // Cfg::kRowShift: padding rows before the first query row (row_shift below)
  };

  // Where one batch entry's rows live in the tensors and how many of them take part.
  struct SeqInfo {
    int offset_q, offset_k;  // first row in the packed tensors (0 for fixed-length batches)
    int rows_q;              // query rows to write: the sequence's length
    int seqlen_q, seqlen_k;  // query rows and keys that take part: seqused, else the lengths
    int batch;               // batch coordinate of the TMA views (0 when packed)
    int offset_v;            // first key column of V's view: offset_k, or FP8's packed V^T start
    int tail_block = -1;     // the key block loaded shifted to end at seqlen_k (FwdMask's kTailShift)
    int row_shift = 0;       // Cfg::kRowShift: padding rows counted in the three above (with_row_shift)
  };

  // The 16-bit varlen kernels load the block holding a sequence's last key as the kBlockN keys
  // ending there, so no row past seqused_k is ever read (see FwdMask). Packed tensors: only when
  // the sequence has kBlockN keys (a shorter one's box would start in the previous sequence);
  // batched views (cu_k null): always, as TMA zero-fills the negative rows of a short sequence.
  static constexpr bool kTailShift = Cfg::kVarlen && !kFp8;
  // Paged caches run the same kernels (a null page_table costs one uniform branch per load in the
  // producer). The tail shift stays inside the tail block's page: a box starting before the page's
  // first row reads TMA's zero fill there, not the previous page (the mask hides those columns).
  static constexpr bool kPaged = kTailShift;
  __device__ static void set_tail(const Params& p, SeqInfo& si) {
    if constexpr (kTailShift) {
      if (si.seqlen_k % kBlockN != 0 && (p.cu_k == nullptr || si.seqlen_k >= kBlockN))
        si.tail_block = si.seqlen_k / kBlockN;
    }
  }

  // Cfg::kRowShift: the tile grid starts row_shift rows before the sequence, a multiple of 64
  // (whole warpgroups) below kBlockM, so that the last tile ends at (or within 63 rows past) the
  // last query row. Causal tiles see keys up to their last row: the padding a seqlen that is no
  // multiple of kBlockM leaves then costs the first tile (a key block or two) instead of the last
  // (every key block). d64 causal at 1k: 27 key-block steps a head instead of 32.
  // The kernel works on virtual rows: SeqInfo's seqlen_q/rows_q count the padding and offset_q is
  // moved back by it, so the mask (bottom-right aligned: key_limit depends on row - seqlen_q only) and
  // the tile bounds need no change. Q's TMA zero-fills the negative rows; the epilogue writes
  // no row below 0 (above_sequence).
  // Packed (varlen) sequences take their own shift, from their own length: the rows before a
  // sequence's first are the previous sequence's (or, before the first, TMA's zero fill), loaded
  // as padding and never stored.
  static constexpr bool kRowShift = Cfg::kRowShift;
  __host__ __device__ static int row_shift(int seqlen_q) {
    return kRowShift ? (kBlockM - seqlen_q % kBlockM) % kBlockM / 64 * 64 : 0;
  }
  // A virtual row of the padding above the sequence (never stored). Constant false elsewhere.
  __device__ static bool above_sequence(const SeqInfo& si, int row) {
    return kRowShift && row < si.row_shift;
  }
  // si's rows as virtual rows: `shift` padding rows before the first.
  __device__ static SeqInfo with_row_shift(SeqInfo si, int shift) {
    if constexpr (kRowShift) {
      si.offset_q -= shift;
      si.rows_q += shift;
      si.seqlen_q += shift;
      si.row_shift = shift;
    }
    return si;
  }

  __device__ static SeqInfo seq_info(const Params& p, int b) {
    if constexpr (!Cfg::kVarlen) return with_row_shift({0, 0, p.seqlen_q, p.seqlen_q, p.seqlen_k, b, 0}, p.row_shift);
    // Fixed-length batches with per-sequence key counts (the KV-cache call, 16-bit only: cu_q and
    // cu_k null, used_k its key counts): batched views, keys [0, used_k[b]) of capacity seqlen_k.
    if constexpr (!kFp8) {
      if (p.cu_q == nullptr) {
        SeqInfo si{0, 0, p.seqlen_q, p.seqlen_q, min(max(__ldg(p.used_k + b), 0), p.seqlen_k), b, 0};
        set_tail(p, si);
        return with_row_shift(si, p.row_shift);
      }
    }
    // Clamped to the tensors' rows: wrong index values (unchecked on the GPU unless the caller
    // asks) give wrong rows, never an access outside q/k/v/out.
    const int oq = warp_uniform(min(max(__ldg(p.cu_q + b), 0), p.rows_q));
    const int ok = warp_uniform(min(max(__ldg(p.cu_k + b), 0), p.rows_k));
    const int lq = warp_uniform(min(max(__ldg(p.cu_q + b + 1) - oq, 0), p.rows_q - oq));
    int lk = warp_uniform(min(max(__ldg(p.cu_k + b + 1) - ok, 0), p.rows_k - ok));
    // FP8: the pre-passes quantise (and lay out in V^T) at most max_seqlen_k keys per sequence, and
    // k descales exist for those key blocks only; a longer sequence (an unchecked wrong index) must
    // not read past them.
    if constexpr (kFp8) lk = min(lk, p.seqlen_k);
    const int uq = p.used_q == nullptr ? lq : warp_uniform(min(max(__ldg(p.used_q + b), 0), lq));
    const int uk = p.used_k == nullptr ? lk : warp_uniform(min(max(__ldg(p.used_k + b), 0), lk));
    const int ov = kFp8 ? int(fp8::vt_varlen_start(ok, b)) : ok;
    SeqInfo si{oq, ok, lq, uq, uk, 0, ov};
    set_tail(p, si);
    return with_row_shift(si, row_shift(lq));
  }

  template <class Problem>  // AttnProblem, or Fp8AttnProblem for the FP8 kernel
  static Params make_params(const Problem& prob) {
    using namespace cute;
    const AttnProblem& pr = attn_problem(prob);
    const int sq = int(pr.seqlen_q), sk = int(pr.seqlen_k), hq = int(pr.heads_q), hk = int(pr.heads_kv);
    const int b = int(pr.batch);
    // Packed (varlen) tensors are one batch entry of total-token rows; tiles start at the
    // sequence's first row (SeqInfo) and may read into the next sequence, which the mask hides.
    // A varlen kernel on a fixed-length problem (cu_seqlens_q null, seqused_k set) keeps the
    // batched views.
    const bool packed = pr.varlen();
    const bool paged = kPaged && pr.paged();  // launch_ws_config declines paged problems elsewhere
    const int rows_q = packed ? int(pr.total_q) : sq;
    const int rows_k = packed ? int(pr.total_k) : paged ? int(pr.page_size) : sk;
    const int bext = packed ? 1 : b;
    const int kv_ext = paged ? int(pr.num_pages) : bext;
    // A TMA view needs at least one row; with no key rows at all no K/V tile is ever loaded, so
    // the descriptor may point at q's (mapped, aligned) memory.
    const bool no_keys = rows_k == 0;
    const void* k_data = no_keys ? pr.q : pr.k;
    const void* v_data = no_keys ? pr.q : pr.v;
    const int tma_rows_k = no_keys ? 1 : rows_k;
    auto mQ = make_tensor(make_gmem_ptr(static_cast<const Element*>(pr.q)), make_shape(rows_q, kHeadDim, hq, bext),
                          make_stride(pr.q_stride[1], _1{}, pr.q_stride[2], pr.q_stride[0]));
    auto mK = make_tensor(make_gmem_ptr(static_cast<const Element*>(k_data)), make_shape(tma_rows_k, kHeadDim, hk, kv_ext),
                          make_stride(pr.k_stride[1], _1{}, pr.k_stride[2], pr.k_stride[0]));
    // FP8's V^T: the padded extent, not seqlen_k: the key permutation puts some real keys of the
    // last group of 16 at columns >= seqlen_k, which TMA must not clip. Packed: one batch entry of
    // vt_varlen_columns keys, sequences starting at vt_varlen_start.
    const int64_t sp = packed ? fp8::vt_varlen_columns(pr.total_k, pr.batch) : fp8::vt_padded_seqlen(pr.seqlen_k);
    const int rows_v = kV8 ? int(sp) : rows_k;
    auto mVt = [&] {
      if constexpr (kV8) {
        return make_tensor(make_gmem_ptr(static_cast<const ElementV*>(prob.vt)), make_shape(kHeadDim, int(sp), hk, bext),
                           make_stride(sp, _1{}, kHeadDim * sp, hk * kHeadDim * sp));
      } else {
        return make_tensor(make_gmem_ptr(static_cast<const ElementV*>(v_data)), make_shape(kHeadDim, tma_rows_k, hk, kv_ext),
                           make_stride(_1{}, pr.v_stride[1], pr.v_stride[2], pr.v_stride[0]));
      }
    }();
    const WindowBounds w = make_window(pr.window_left, pr.window_right, pr.seqlen_q, pr.seqlen_k);
    Params p{make_tma_copy(SM90_TMA_LOAD{}, mQ, SmemLayoutQ{}, Shape<BM, HD>{}, _1{}),
             make_tma_copy(TmaLoadKV{}, mK, take<0, 2>(SmemLayoutK{}), Shape<BN, HD>{}, Int<kClusterM>{}),
             make_tma_copy(TmaLoadKV{}, mVt, take<0, 2>(SmemLayoutVt{}), Shape<HD, BN>{}, Int<kClusterM>{}),
             sq, sk, hq, hk, b, int(pr.group()), pr.scale, pr.scale * 1.4426950408889634f, {},
             rows_q, rows_k, bext, rows_v, kv_ext, pr.cu_seqlens_q, pr.cu_seqlens_k, pr.seqused_q, pr.seqused_k,
             w.left, w.right, Softcap::make(pr.softcap, pr.scale), nullptr, 0, 0, row_shift(sq)};
    if constexpr (Cfg::kSoftcapRecipScore) {  // the softmax runs on -r: scale 2 softcap (Softcap::neg_recip)
      p.scale = 2.f * pr.softcap;
      p.scale_log2 = recip_score_scale_log2(pr.softcap);
      // run_fwd_softcap launches the fixed-max kernels only for caps that fit; should another
      // caller not, NaN (loud) rather than rows flushed to zero.
      if (Cfg::kSoftcapFixedMax && !softcap_fixed_max_fits(pr.softcap)) p.scale_log2 = NAN;
    }
    if (paged) {
      p.page_table = pr.page_table;
      p.page_table_stride = pr.page_table_stride;
      p.page_blocks = int(pr.page_size / kBlockN);
    }
    if constexpr (kFp8) {
      p.descale = {prob.q_descale, prob.k_descale, prob.v_descale,
                   {prob.q_descale_stride[0], prob.q_descale_stride[1], prob.q_descale_stride[2]},
                   {prob.k_descale_stride[0], prob.k_descale_stride[1], prob.k_descale_stride[2]},
                   {prob.v_descale_stride[0], prob.v_descale_stride[1]},
                   prob.o_rotation_seed,
                   prob.unrotate_o ? 1 : 0};
    }
    return p;
  }
  static const AttnProblem& attn_problem(const AttnProblem& pr) { return pr; }
  static const AttnProblem& attn_problem(const Fp8AttnProblem& pr) { return pr.base; }

  // ---- producer (one thread of the producer warp) -------------------------------------------------

  // TMA issue for one tile (Q once; K/V for blocks n_end-1 down to n_begin, the order the consumers visit
  // them: the masked diagonal/boundary blocks first). Called by a single thread.
  struct Loader {
    const Params& p;
    SharedStorage& ss;
    int head;
    SeqInfo si;

    // A (rows, cols) view starting at the sequence's first row (packed tensors, and Q/O's views
    // of kRowShift, whose offset is negative; kRowMode is the mode that runs along tokens).
    template <int kRowMode, bool kOffset = Cfg::kVarlen, class View>
    __device__ static auto from_row(const View& v, int offset) {
      using namespace cute;
      if constexpr (!kOffset) return v;
      else if constexpr (kRowMode == 0) return domain_offset(make_coord(offset, _0{}), v);
      else return domain_offset(make_coord(_0{}, offset), v);
    }

    // Where key block n_block lives in the K/V views: the batch coordinate and the block index
    // along rows. The sequence's own entry, or with a paged cache the page that holds the block
    // (an entry outside [0, num_pages) is out of the view's bounds: TMA reads zeros, never memory
    // outside the cache).
    struct BlockPlace {
      int batch, block;
    };
    __device__ BlockPlace place(int n_block) const {
      if constexpr (kPaged) {
        if (p.page_table != nullptr) {
          const int page = __ldg(p.page_table + si.batch * p.page_table_stride + n_block / p.page_blocks);
          return {page, n_block % p.page_blocks};
        }
      }
      return {si.batch, n_block};
    }

    // shift: rows the block is moved left by (the tail block, load_shift).
    __device__ auto k_src(int batch, int shift) const {
      using namespace cute;
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.rows_k, int(kHeadDim), p.heads_kv, p.kv_extent));
      Tensor mKs = from_row<0>(mK(_, _, head / p.group, batch), si.offset_k - shift);
      Tensor gK = local_tile(mKs, Shape<BN, HD>{}, make_coord(_, _0{}));
      return p.tma_k.get_slice(cluster_rank()).partition_S(gK);  // (TMA, 1, 1, n_block)
    }
    __device__ auto v_src(int batch, int shift) const {
      using namespace cute;
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(int(kHeadDim), p.rows_v, p.heads_kv, p.kv_extent));
      Tensor mVs = from_row<1>(mV(_, _, head / p.group, batch), si.offset_v - shift);
      Tensor gV = local_tile(mVs, Shape<HD, BN>{}, make_coord(_0{}, _));
      return p.tma_v.get_slice(cluster_rank()).partition_S(gV);  // (TMA, 1, 1, n_block)
    }

    __device__ void load_q(int m_block) const {
      using namespace cute;
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.rows_q, int(kHeadDim), p.heads_q, p.batch_extent));
      Tensor mQs = from_row<0, Cfg::kVarlen || kRowShift>(mQ(_, _, head, si.batch), si.offset_q);
      Tensor gQ = local_tile(mQs, Shape<BM, HD>{}, make_coord(m_block, _0{}));
      Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), SmemLayoutQ{});
      auto cta = p.tma_q.get_slice(_0{});
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.barrier_q, kQBytes);
      copy(p.tma_q.with(ss.barrier_q), cta.partition_S(gQ), cta.partition_D(sQ));
    }

    // This CTA's part of a multicast K/V tile (0 without a cluster: the whole tile).
    __device__ static auto cluster_rank() {
      if constexpr (kClusterM > 1) return int(cute::block_rank_in_cluster());
      else return cute::_0{};
    }
    // The TMA K/V copy bound to a stage's full barrier: every CTA of the cluster receives the part.
    template <class Tma>
    __device__ static auto kv_copy(const Tma& tma, uint64_t& full) {
      if constexpr (kClusterM > 1) return tma.with(full, uint16_t((1u << kClusterM) - 1u));
      else return tma.with(full);
    }

    __device__ void load_k(Pipeline& pipe, PipelineState st, int n_block) const {
      using namespace cute;
      Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), SmemLayoutK{});
      Tensor tKsK = p.tma_k.get_slice(cluster_rank()).partition_D(sK);
      const BlockPlace at = place(n_block);  // a paged lookup: read-ahead gained <= 1% (perf-notes)
      pipe.producer_acquire(st);
      copy(kv_copy(p.tma_k, *pipe.producer_get_barrier(st)), k_src(at.batch, load_shift(n_block))(_, _, _, at.block),
           tKsK(_, _, _, st.index()));
    }

    __device__ void load_v(Pipeline& pipe, PipelineState st, int n_block) const {
      using namespace cute;
      Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), SmemLayoutVt{});
      Tensor tVsV = p.tma_v.get_slice(cluster_rank()).partition_D(sV);
      const BlockPlace at = place(n_block);
      pipe.producer_acquire(st);
      copy(kv_copy(p.tma_v, *pipe.producer_get_barrier(st)), v_src(at.batch, load_shift(n_block))(_, _, _, at.block),
           tVsV(_, _, _, st.index()));
    }

    __device__ int load_shift(int n_block) const {
      if constexpr (kTailShift) return n_block == si.tail_block ? (n_block + 1) * kBlockN - si.seqlen_k : 0;
      return 0;
    }
  };

  // ---- consumers (all kNumMmaThreads threads) -----------------------------------------------------

  using Mask = FwdMask<kBlockM, kBlockN, Cfg::kCausalMask, Cfg::kLocal, kTailShift>;
  static constexpr int kRowsPerThread = 2;  // rows of a 64-row WGMMA accumulator held per thread
  using Softmax = std::conditional_t<kFp8, BlockScaledSoftmax<kRowsPerThread>,
                                     OnlineSoftmax<kRowsPerThread, Cfg::kSoftcapFixedMax>>;

  __device__ static Mask make_mask(const Params& p, const SeqInfo& si) {
    return Mask{si.seqlen_q, si.seqlen_k, p.window_left, p.window_right, si.tail_block};
  }

  // Key blocks [begin, end) a tile loads and multiplies (both roles compute them the same way);
  // end <= begin: the tile sees no key. Varlen: the grid covers max_seqlen_q, so tiles past a
  // sequence's rows exist and load nothing (the consumers skip them), and tiles past seqused_q
  // see no key (the consumers write their zeros).
  struct KeyBlocks {
    int begin, end;
  };
  __device__ static KeyBlocks keyed_blocks(const Mask& mask, const SeqInfo& si, int m_block) {
    if constexpr (Cfg::kVarlen) {
      if (m_block * kBlockM >= si.seqlen_q) return {0, 0};
    }
    return {mask.n_block_begin(m_block), mask.n_block_end(m_block)};
  }

  // Shared state set up once per CTA by its first threads, before the barrier that ends the
  // set-up: FP8 with a rotated V stores the rotation's sign bits.
  __device__ static void init_shared(const Params& p, SharedStorage& ss, int thread_idx) {
    if constexpr (kV8) {
      if (p.descale.unrotate_o && thread_idx < kHeadDim / 32)
        ss.o_signs[thread_idx] = fp8::sign_word(p.descale.o_rotation_seed, thread_idx);
    }
  }

  // The last step on O before the epilogue: FP8 with a rotated V multiplies it by M^T.
  template <class AccRowCol>
  __device__ static void finish_o(const Params& p, const SharedStorage& ss, AccRowCol& o_rc, int thread_idx) {
    if constexpr (kV8) {
      if (p.descale.unrotate_o) fp8::unrotate_rows<kHeadDim>(o_rc, ss.o_signs, thread_idx % 32);
    }
  }

  // The softmax state of one warpgroup's rows of a tile; FP8 folds the q descale of those 64 rows
  // (one quantisation block: 64 divides kQuantBlock) into the exponent multiplier and keeps
  // where the key blocks' descales are.
  __device__ static Softmax make_softmax(const Params& p, int m_block, int head, int batch, int wg) {
    if constexpr (kFp8) {
      static_assert(fp8::kQuantBlock % 64 == 0);
      const Descales& d = p.descale;
      const int kv = head / p.group;
      // A warpgroup whose rows all lie past seqlen_q (the last tile of 192 rows) or, with
      // kRowShift, above the sequence stores nothing, but must still read a descale inside the
      // array: clamp to the first or last block. The shift is whole warpgroups, so a warpgroup's
      // 64 rows still lie in one quantisation block.
      const int row = m_block * kBlockM + wg * 64 - (kRowShift ? p.row_shift : 0);
      const int q_block = max(min(row, p.seqlen_q - 1), 0) / fp8::kQuantBlock;
      const float qd = d.q == nullptr ? 1.f : __ldg(d.q + batch * d.q_stride[0] + head * d.q_stride[1] + q_block * d.q_stride[2]);
      const float vd = d.v == nullptr ? 1.f : __ldg(d.v + batch * d.v_stride[0] + kv * d.v_stride[1]);
      const float* kd = d.k == nullptr ? nullptr : d.k + batch * d.k_stride[0] + kv * d.k_stride[1];
      return Softmax(p.scale_log2 * qd, kd, d.k_stride[2], vd);
    } else {
      return Softmax(p.scale_log2);
    }
  }

  // The consumers' release of the Q buffer: every consumer thread arrives once per tile with keys,
  // and the producer syncs on it (with its own warp) before loading the next tile's Q there.
  __device__ static void release_query() {
    cutlass::arch::NamedBarrier::arrive(Cfg::kNumMmaThreads + 32, barrier_id(FwdBarrier::kQueryEmpty));
  }

  // Hands the tensor cores to the next consumer warpgroup (ping-pong). Warpgroup w waits on its
  // own turn barrier before issuing GEMMs and passes the turn on right after issuing them, so its
  // softmax runs while the next warpgroup's GEMMs execute.
  struct GemmTurn {
    int wg;
    __device__ void wait() const {
      if constexpr (Cfg::kPingPong)
        cutlass::arch::NamedBarrier::sync(256, barrier_id(FwdBarrier::kGemmTurnWG0, wg));
    }
    __device__ void pass() const {
      if constexpr (Cfg::kPingPong)
        cutlass::arch::NamedBarrier::arrive(256, barrier_id(FwdBarrier::kGemmTurnWG0, (wg + 1) % Cfg::kNumConsumerWG));
    }
  };

  // kNormOnTc: every consumer thread writes its share of the ones, then the async proxy (WGMMA)
  // is made to see them and the consumers sync once, before any tile.
  __device__ static void fill_ones(SharedStorage& ss, int thread_idx) {
    if constexpr (kNormOnTc) {
      constexpr int kCount = cute::cosize_v<SmemLayoutOnes>;
      for (int i = thread_idx; i < kCount; i += Cfg::kNumMmaThreads) ss.ones[i] = ElementV(1.f);
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(FwdBarrier::kEpilogueWG0, 0));
    }
  }

  // Runs key blocks kb.end-1 .. kb.begin of one query tile (a non-empty range); on return tOrO
  // holds the unnormalised O and softmax the row max/sum. `st` is the shared K/V ring position,
  // advanced by the number of blocks.
  // Cfg::kEarlyQ: arrive on QueryEmpty as soon as the tile's last S GEMM has completed, the last
  // read of Q, so the producer's next Q load overlaps the last softmax, the last P V and the
  // epilogue.
  // Traced builds (HOPATTN_FWD_TRACE=1, ws/trace.cuh) also take `marks`: thread 0 stamps there when
  // Q and the first K are in shared memory, when the tile's first S GEMM has completed, when the
  // walk is done (the last block's softmax and P), and when the last P V has completed.
  template <class FragO>
  __device__ static void mma_tile(const Params& p, SharedStorage& ss, Pipeline& pipe_k, Pipeline& pipe_v,
                                  PipelineState& st, uint32_t q_phase, int thread_idx, const Mask& mask,
                                  int m_block, KeyBlocks kb, FragO& tOrO, Softmax& softmax
#if defined(HOPATTN_FWD_TRACE) && HOPATTN_FWD_TRACE
                                  , uint64_t (&marks)[kFwdTraceMarks]
#endif
  ) {
    using namespace cute;
    const int n_end = kb.end, n_begin = kb.begin;
    TiledMmaQK mma_qk;
    TiledMmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(thread_idx);
    auto thr_pv = mma_pv.get_thread_slice(thread_idx);
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), SmemLayoutVt{});
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);  // smem descriptors
    Tensor tSrK = thr_qk.partition_fragment_B(sK);
    Tensor tOrV = thr_pv.partition_fragment_B(sV);
    Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<BM, BN>{}));
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<BM, BN>{});
    auto s_rc = acc_rowcol(tSrS);
    auto c_rc = acc_rowcol(tScS);
    auto o_rc = acc_rowcol(tOrO);
    auto tOrP = [&] {
      if constexpr (kV8) return make_fp8_p_fragment<kBlockN>();
      else return cute::make_tensor<ElementV>(acc_to_a_operand_layout(tSrS.layout()));
    }();
    // kNormOnTc: each block's normaliser, P x ones, comes back in tLrL (4 floats, live from its
    // issue to the wait for its batch) and is added to softmax.norm_sum (2 floats) there.
    auto tLrL = [&] {
      if constexpr (kNormOnTc) return partition_fragment_C(TiledMmaNorm{}, Shape<BM, _8>{});
      else return 0;
    }();
    // mma (+)= a b, with O's normaliser of the P in tOrP in the same batch (kNormOnTc).
    auto issue_with_norm = [&](auto zero_init, auto& mma, auto& a, const auto& b, auto& c) {
      constexpr bool kZero = decltype(zero_init)::value;
      if constexpr (kNormOnTc) {
        TiledMmaNorm mma_norm;
        Tensor sOnes = make_tensor(make_smem_ptr(ss.ones.data()), SmemLayoutOnes{});
        Tensor tLrOnes = mma_norm.get_thread_slice(thread_idx).partition_fragment_B(sOnes);
        wgmma_issue_with_norm<kZero>(mma, a, b, c, mma_norm, tOrP, tLrOnes, tLrL);
      } else {
        wgmma_issue<kZero>(mma, a, b, c);
      }
    };
    auto add_norm = [&] {  // after the wait for a batch issued by issue_with_norm
      if constexpr (kNormOnTc) {
        auto l_rc = acc_rowcol(tLrL);  // C fragment (64 x 8): rows g and g + 8, all columns equal
        CUTE_UNROLL
        for (int r = 0; r < kRowsPerThread; ++r) softmax.norm_sum[r] += l_rc(r, 0);
      }
    };
    // The warpgroup through a shuffle (canonical_warp_group_idx), which ptxas keeps in a uniform
    // register: from thread_idx / 128 the next turn's barrier id was a vector value that the
    // 240-register FP8 d256 kernel spilled and reloaded before every hand-off.
    const GemmTurn turn{cutlass::canonical_warp_group_idx() - 1};

    auto to_p = [&]() {  // P = 16-bit or e4m3 (S) as the A operand
      if constexpr (kV8) convert_p_fp8(tSrS, tOrP);
      else convert_fragment(tSrS, tOrP);
    };
    auto q_read_done = [&](int n) {  // call once S of block n has completed
      if constexpr (Cfg::kEarlyQ) {
        if (n == n_begin)
          release_query();
      }
    };
    // FP8: the key block's exponent multiplier, loaded before its S GEMM is waited for.
    float block_c = 0.f;
    auto load_block_scale = [&](int n_block) {
      if constexpr (kFp8) block_c = softmax.block_scale(n_block * kBlockN / Cfg::kKeyQuantBlock);
    };
    auto masked_softmax = [&](int n_block, float (&factor)[kRowsPerThread]) {
      // Softcap before the mask, so that masked scores stay -inf.
      if constexpr (Cfg::kSoftcap) {
        CUTE_UNROLL
        for (int i = 0; i < size(tSrS); ++i) {  // i is a constant here: each score's form is fixed
          if constexpr (Cfg::kSoftcapRecipScore) {
            if (i % 5 < Cfg::kSoftcapRcpOnFmaOf5) tSrS(i) = p.softcap.neg_recip_on_fma(tSrS(i));
            else tSrS(i) = p.softcap.neg_recip(tSrS(i));
          } else {
            if (i % 5 < Cfg::kSoftcapRcpOnFmaOf5) tSrS(i) = p.softcap.on_fma(tSrS(i));
            else if constexpr (Cfg::kSoftcapOneFfma) tSrS(i) = p.softcap.one_ffma(tSrS(i));
            else tSrS(i) = p.softcap(tSrS(i));
          }
        }
      }
      if (mask.block_needs_mask(m_block, n_block)) mask.apply(s_rc, c_rc, m_block, n_block);
      if constexpr (kFp8) softmax.update(s_rc, factor, block_c);
      else softmax.update(s_rc, factor);
    };

    // A K or V stage's release (see kPairReleaseFromTid); `barriers` is that pipeline's storage.
    auto release = [&](Pipeline& pipe, typename Pipeline::SharedStorage& barriers, PipelineState s) {
      if constexpr (kPairReleaseFromTid) release_stage_in_pair(stage_barrier(barriers.empty_barrier_[s.index()]));
      else pipe.consumer_release(s);
    };

    // Q was issued by the producer for this tile; its barrier completes once per loaded tile,
    // so the caller flips q_phase after every tile that has key blocks.
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_q, q_phase);

    if constexpr (!Cfg::kIntraWGOverlap) {
      clear(tOrO);
      for (int n = n_end - 1; n >= n_begin; --n) {
        load_block_scale(n);
        pipe_k.consumer_wait(st);
        wgmma_issue<true>(mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);
        warpgroup_wait<0>();
        release(pipe_k, ss.pipe_k, st);
        q_read_done(n);
        float factor[kRowsPerThread];
        masked_softmax(n, factor);
        softmax.rescale(o_rc, factor);
        to_p();
        pipe_v.consumer_wait(st);
        issue_with_norm(cute::false_type{}, mma_pv, tOrP, tOrV(_, _, _, st.index()), tOrO);
        warpgroup_wait<0>();
        add_norm();
        release(pipe_v, ss.pipe_v, st);
        ++st;
      }
    } else {
      // Algorithm 2 of the paper: S_{j-1} = Q K_{j-1}^T is issued together with O += P_j V_j;
      // the softmax of S_{j-1} runs while O's GEMM is still executing, and only the O rescale
      // waits for it. The first block has no PV partner; the last PV has no S partner.
      int n = n_end - 1;
      load_block_scale(n);
      pipe_k.consumer_wait(st);
#if defined(HOPATTN_FWD_TRACE) && HOPATTN_FWD_TRACE
      if (thread_idx == 0) marks[0] = bwd::trace_clock();  // Q and the first K are in
#endif
      turn.wait();
      wgmma_issue<true>(mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);
      turn.pass();
      warpgroup_wait<0>();
#if defined(HOPATTN_FWD_TRACE) && HOPATTN_FWD_TRACE
      if (thread_idx == 0) marks[1] = bwd::trace_clock();  // the first S is done (its turn included)
#endif
      release(pipe_k, ss.pipe_k, st);
      q_read_done(n);
      {
        float factor[kRowsPerThread];
        masked_softmax(n, factor);  // O is still empty: nothing to rescale
      }
      to_p();
      for (--n; n >= n_begin; --n) {
        PipelineState st_v = st;  // V of the block whose P is in tOrP
        ++st;
        load_block_scale(n);
        pipe_k.consumer_wait(st);
        // With kKLead the producer sends K_n before V_{n+1}: issue S as soon as K_n is in, and
        // wait for V only then (holding the turn: the tensor cores are busy with this S anyway).
        if constexpr (!Cfg::kKLead) pipe_v.consumer_wait(st_v);
        turn.wait();
        issue_with_norm(cute::true_type{}, mma_qk, tSrQ, tSrK(_, _, _, st.index()), tSrS);  // + P's normaliser
        if constexpr (Cfg::kKLead) pipe_v.consumer_wait(st_v);
        if (n == n_end - 2) {
          wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, st_v.index()), tOrO);
        } else {
          wgmma_issue<false>(mma_pv, tOrP, tOrV(_, _, _, st_v.index()), tOrO);
        }
        turn.pass();
        warpgroup_wait<1>();  // S done, PV may still run
        add_norm();
        release(pipe_k, ss.pipe_k, st);
        q_read_done(n);
        float factor[kRowsPerThread];
        masked_softmax(n, factor);
        if constexpr (Cfg::kHoldP) hold_p_registers(tOrP, factor[0]);  // factor: exp2 of a difference <= 0, or 1
        warpgroup_wait<0>();
        release(pipe_v, ss.pipe_v, st_v);
        softmax.rescale(o_rc, factor);
        to_p();
      }
#if defined(HOPATTN_FWD_TRACE) && HOPATTN_FWD_TRACE
      if (thread_idx == 0) marks[2] = bwd::trace_clock();  // the walk is done: only the last P V is left
#endif
      pipe_v.consumer_wait(st);
      turn.wait();
      if (n_end - n_begin == 1) {
        issue_with_norm(cute::true_type{}, mma_pv, tOrP, tOrV(_, _, _, st.index()), tOrO);
      } else {
        issue_with_norm(cute::false_type{}, mma_pv, tOrP, tOrV(_, _, _, st.index()), tOrO);
      }
      turn.pass();
      warpgroup_wait<0>();
#if defined(HOPATTN_FWD_TRACE) && HOPATTN_FWD_TRACE
      if (thread_idx == 0) marks[3] = bwd::trace_clock();  // the last P V is done
#endif
      add_norm();
      release(pipe_v, ss.pipe_v, st);
      ++st;
    }
  }

  // 192-row tiles (three consumer warpgroups) pad a length that is no multiple of 192 with one or
  // two warpgroups of rows that are never stored: d64 at 512 keys computes 576 rows, at 1k 1152.
  // Such a warpgroup (rows past rows_q, or with kRowShift above the sequence) walks the tile with
  // idle_tile instead. Alone it measured FP8 d64 +6.5% at 512 keys and 16-bit d64 level (session
  // 61): the cheap last tiles all went to the same CTAs, whose round-robin aliased with the query
  // blocks per head; with the rounds rotated (round_rotation.hpp, session 62) d64 gains 7-8% at
  // 512 / 1k keys. Two-warpgroup tiles are left as they were (a padding warpgroup there is rarer,
  // and their O in V and cluster releases would need the same treatment). So are packed batches:
  // the branch made ptxas treat their tile loop as divergent (key loop 759 -> 786 instructions,
  // R2UR 8 -> 48, 19 more LDL/STL at d64 bf16), with the predicate through redux.sync too.
  static constexpr bool kIdlePadding = Cfg::kNumConsumerWG > 2 && !Cfg::kVarlen && !Cfg::kOInV && Cfg::kClusterM == 1;
  __device__ static bool padding_warpgroup(const SeqInfo& si, int m_block, int wg) {
    const int row = m_block * kBlockM + wg * 64;
    return row >= si.rows_q || row + 64 <= (kRowShift ? si.row_shift : 0);
  }

  // mma_tile's hand-shakes without its work: the same turns (the turn barriers form a fixed ring,
  // so a warpgroup that skipped them would stall the next), Q's release where mma_tile releases it,
  // and each K/V stage released once it has been filled. A release before the fill would count
  // toward the stage's previous fill, which the other warpgroups may still be reading.
  __device__ static void idle_tile(SharedStorage& ss, Pipeline& pipe_k, Pipeline& pipe_v, PipelineState& st,
                                   uint32_t q_phase, KeyBlocks kb) {
    static_assert(kIdlePadding);
    const GemmTurn turn{cutlass::canonical_warp_group_idx() - 1};
    // Q's release counts every consumer thread once per tile; waiting for this tile's Q keeps this
    // warpgroup's release from landing on the previous tile's phase.
    cutlass::arch::ClusterTransactionBarrier::wait(&ss.barrier_q, q_phase);
    for (int n = kb.end - 1; n >= kb.begin; --n) {
      if constexpr (Cfg::kIntraWGOverlap) {  // S of block n (with P V of block n + 1)
        turn.wait();
        turn.pass();
      }
      pipe_k.consumer_wait(st);
      pipe_k.consumer_release(st);
      if constexpr (Cfg::kEarlyQ) {
        if (n == kb.begin)
          release_query();
      }
      pipe_v.consumer_wait(st);
      pipe_v.consumer_release(st);
      ++st;
    }
    if constexpr (Cfg::kIntraWGOverlap) {  // the last P V
      turn.wait();
      turn.pass();
    }
  }
};

}  // namespace hopattn::sm90::ws
