// The backward main loop of one key block: the producer warp's TMA loads (K and V once; per query
// block Q with its base-2 lse, and dO with its D = rowsum(dO * O), into kStages-deep rings guarded
// by PipelineTmaAsync full/empty mbarriers) and the consumer warpgroups' five WGMMAs per step:
//   S^T = K Q^T, dP^T = V dO^T (both from smem), P^T = exp2(S^T * scale_log2 - lse),
//   dS^T = P^T * (dP^T - D), dV += P^T dO and dK += dS^T Q (P^T, dS^T from registers),
//   dQ = dS K (dS through smem, shared by both warpgroups).
// Working on the transposed scores puts the keys on the WGMMA M side, so dK/dV accumulators never
// leave registers. How the consumer warpgroups share the GEMMs (by keys, or by head_dim at d256)
// is BwdConfig's choice; consumer_key_split.cuh and consumer_head_split.cuh run the steps.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include <type_traits>
#include <utility>

#include "api/problem.hpp"
#include "sm90/ws/fragment_layout.cuh"
#include "sm90/bwd/workspace.hpp"
#include "sm90/ws/mainloop.cuh"  // wgmma_issue

namespace hopattn::sm90::bwd {

// The dS^T buffers (two) as written, St (keys, queries), and as the dQ GEMM reads them, S
// (queries, keys): the same bytes. Queries contiguous unless kKeysInner (BwdMainloop::kdQSwapAB).
template <class Element, class BN, class BM, bool kKeysInner>
struct dSLayouts {
  using St = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<BN, BM, cute::_2>{}));
  using S = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{}, cute::Shape<BM, BN, cute::_2>{},
                                         cute::Step<cute::_2, cute::_1, cute::_3>{}));
};
template <class Element, class BN, class BM>
struct dSLayouts<Element, BN, BM, true> {
  using S = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<BM, BN, cute::_2>{}));
  using St = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{}, cute::Shape<BN, BM, cute::_2>{},
                                          cute::Step<cute::_2, cute::_1, cute::_3>{}));
};

template <class Cfg>
struct BwdMainloop {
  using Element = typename Cfg::Element;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
  static constexpr int kStages = Cfg::kStages;
  using BM = cute::Int<kBlockM>;
  using BN = cute::Int<kBlockN>;
  using HD = cute::Int<kHeadDim>;
  using ST = cute::Int<kStages>;

