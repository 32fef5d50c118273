// What the backward kernel's roles share: its parameters and block mapping, the score-to-
// probability step, the primitives that hand dQ partials to the workspace accumulator (bulk
// reduce-add, vector reduce-add, deterministic-mode turn counters) and the dK/dV store.
#pragma once

#include "sm90/bwd/config.hpp"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>

#include <cmath>

#include "sm90/bwd/launch_order.hpp"
#include "sm90/bwd/mainloop.cuh"
#include "sm90/bwd/trace.hpp"
#include "sm90/ws/fragment_layout.cuh"
#include "sm90/ws/softmax.cuh"  // fast_exp2

namespace hopattn::sm90::bwd {

template <class Cfg>
struct BwdKernel {
  using Mainloop = BwdMainloop<Cfg>;
  using SharedStorage = typename Mainloop::SharedStorage;
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");

  struct Params {
    typename Mainloop::Params mainloop;
    float* dq_accum;  // fp32 rows of head_dim in RowLayout order; zeroed by the preprocess unless dq_first_store
    int* semaphore;   // one per kQueryBlock rows of dq_accum, zeroed by the preprocess: arrivals or turns
    void* dk;
    void* dv;
    int64_t dk_stride[3], dv_stride[3];
    float scale;
    int n_blocks;
    bool deterministic;
    int section_heads;  // heads per launch section (launch_order.hpp); 1 for all but plain causal
    bool dq_first_store;  // the accumulator is not zeroed: each tile's first partial is stored (workspace.hpp)
    int* dq_done;  // dq_overlap: per (batch, kv head), zeroed by the preprocess; null otherwise
    BwdTrace trace;  // HOPATTN_BWD_TRACE=1: a record per CTA (trace.hpp)
    // The tail split (workspace.hpp, TailSplit): CTAs from tail_first on are pieces, tail_parts to a
    // unit, of the units from tail_first on; tail_first = the units when nothing is split.
    int tail_first, tail_parts;
    float* tail_acc;  // kTailSlotFloats per split unit, zeroed by the preprocess
    int* tail_count;  // per split unit, zeroed by the preprocess
  };

  struct Block {
    int n_block, kv_head, batch;
    int piece;  // the piece of a split unit (0 .. tail_parts - 1), or -1: the whole unit
    int tail;   // a split unit's index among the split units
  };
  // The launch order (launch_order.hpp): sections of p.section_heads heads, key block 0 of each
  // first. Deterministic causal runs launch the key blocks of a head in decreasing order (see
  // dq_turn); the launcher gives them sections of one head.
  // Split units' pieces come last, tail_parts CTAs per unit.
  __device__ static Block block(const Params& p) {
    const int heads_kv = p.mainloop.heads_kv;
    int unit = int(blockIdx.x), piece = -1, tail = 0;
    if (unit >= p.tail_first) {
      tail = (unit - p.tail_first) / p.tail_parts;
      piece = unit - p.tail_first - tail * p.tail_parts;
      unit = p.tail_first + tail;
    }
    const BwdLaunchUnit u = bwd_launch_unit(unit, p.n_blocks, heads_kv * p.mainloop.batch, p.section_heads);
    Block b{u.n_block, u.head_batch % heads_kv, u.head_batch / heads_kv, piece, tail};
    if (Cfg::kCausal && p.deterministic) b.n_block = p.n_blocks - 1 - b.n_block;
    return b;
  }

  // Where a key block's walk over its query blocks starts, as an offset into its range of `steps`
  // blocks (the walk wraps around). The head_dim split without a mask and not deterministic starts
  // key block n at offset n mod steps: the key blocks of a head run side by side, and walking in
  // step they would all reduce-add 64 KB into the same dQ tile at the same moment. Deterministic
  // runs keep offset 0 (their turn order assumes it); the key split measured a loss (perf-notes,
  // backward v5 "rotated query walk").
  __device__ static int walk_start(const Params& p, const Block& blk, int steps) {
    if constexpr (Cfg::kSplitHeadDim && !Cfg::kCausal) {
      return p.deterministic ? 0 : blk.n_block % steps;
    } else {
      return 0;
    }
  }
  // The walk positions [first, last) of a block: all `steps`, or a piece's share of them (the same
  // share of every query head of the group).
  struct WalkSpan {
    int first, last;
  };
  __device__ static WalkSpan walk_span(const Params& p, const Block& blk, int steps) {
    if (blk.piece < 0) return {0, steps};
    return {blk.piece * steps / p.tail_parts, (blk.piece + 1) * steps / p.tail_parts};
  }
  // The query block of step j of that walk, for the producer and the consumers alike.
  __device__ static int walk_block(int m_begin, int steps, int start, int j) {
    return m_begin + j + start - (j + start >= steps ? steps : 0);
  }