  // Shared-memory layouts. Every operand is stored once, 128-byte swizzled, and read in two
  // orientations: a K-major (rows, head_dim) tile with its 8x64 atoms stacked along rows first is,
  // byte for byte, the MN-major (head_dim, rows) tile with its 64x8 atoms stacked along rows first
  // (Step<_2, _1>). So Q serves S^T = K Q^T as a K-major B and dK += dS^T Q as an MN-major B; dO
  // likewise for dP^T and dV; K serves S^T as a K-major A and dQ = dS K as an MN-major B.
  using SmemLayoutK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<BN, HD>{}));
  using SmemLayoutKt = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                    cute::Shape<HD, BN>{}, cute::Step<cute::_2, cute::_1>{}));
  using SmemLayoutQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<BM, HD, ST>{}));
  using SmemLayoutQt = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                    cute::Shape<HD, BM, ST>{}, cute::Step<cute::_2, cute::_1, cute::_3>{}));
  // dQ transposed: dQ^T = K^T dS^T, head_dim on the WGMMA M side (64 per warpgroup) and the queries
  // on N. Needed when the step is not a multiple of 64 queries (80 at d128), since dQ = dS K puts
  // the queries on M, 64 rows per warpgroup atom.
  static constexpr bool kdQSwapAB = kBlockM % 64 != 0;
  // dS^T (and, head_dim split, P^T) as written from the accumulators: (keys, queries). Two buffers
  // each.
  // - dQ = dS K: queries contiguous, the K-major A operand of dK (head_dim split); read back by the
  //   dQ GEMM as the MN-major A operand (queries, keys).
  // - dQ^T = K^T dS^T: keys contiguous (a 128-byte swizzle needs a multiple of 64 elements along the
  //   contiguous mode, which the keys have and 80 queries have not), read by the dQ GEMM as the
  //   K-major B operand (queries, keys); written through a transposing stmatrix.
  using SmemLayoutdSt = typename dSLayouts<Element, BN, BM, kdQSwapAB>::St;
  using SmemLayoutdS = typename dSLayouts<Element, BN, BM, kdQSwapAB>::S;
  // lse or D of one query block per stage; each stage starts on a 128-byte boundary, the alignment
  // a TMA destination in shared memory needs (80 floats are 320 bytes).
  static constexpr int kRowStageStride = (kBlockM + 31) / 32 * 32;
  using SmemLayoutRow = cute::Layout<cute::Shape<BM, ST>, cute::Stride<cute::_1, cute::Int<kRowStageStride>>>;
  // dQ of one step on its way to the fp32 accumulator, in the order the accumulator fragments hold
  // it: value v of consumer thread t at ((v / 4) * kNumMmaThreads + t) * 4 + v % 4, so that each
  // warp's 16-byte stores are consecutive (conflict-free) and one bulk reduce-add moves the tile.
  // The workspace accumulator uses the same order; the postprocess maps it back to (row, col).
  static constexpr int kdQElems = kBlockM * kHeadDim;
  static constexpr int kdQPerThread = kdQElems / Cfg::kNumMmaThreads;
  // Head_dim split: each warpgroup's half of the tile leaves as two 16 KB chunks (staged in the
  // halves of the step's Q and dO buffers that only that warpgroup read), value v of warpgroup-local
  // thread t at chunk v / 32, position ((v % 32) / 4 * 128 + t) * 4 + v % 4.
  static constexpr int kdQChunkElems = kdQElems / 4;
  // Where value v of dQ-GEMM thread t lies in a tile's fragment-ordered accumulator (the order the
  // main kernel adds in and the postprocess reads back); groups of four v are contiguous.
  __host__ __device__ static constexpr int dq_offset(int t, int v) {
    if constexpr (Cfg::kSplitHeadDim) {
      return (t / 128) * (2 * kdQChunkElems) + (v / 32) * kdQChunkElems + (((v % 32) / 4) * 128 + t % 128) * 4 + v % 4;
    } else {
      // Each consumer warpgroup's values fill one half, so the dQ writer adds the halves separately.
      return (t / 128) * (kdQElems / 2) + ((v / 4) * 128 + t % 128) * 4 + v % 4;
    }
  }

  // S^T and dP^T: (keys, queries). Key split: one 64-key WGMMA atom per consumer warpgroup, both
  // GEMMs on each. Head_dim split: the whole 64-key tile on one warpgroup (S^T on warpgroup 0, dP^T
  // on warpgroup 1), so its thread slice is taken with the warpgroup-local thread index.
  using WarpGroupsAlongM = cute::Layout<cute::Shape<cute::Int<Cfg::kNumConsumerWG>, cute::_1, cute::_1>>;
  using WarpGroupsAlongN = cute::Layout<cute::Shape<cute::_1, cute::Int<Cfg::kNumConsumerWG>, cute::_1>>;
  using AtomSdP = decltype(cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, BM, HD>>());
  using TiledMmaSdP = std::conditional_t<Cfg::kSplitHeadDim, decltype(cute::make_tiled_mma(AtomSdP{})),
                                         decltype(cute::make_tiled_mma(AtomSdP{}, WarpGroupsAlongM{}))>;
  // dK, dV: (keys, head_dim), K = queries, A (P^T or dS^T) from registers. Key split: each
  // warpgroup its 64 keys, all of head_dim. Head_dim split: all 64 keys, half of head_dim each,
  // used only for warpgroup 0's dV (P^T is in its registers); the others use TiledMmadKVSmemA.
  using AtomdKVRegA = decltype(cute::GMMA::rs_op_selector<Element, Element, float,
                                                          cute::Shape<cute::_64, cute::Int<Cfg::kSplitHeadDim ? kHeadDim / 2 : kHeadDim>, BM>,
                                                          cute::GMMA::Major::K, cute::GMMA::Major::MN>());
  using TiledMmadKV = std::conditional_t<Cfg::kSplitHeadDim, decltype(cute::make_tiled_mma(AtomdKVRegA{}, WarpGroupsAlongN{})),
                                         decltype(cute::make_tiled_mma(AtomdKVRegA{}, WarpGroupsAlongM{}))>;
  // Head_dim split, both dK and warpgroup 1's dV: A (dS^T, P^T) from the shared tiles. From
  // registers, their 16 values would be live beside dK, dV and dQ while dQ and dK run, and ptxas
  // serialises every WGMMA (C7512). Same shape and warpgroup layout as TiledMmadKV, so the B
  // fragments (Operands::dout_t, q_t) partitioned for one serve the other.
  using AtomdKVSmemA = decltype(cute::GMMA::ss_op_selector<Element, Element, float,
                                                           cute::Shape<cute::_64, cute::Int<kHeadDim / 2>, BM>,
                                                           cute::GMMA::Major::K, cute::GMMA::Major::MN>());
  using TiledMmadKVSmemA = decltype(cute::make_tiled_mma(AtomdKVSmemA{}, WarpGroupsAlongN{}));
  // dQ: (queries, head_dim), K = keys; the two warpgroups split head_dim. Transposed (kdQSwapAB):
  // dQ^T (head_dim, queries), A = K^T (MN-major), B = dS (K-major), one 64-row head_dim slice per
  // warpgroup.
  using AtomdQ = decltype(cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kHeadDim / 2>, BN>,
                                                     cute::GMMA::Major::MN, cute::GMMA::Major::MN>());
  using AtomdQt = decltype(cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, BM, BN>,
                                                      cute::GMMA::Major::MN, cute::GMMA::Major::K>());
  using TiledMmadQ = std::conditional_t<kdQSwapAB, decltype(cute::make_tiled_mma(AtomdQt{}, WarpGroupsAlongM{})),
                                        decltype(cute::make_tiled_mma(AtomdQ{}, WarpGroupsAlongN{}))>;
  static_assert(!kdQSwapAB || kHeadDim == 64 * Cfg::kNumConsumerWG, "dQ^T: one 64-row head_dim slice per warpgroup");
  // The dQ accumulator tile as the dQ GEMM computes it: (queries, head_dim), or transposed.
  using dQTileShape = std::conditional_t<kdQSwapAB, cute::Shape<HD, BM>, cute::Shape<BM, HD>>;
  static_assert(Cfg::kNumConsumerWG == 2, "dQ splits head_dim over exactly two warpgroups");

  // Global views: (seq, head_dim, head, batch) with the caller's strides; the padded per-row
  // workspace arrays as (row, head, batch).
  using GShape = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStride = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using GTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<const Element*>(nullptr)), GShape{}, GStride{}));
  using GRowTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<const float*>(nullptr)),
                                                cute::Shape<int32_t, int32_t, int32_t>{},
                                                cute::Stride<cute::_1, int64_t, int64_t>{}));
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GTensor{}, cute::take<0, 2>(SmemLayoutQ{}),
                                            cute::Shape<BM, HD>{}, cute::_1{}));
  using TmaK = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GTensor{}, SmemLayoutK{}, cute::Shape<BN, HD>{}, cute::_1{}));
  using TmaRow = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GRowTensor{}, cute::Layout<cute::Shape<BM>>{},
                                              cute::Shape<BM>{}, cute::_1{}));

  static constexpr uint32_t kRowBytes = kBlockM * sizeof(float);
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element) + kRowBytes;  // Q + lse (dO + D alike)
  static constexpr uint32_t kKVBytes = 2 * kBlockN * kHeadDim * sizeof(Element);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;

  // Key split: dS^T double-buffered (one warpgroup may write step i+1 while the other still
  // multiplies step i) and dQ staged for one bulk reduce-add.
  struct SharedStorageKeySplit {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> dout;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutdSt>, 1024> ds;
    cute::array_aligned<float, kdQElems, 128> dq;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutRow>, 128> lse;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutRow>, 128> dpsum;
    typename Pipeline::SharedStorage pipe_q;
    typename Pipeline::SharedStorage pipe_do;
    uint64_t barrier_kv;  // ClusterTransactionBarrier: K and V arrived
  };
  // Head_dim split (d256): K, V, two stages of Q and dO take 192 KB, P^T and dS^T (both
  // double-buffered, so no barrier is needed before overwriting them: the writer of step i+2 has
  // passed a barrier the reader crosses only after finishing step i) 32 KB: 224 of the 227 KB. No
  // separate room to stage dQ: each warpgroup stages its half in the Q and dO halves it alone read.
  struct SharedStorageHeadSplit {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> dout;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutdSt>, 1024> p;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutdSt>, 1024> ds;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutRow>, 128> lse;
    cute::array_aligned<float, cute::cosize_v<SmemLayoutRow>, 128> dpsum;
    typename Pipeline::SharedStorage pipe_q;
    typename Pipeline::SharedStorage pipe_do;
    uint64_t barrier_kv;
    int tail_last;  // a split unit's piece: whether it was the unit's last (add_tail_piece)
  };
  using SharedStorage = std::conditional_t<Cfg::kSplitHeadDim, SharedStorageHeadSplit, SharedStorageKeySplit>;

  struct Params {
    TmaQ tma_q, tma_do;
    TmaK tma_k, tma_v;
    TmaRow tma_lse, tma_dpsum;
    // Fixed-length batches: the lengths. Varlen: the max_seqlen bounds.
    int seqlen_q, seqlen_k, seqlen_q_padded, heads_q, heads_kv, batch, group;
    float scale_log2;
    // Packed (varlen) batches: TMA views of (total tokens, 1 batch), the index arrays (null when
    // fixed-length) and the padded per-row workspace rows (RowLayout).
    int rows_q, rows_k, batch_extent;
    const int32_t* cu_q;
    const int32_t* cu_k;
    const int32_t* used_q;
    const int32_t* used_k;
    RowLayout row_layout;
    int window_left, window_right;  // the masked kernels' bounds, as the forward's (ws/mask.cuh)
    ws::Softcap softcap;            // the kSoftcap kernel's: ws::Softcap::make
    float softcap_t;                // 1 / (softcap log2(e)): see softcap_grad
  };

  // One batch entry's place in the tensors and the workspace, and its lengths (see the forward's
  // SeqInfo; here also where its per-row workspace rows start). Computed once per CTA.
  struct SeqInfo {
    int offset_q, offset_k;  // first token row (0 for fixed-length batches)
    int len_k;               // key rows whose dK/dV are written: the sequence's length
    int seqlen_q, seqlen_k;  // query rows and keys that take part: seqused, else the lengths
    int batch;               // batch coordinate of the TMA views (0 when packed)
    int64_t row_base;        // workspace row of (this batch entry, head 0, row 0): RowLayout
    // Masked kernels: query i sees keys i + d - left <= j <= i + d + right (d = seqlen_k - seqlen_q),
    // the bounds as Params' (unbounded stored as the max seqlen_k).
    int left, right;
  };
  // The window bounds the kernel uses: run-time (Params) in the local kernel, causal's otherwise
  // (right 0, left past every key), so the causal kernel folds them into its arithmetic.
  static constexpr int kUnboundedLeft = 1 << 30;
  __device__ static int window_left(const Params& p) { return Cfg::kLocal ? p.window_left : kUnboundedLeft; }
  __device__ static int window_right(const Params& p) { return Cfg::kLocal ? p.window_right : 0; }
  __device__ static SeqInfo seq_info(const Params& p, int b) {
    if (p.cu_q == nullptr)
      return {0, 0, p.seqlen_k, p.seqlen_q, p.seqlen_k, b, p.row_layout.base(b, 0), window_left(p), window_right(p)};
    // Clamped to the tensors (unchecked index values give wrong rows, never stray accesses).
    const int oq = min(max(__ldg(p.cu_q + b), 0), p.rows_q);
    const int ok = min(max(__ldg(p.cu_k + b), 0), p.rows_k);
    const int lq = min(max(__ldg(p.cu_q + b + 1) - oq, 0), p.rows_q - oq);
    const int lk = min(max(__ldg(p.cu_k + b + 1) - ok, 0), p.rows_k - ok);
    const int uq = p.used_q == nullptr ? lq : min(max(__ldg(p.used_q + b), 0), lq);
    const int uk = p.used_k == nullptr ? lk : min(max(__ldg(p.used_k + b), 0), lk);
    return {oq, ok, lk, uq, uk, 0, p.row_layout.base(b, oq), window_left(p), window_right(p)};
  }

  static Params make_params(const AttnBackwardProblem& bp, float* lse_log2, float* dpsum, const RowLayout& rl) {
    using namespace cute;
    const AttnProblem& pr = bp.fwd;
    const int sq = int(pr.seqlen_q), sk = int(pr.seqlen_k), hq = int(pr.heads_q), hk = int(pr.heads_kv), b = int(pr.batch);
    const bool packed = pr.varlen();
    const int rows_q = packed ? int(pr.total_q) : sq, rows_k = packed ? int(pr.total_k) : sk, bext = packed ? 1 : b;
    auto view = [&](const void* ptr, int seq, int heads, const int64_t (&s)[3]) {
      return make_tensor(make_gmem_ptr(static_cast<const Element*>(ptr)), make_shape(seq, int(kHeadDim), heads, bext),
                         make_stride(s[1], _1{}, s[2], s[0]));
    };
    // (row, head, batch): fixed-length rows of each (batch, head) are contiguous; packed ones are
    // one (heads, padded total) array whose sequences start at their RowLayout bases.
    auto rows = [&](const float* ptr) {
      return make_tensor(make_gmem_ptr(ptr), make_shape(int(rl.head_stride), hq, bext),
                         make_stride(_1{}, rl.head_stride, rl.head_stride * hq));
    };
    const auto q_tile = take<0, 2>(SmemLayoutQ{});
    const ws::WindowBounds w = ws::make_window(pr.window_left, pr.window_right, pr.seqlen_q, pr.seqlen_k);
    return Params{make_tma_copy(SM90_TMA_LOAD{}, view(pr.q, rows_q, hq, pr.q_stride), q_tile, Shape<BM, HD>{}, _1{}),
                  make_tma_copy(SM90_TMA_LOAD{}, view(bp.dout, rows_q, hq, bp.do_stride), q_tile, Shape<BM, HD>{}, _1{}),
                  make_tma_copy(SM90_TMA_LOAD{}, view(pr.k, rows_k, hk, pr.k_stride), SmemLayoutK{}, Shape<BN, HD>{}, _1{}),
                  make_tma_copy(SM90_TMA_LOAD{}, view(pr.v, rows_k, hk, pr.v_stride), SmemLayoutK{}, Shape<BN, HD>{}, _1{}),
                  make_tma_copy(SM90_TMA_LOAD{}, rows(lse_log2), Layout<Shape<BM>>{}, Shape<BM>{}, _1{}),
                  make_tma_copy(SM90_TMA_LOAD{}, rows(dpsum), Layout<Shape<BM>>{}, Shape<BM>{}, _1{}),
                  sq, sk, int(rl.head_stride), hq, hk, b, int(pr.group()), pr.scale * 1.4426950408889634f,
                  rows_q, rows_k, bext, pr.cu_seqlens_q, pr.cu_seqlens_k, pr.seqused_q, pr.seqused_k, rl,
                  w.left, w.right, ws::Softcap::make(pr.softcap, pr.scale),
                  pr.softcap > 0.f ? 1.f / (pr.softcap * 1.4426950408889634f) : 0.f};
  }

  // Query blocks [m_begin, m_end) see at least one key of key block n_block (masked: query i sees
  // keys i + d - left .. i + d + right, d = seqlen_k - seqlen_q; causal is right = 0 with left
  // unbounded). Possibly empty: always for a key block past the sequence's keys (varlen: the grid
  // covers max_seqlen_k), and, with a window, for keys no query's window reaches.
  struct QueryRange {
    int m_begin, m_end;
  };
  __device__ static QueryRange query_range(const SeqInfo& si, int n_block) {
    const int m_end = (si.seqlen_q + kBlockM - 1) / kBlockM;
    if (n_block * kBlockN >= si.seqlen_k) return {m_end, m_end};
    if constexpr (!Cfg::kCausal) {
      return {0, m_end};
    } else {
      // 64-bit: the sums of lengths and bounds may pass INT_MAX at the largest sizes.
      const int64_t d = int64_t(si.seqlen_k) - si.seqlen_q;
      const int64_t first_row = int64_t(n_block) * kBlockN - d - si.right;  // first query seeing key n_block*kBlockN
      const int64_t key_last = min((n_block + 1) * kBlockN, si.seqlen_k) - 1;
      const int64_t reach = key_last - d + si.left;  // last query seeing key_last
      const int64_t last_row = reach < si.seqlen_q - 1 ? reach : int64_t(si.seqlen_q) - 1;
      if (first_row >= si.seqlen_q || last_row < 0 || first_row > last_row) return {m_end, m_end};
      return {first_row <= 0 ? 0 : int(first_row / kBlockM), int(last_row / kBlockM) + 1};
    }
  }

  // ---- what both consumer variants read ---------------------------------------------------------

  template <class Layout>
  using SmemTensor = decltype(cute::make_tensor(cute::make_smem_ptr(static_cast<Element*>(nullptr)), Layout{}));
  using SmemRowTensor = decltype(cute::make_tensor(cute::make_smem_ptr(static_cast<float*>(nullptr)), SmemLayoutRow{}));
  template <class Layout>
  __device__ static SmemTensor<Layout> smem(Element* p) {
    return cute::make_tensor(cute::make_smem_ptr(p), Layout{});
  }
  template <class Thr, class Layout>
  using FragA = decltype(std::declval<Thr&>().partition_fragment_A(std::declval<SmemTensor<Layout>&>()));
  template <class Thr, class Layout>
  using FragB = decltype(std::declval<Thr&>().partition_fragment_B(std::declval<SmemTensor<Layout>&>()));

  // The dQ GEMM's operand fragments (only the orientation kdQSwapAB picks is instantiated).
  template <class ThrdQ, bool kSwap = kdQSwapAB>
  struct DqOperands {
    using A = FragA<ThrdQ, SmemLayoutdS>;
    using B = FragB<ThrdQ, SmemLayoutKt>;
  };
  template <class ThrdQ>
  struct DqOperands<ThrdQ, true> {
    using A = FragA<ThrdQ, SmemLayoutKt>;
    using B = FragB<ThrdQ, SmemLayoutdS>;
  };

  // The shared-memory operands of the GEMMs common to both variants, as one thread's WGMMA
  // descriptors (each operand in the orientation its GEMM reads), and the per-row lse and D.
  template <class ThrSdP, class ThrdKV, class ThrdQ>
  struct Operands {
    FragA<ThrSdP, SmemLayoutK> k;       // S^T = K Q^T
    FragB<ThrSdP, SmemLayoutQ> q;
    FragA<ThrSdP, SmemLayoutK> v;       // dP^T = V dO^T
    FragB<ThrSdP, SmemLayoutQ> dout;
    FragB<ThrdKV, SmemLayoutQt> dout_t;  // dV += P^T dO
    FragB<ThrdKV, SmemLayoutQt> q_t;     // dK += dS^T Q
    // dQ = dS K (A = dS, B = K), or dQ^T = K^T dS^T (A = K^T, B = dS).
    typename DqOperands<ThrdQ>::A dq_a;
    typename DqOperands<ThrdQ>::B dq_b;
    SmemRowTensor lse, dpsum;

    __device__ Operands(SharedStorage& ss, ThrSdP& sdp, ThrdKV& dkv, ThrdQ& dq)
        : k(sdp.partition_fragment_A(smem<SmemLayoutK>(ss.k.data()))),
          q(sdp.partition_fragment_B(smem<SmemLayoutQ>(ss.q.data()))),
          v(sdp.partition_fragment_A(smem<SmemLayoutK>(ss.v.data()))),
          dout(sdp.partition_fragment_B(smem<SmemLayoutQ>(ss.dout.data()))),
          dout_t(dkv.partition_fragment_B(smem<SmemLayoutQt>(ss.dout.data()))),
          q_t(dkv.partition_fragment_B(smem<SmemLayoutQt>(ss.q.data()))),
          dq_a(dq_operand_a(dq, ss)),
          dq_b(dq_operand_b(dq, ss)),
          lse(cute::make_tensor(cute::make_smem_ptr(ss.lse.data()), SmemLayoutRow{})),
          dpsum(cute::make_tensor(cute::make_smem_ptr(ss.dpsum.data()), SmemLayoutRow{})) {}

    __device__ static auto dq_operand_a(ThrdQ& dq, SharedStorage& ss) {
      if constexpr (kdQSwapAB) return dq.partition_fragment_A(smem<SmemLayoutKt>(ss.k.data()));
      else return dq.partition_fragment_A(smem<SmemLayoutdS>(ss.ds.data()));
    }
    __device__ static auto dq_operand_b(ThrdQ& dq, SharedStorage& ss) {
      if constexpr (kdQSwapAB) return dq.partition_fragment_B(smem<SmemLayoutdS>(ss.ds.data()));
      else return dq.partition_fragment_B(smem<SmemLayoutKt>(ss.k.data()));
    }
  };

  // ---- producer (one elected thread) ------------------------------------------------------------

  struct Loader {
    const Params& p;
    SharedStorage& ss;
    int kv_head;
    SeqInfo si;

    __device__ void load_kv(int n_block) const {
      using namespace cute;
      auto load = [&](const TmaK& tma, Element* smem) {
        Tensor m = tma.get_tma_tensor(make_shape(p.rows_k, int(kHeadDim), p.heads_kv, p.batch_extent));
        Tensor ms = domain_offset(make_coord(si.offset_k, _0{}), m(_, _, kv_head, si.batch));
        Tensor g = local_tile(ms, Shape<BN, HD>{}, make_coord(n_block, _0{}));
        Tensor s = make_tensor(make_smem_ptr(smem), SmemLayoutK{});
        auto cta = tma.get_slice(_0{});
        copy(tma.with(ss.barrier_kv), cta.partition_S(g), cta.partition_D(s));
      };
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.barrier_kv, kKVBytes);
      load(p.tma_k, ss.k.data());
      load(p.tma_v, ss.v.data());
    }

    // One query block of query head `head`: a 2-D tile and its 64 row statistics on one barrier.
    __device__ void load_rows(Pipeline& pipe, PipelineState st, const TmaQ& tma, Element* smem, const TmaRow& tma_row,
                              float* smem_row, int head, int m_block) const {
      using namespace cute;
      pipe.producer_acquire(st);
      auto* bar = pipe.producer_get_barrier(st);
      Tensor m = tma.get_tma_tensor(make_shape(p.rows_q, int(kHeadDim), p.heads_q, p.batch_extent));
      Tensor ms = domain_offset(make_coord(si.offset_q, _0{}), m(_, _, head, si.batch));
      Tensor g = local_tile(ms, Shape<BM, HD>{}, make_coord(m_block, _0{}));
      Tensor s = make_tensor(make_smem_ptr(smem), SmemLayoutQ{});
      auto cta = tma.get_slice(_0{});
      copy(tma.with(*bar), cta.partition_S(g), cta.partition_D(s)(_, _, _, st.index()));
      // Fixed-length: row_base is (batch, head 0)'s, reached through the batch coordinate instead.
      Tensor mr = tma_row.get_tma_tensor(make_shape(p.seqlen_q_padded, p.heads_q, p.batch_extent));
      Tensor mrs = domain_offset(make_coord(p.cu_q == nullptr ? 0 : int(si.row_base)), mr(_, head, si.batch));
      Tensor gr = local_tile(mrs, Shape<BM>{}, make_coord(m_block));
      Tensor sr = make_tensor(make_smem_ptr(smem_row), SmemLayoutRow{});
      auto cta_r = tma_row.get_slice(_0{});
      copy(tma_row.with(*bar), cta_r.partition_S(gr), cta_r.partition_D(sr)(_, _, st.index()));
    }
  };

  // ---- consumers ----------------------------------------------------------------------------------

  // Key j may be seen by query i: j < seqlen_k and, causal, j <= i + seqlen_k - seqlen_q.
  __device__ static bool step_needs_mask(const SeqInfo& si, int n_block, int m_block) {
    const int key_end = (n_block + 1) * kBlockN;
    if (key_end > si.seqlen_k) return true;
    if constexpr (Cfg::kCausal) {
      const int d = si.seqlen_k - si.seqlen_q;
      // Right edge for the block's first query row, left edge for its last one.
      if (key_end - 1 > m_block * kBlockM + d + si.right) return true;
      return Cfg::kLocal && n_block * kBlockN < (m_block + 1) * kBlockM - 1 + d - si.left;
    }
    return false;
  }
};

}  // namespace hopattn::sm90::bwd