  // Deterministic mode: key block blk's place in the order in which the key blocks add their dQ
  // partials to query tile m_block (its turn counter counts them). Non-causal: increasing key block;
  // every block walks the query tiles from 0, so block n reaches each tile one step after n - 1.
  // Masked: the blocks that see tile m are n_first(m) .. n_last(m) (0 .. n_last(m) when causal),
  // contiguous, and block n starts its walk at the first
  // tile it sees, so in increasing order block n would reach tile m *before* n - 1 and wait at every
  // tile (the whole walk serialised: -59% measured). In decreasing order (n_last first, whose walk
  // starts at m) each block arrives one step after the one before it. Blocks are then launched in
  // decreasing order too (block()), so the block waited for is resident or done: no deadlock.
  __device__ static int dq_turn(const Params& p, const Block& blk, const typename Mainloop::SeqInfo& si, int m_block) {
    if constexpr (!Cfg::kCausal) {
      return blk.n_block;
    } else {
      // Only blocks that see the tile call this, so the last visible key below is >= 0. The key
      // blocks of this sequence: varlen grids cover max_seqlen_k, only ceil(seqlen_k / N) exist.
      const int n_blocks = (si.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
      const int last_row = min(si.seqlen_q, (m_block + 1) * Cfg::kBlockM) - 1;
      const int n_last = min(n_blocks - 1, (last_row + si.seqlen_k - si.seqlen_q + si.right) / Cfg::kBlockN);
      return n_last - blk.n_block;
    }
  }

  // The (query block, head) tile's slice of the dQ accumulator, in fragment order, and its
  // deterministic-mode turn counter (RowLayout: row bases are whole kRowPadding blocks).
  __device__ static int64_t dq_tile(const Params& p, const typename Mainloop::SeqInfo& si, int head, int m_block) {
    return (si.row_base + int64_t(head) * p.mainloop.row_layout.head_stride) / Cfg::kBlockM + m_block;
  }
  // The tile's turn counter. Counters are per kQueryBlock rows, the unit in which the preprocess
  // zeroes them for each sequence's rows; at d64 (128-row tiles) a tile spans two, the first counts.
  __device__ static int* dq_semaphore(const Params& p, int64_t tile) {
    return p.semaphore + dq_semaphore_index(tile, Cfg::kBlockM);
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
// Deterministic mode: a key block adds its dQ partial to a query tile only when the tile's
// counter reads its turn (BwdKernel::dq_turn), and hands the turn on (turn + 1) once its adds are
// complete in global memory.
__device__ __forceinline__ void wait_turn(const int* sem, int turn) {
  while (load_acquire(sem) != turn) {
  }
  asm volatile("fence.proxy.async.global;" ::: "memory");  // the bulk add that follows comes after the acquire
}
// Otherwise (dq_first_store): a key block takes a ticket; ticket 0 stores, the others wait until
// that store has landed (kdQStored) and then add. Returns whether this block is the first.
__device__ __forceinline__ bool take_dq_ticket(int* sem) {
  const bool first = (atomicAdd(sem, 1) & (kdQStored - 1)) == 0;
  if (!first) {
    while (!(load_acquire(sem) & kdQStored)) {
    }
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  return first;
}
// The first block's store is complete in global memory (bulk_wait_complete): let the others add.
__device__ __forceinline__ void publish_dq_store(int* sem) {
  asm volatile("red.release.gpu.global.or.b32 [%0], %1;" ::"l"(sem), "r"(kdQStored) : "memory");
}

// Adds `bytes` of fp32 from shared memory into global memory, element-wise, as one asynchronous
// bulk operation (CuTe wraps only the tensor-map form of cp.reduce.async.bulk). Completes through
// the bulk-group mechanism: commit with tma_store_arrive, wait with tma_store_wait / bulk_wait_complete.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, const float* smem, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem),
               "r"(cute::cast_smem_ptr_to_uint(smem)), "r"(bytes)
               : "memory");
}
// The same as one asynchronous bulk copy (a store): the first partial of a tile (dq_first_store).
__device__ __forceinline__ void bulk_store_f32(float* gmem, const float* smem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem),
               "r"(cute::cast_smem_ptr_to_uint(smem)), "r"(bytes)
               : "memory");
}
// Element-wise fp32 add of four values into global memory (16-byte aligned), one L2 reduction.
__device__ __forceinline__ void red_add_v4(float4* gmem, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(gmem), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
// Waits until every committed bulk group has completed its global writes (not only its smem
// reads), then orders them before this thread's later generic-proxy accesses.
__device__ __forceinline__ void bulk_wait_complete() {
  asm volatile("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;" ::: "memory");
}

// dq_overlap: this CTA's dQ partials are complete in global memory; count it done for its (batch, kv
// head), with release semantics, for the postprocess's tiles of those heads (bwd_postprocess_kernel).
// `issuer`: a thread that issued bulk adds, which waits for their global writes first. Every consumer
// thread calls this, after its last bulk add.
template <class Cfg>
__device__ __forceinline__ void count_dq_done(const typename BwdKernel<Cfg>::Params& params,
                                              const typename BwdKernel<Cfg>::Block& blk, bool issuer, int thread_idx) {
  if (params.dq_done == nullptr) return;
  if (issuer) {
    bulk_wait_complete();
    __threadfence();
  }
  cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kKvStore));
  if (thread_idx == 0) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(params.dq_done + int64_t(blk.batch) * params.mainloop.heads_kv + blk.kv_head)
                 : "memory");
  }
}

// P^T = exp2(S^T * scale * log2(e) - lse * log2(e)) in place, for one (keys, queries) fragment of
// the step's tile: key j is visible to query i iff j < seqlen_k and, masked (kCausal), i + lo_offset
// <= j <= i + hi_offset (the window: lo_offset = d - left, hi_offset = d + right, d = seqlen_k -
// seqlen_q); hidden entries become 0 (lse is +inf for padded and key-less rows, so their columns
// vanish too). `coords` maps fragment positions to (key, query) within the tile.
// kSoftcap: the scores are capped first, as in the forward (ws::Softcap).
template <bool kCausal, bool kLocal, bool kSoftcap, class Frag, class Coords, class RowTensor>
__device__ __forceinline__ void scores_to_probs(Frag& s_t, const Coords& coords, const RowTensor& lse_row, int key0,
                                                int query0, int seqlen_k, int lo_offset, int hi_offset, bool needs_mask,
                                                float scale_log2, const ws::Softcap& cap) {
  using namespace cute;
  if constexpr (kSoftcap) {
    CUTE_UNROLL
    for (int i = 0; i < size(s_t); ++i) s_t(i) = cap(s_t(i));
  }
  auto s_rc = ws::acc_rowcol(s_t);
  auto c_rc = ws::acc_rowcol(coords);
  CUTE_UNROLL
  for (int c = 0; c < size<1>(s_rc); ++c) {
    const int col = get<1>(c_rc(0, c));
    const float lse = lse_row(col);
    const int key_limit = min(seqlen_k, query0 + col + hi_offset + 1);  // masked or not: keys < limit
    const int key_first = query0 + col + lo_offset;                      // masked: keys >= first
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      float s = s_rc(r, c);
      if (needs_mask) {
        const int key = key0 + get<0>(c_rc(r, c));
        if (kCausal ? (key >= key_limit || (kLocal && key < key_first)) : key >= seqlen_k) s = -INFINITY;
      }
      s_rc(r, c) = ws::fast_exp2(s * scale_log2 - lse);
    }
  }
}

// Softcap's factor in dS: d(c tanh(x / c)) / dx = 1 - t^2. t is recovered from the probability,
// P = exp2(c log2(e) t - lse_log2), as t = (log2 P + lse_log2) * t_scale with t_scale = 1 / (c log2(e)),
// so no fragment of t stays live across the dP GEMM (the registers are full). P = 0 (masked, or
// underflowed) gives 0: dS = P (dP - D) is 0 there anyway, and log2(0) = -inf would make it NaN.
// Branch-free: the early return for P = 0 was a branch per score (ptxas does not if-convert the
// logarithm's denormal fixup behind it), 64 BSSY regions in the d64 step loop. log2 of max(P,
// FLT_MIN) is one MUFU.LG2 with no fixup; a P below FLT_MIN (only a 16-bit bf16 P can be one) reads
// as FLT_MIN there, and its dS, a multiple of P itself, stays below 1e-37 either way.
__device__ __forceinline__ float softcap_grad(float p, float lse_log2, float t_scale) {
  float l;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(l) : "f"(fmaxf(p, 1.17549435e-38f)));
  const float t = (l + lse_log2) * t_scale;
  return p > 0.f ? 1.f - t * t : 0.f;
}

// dK = scale * sum dS^T Q and dV = sum P^T dO of this thread's fragment, to the caller's tensors.
// Rows up to the sequence's length are written: keys past seqused (varlen) saw no query, so their
// accumulators hold zeros.
// Through shared memory, because stores from the fragments drain slowly: a warp instruction of the
// accumulator layout covers 8 rows x 16 bytes (half sectors), and at short causal units that drain
// was most of the per-unit cost (perf-notes, backward v14). dK has K's shape and dV V's, so after
// every consumer is past its last GEMM (no GEMM reads K or V any more) each writes its fragments into
// the K and V buffers (32-bit stores of column pairs, conflict-free under the 128-byte swizzle), and
// then the consumers copy whole rows out in 16-byte pieces, consecutive threads along a row (a warp
// instruction covers two whole 256-byte rows at d128). The producer loads K and V only before the
// first step (none when no query sees the keys), and the dQ staging uses its own buffers, so nothing
// else touches K and V then. Rows, strides and bases are 16-byte aligned (validate.cpp).
// Shared-memory accesses by address: a swizzled CuTe smem tensor element's address is computed on the
// generic pointer, after which the compiler emits generic loads and stores (ST.E, LD.E) for it.
__device__ __forceinline__ void st_shared_b32(const void* p, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(cute::cast_smem_ptr_to_uint(p)), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(cute::cast_smem_ptr_to_uint(p))
               : "memory");
  return v;
}

// A piece of a split unit (BwdKernel::Block::piece): adds this thread's fp32 dK and dV fragments
// into the unit's workspace slot (fragment order, so that coalesced: value group v of thread t at
// (v x kNumMmaThreads + t) x 4 floats), and counts the piece done once every consumer thread's adds
// are in global memory (the threadfence-reduction pattern: fence, barrier, one counter add).
// Returns true for the unit's last piece, its fragments then holding the unit's sums, which it
// stores as any unit does; the others return false and are done.
template <class Cfg, class Frag>
__device__ __forceinline__ bool add_tail_piece(const typename BwdKernel<Cfg>::Params& params,
                                               const typename BwdKernel<Cfg>::Block& blk, Frag& dk_acc, Frag& dv_acc,
                                               typename BwdKernel<Cfg>::SharedStorage& ss, int thread_idx) {
  using namespace cute;
  constexpr int kGroups = int(size(Frag{})) / 4;  // float4 groups per fragment
  static_assert(2 * kGroups * 4 * Cfg::kNumMmaThreads == kTailSlotFloats, "a slot holds one unit's dK and dV");
  float4* slot = reinterpret_cast<float4*>(params.tail_acc + int64_t(blk.tail) * kTailSlotFloats) + thread_idx;
  CUTE_UNROLL
  for (int v = 0; v < kGroups; ++v) {
    red_add_v4(slot + v * Cfg::kNumMmaThreads, dk_acc(4 * v), dk_acc(4 * v + 1), dk_acc(4 * v + 2), dk_acc(4 * v + 3));
    red_add_v4(slot + (kGroups + v) * Cfg::kNumMmaThreads, dv_acc(4 * v), dv_acc(4 * v + 1), dv_acc(4 * v + 2),
               dv_acc(4 * v + 3));
  }
  __threadfence();
  cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kKvStore));
  if (thread_idx == 0) ss.tail_last = atomicAdd(params.tail_count + blk.tail, 1) == params.tail_parts - 1;
  cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kKvStore));
  if (!ss.tail_last) return false;
  __threadfence();  // the other pieces' adds, counted before this piece's, come before these loads
  CUTE_UNROLL
  for (int v = 0; v < kGroups; ++v) {
    const float4 k = __ldcg(slot + v * Cfg::kNumMmaThreads);
    const float4 d = __ldcg(slot + (kGroups + v) * Cfg::kNumMmaThreads);
    dk_acc(4 * v) = k.x, dk_acc(4 * v + 1) = k.y, dk_acc(4 * v + 2) = k.z, dk_acc(4 * v + 3) = k.w;
    dv_acc(4 * v) = d.x, dv_acc(4 * v + 1) = d.y, dv_acc(4 * v + 2) = d.z, dv_acc(4 * v + 3) = d.w;
  }
  return true;
}

template <class Cfg, class ThrMma, class Frag>
__device__ __forceinline__ void store_dk_dv(const typename BwdKernel<Cfg>::Params& params,
                                            const typename BwdKernel<Cfg>::Block& blk,
                                            const typename BwdKernel<Cfg>::Mainloop::SeqInfo& si, const ThrMma& thr_dkv,
                                            const Frag& dk_acc, const Frag& dv_acc,
                                            typename BwdKernel<Cfg>::SharedStorage& ss, int thread_idx) {
  using namespace cute;
  using Element = typename Cfg::Element;
  using Mainloop = typename BwdKernel<Cfg>::Mainloop;
  constexpr int kBlockN = Cfg::kBlockN, kHeadDim = Cfg::kHeadDim;
  const int key0 = blk.n_block * kBlockN;
  // Varlen: batch strides are 0 and the sequence starts offset_k rows in.
  const int64_t b = blk.batch, kvh = blk.kv_head, off = si.offset_k;
  Element* dk = static_cast<Element*>(params.dk) + b * params.dk_stride[0] + off * params.dk_stride[1] + kvh * params.dk_stride[2];
  Element* dv = static_cast<Element*>(params.dv) + b * params.dv_stride[0] + off * params.dv_stride[1] + kvh * params.dv_stride[2];
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Mainloop::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Mainloop::SmemLayoutK{});
  Tensor tK = thr_dkv.partition_C(sK);
  Tensor tV = thr_dkv.partition_C(sV);
  cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kKvStore));
  CUTE_UNROLL
  for (int i = 0; i < size(dk_acc); i += 2) {  // values i, i + 1: adjacent columns of one row
    cutlass::Array<float, 2> k2, v2;
    k2[0] = dk_acc(i) * params.scale;
    k2[1] = dk_acc(i + 1) * params.scale;
    v2[0] = dv_acc(i);
    v2[1] = dv_acc(i + 1);
    const auto k16 = cutlass::NumericArrayConverter<Element, float, 2>{}(k2);
    const auto v16 = cutlass::NumericArrayConverter<Element, float, 2>{}(v2);
    st_shared_b32(&tK(i), reinterpret_cast<const uint32_t&>(k16));
    st_shared_b32(&tV(i), reinterpret_cast<const uint32_t&>(v16));
  }
  cutlass::arch::NamedBarrier::sync(Cfg::kNumMmaThreads, barrier_id(BwdBarrier::kKvStore));
  constexpr int kPiecesPerRow = kHeadDim * int(sizeof(Element)) / 16;
  static_assert((kBlockN * kPiecesPerRow) % Cfg::kNumMmaThreads == 0, "whole rounds of 16-byte pieces");
  CUTE_UNROLL
  for (int j = 0; j < kBlockN * kPiecesPerRow / Cfg::kNumMmaThreads; ++j) {
    const int c = thread_idx + j * Cfg::kNumMmaThreads;
    const int row = c / kPiecesPerRow, col = (c % kPiecesPerRow) * (16 / int(sizeof(Element)));
    if (key0 + row < si.len_k) {
      const int64_t key = key0 + row;
      *reinterpret_cast<uint4*>(dk + key * params.dk_stride[1] + col) = ld_shared_v4(&sK(row, col));
      *reinterpret_cast<uint4*>(dv + key * params.dv_stride[1] + col) = ld_shared_v4(&sV(row, col));
    }
  }
}

}  // namespace hopattn::sm90::bwd
