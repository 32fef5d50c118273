// Maps a linear work index to a (m_block, head, batch) output tile, and hands indices to CTAs:
// one tile per CTA (flattened grid) or a static persistent round-robin over a grid of #SMs.
// The linear order is what decides load balance and L2 reuse; see TileOrder below.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cute/config.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/ws/int_divider.hpp"
#include "sm90/ws/l2_section.hpp"
#include "sm90/ws/round_rotation.hpp"
#include "sm90/ws/tail_split.hpp"
#include "sm90/ws/varlen_tile_order.hpp"
#include "sm90/ws/warp_uniform.cuh"

namespace hopattn::sm90::ws {

struct WorkTile {
  int m_block, head, batch;
  // Tail split (tail_split.hpp): the piece of a split tile (-1: the whole tile) and the split
  // tile's number, which names its counters and slots. Only the kTailSplit kernels set them.
  int piece = -1, split_tile = 0;
};

// Linear order of tiles. Non-causal: every tile costs the same, so m_block runs fastest and the
// ~#SMs tiles in flight together read the same few (batch, head) K/V tensors from L2.
// Causal: a tile's cost grows with m_block, so m_block runs slowest and descending (longest tiles
// first, short ones fill the tail of the round-robin); heads run fastest so that the query heads of
// one GQA group (h = kv * group + g, adjacent) are in flight together and share K/V in L2.
// L2-sized sections of pairs (`section`, l2_section.hpp): v2 measured them on d128 and dropped them
// (L2 hits rose, speed did not; the fold below took their place); d64's unfolded 192-row tiles take
// them up to 4k, where they gain 2-12% (docs/perf-notes.md, sessions 51 and 52).
//
// Causal, folded (`fold`, persistent only): tiles come in units of two, query blocks u and
// nb-1-u of one (batch, head), run by one CTA back to back. Every unit then costs nb+1 key blocks,
// so a plain round-robin over units balances without ordering by length, and units run with u
// fastest: the ~#SMs units in flight cover only ~#SMs / (nb/2) (batch, head) pairs, whose K/V stay
// in L2. The longest-first order instead walks every pair once per round, re-reading K/V from HBM
// when they exceed L2 (2.6-4.3x the minimum DRAM bytes at 1k-2k, docs/perf-notes.md). Work index
// 2 * unit + half; an odd nb's middle unit has one tile, its second half maps to m_block = -1,
// which every role skips.
template <bool kCausal>
struct TileOrder {
  int num_m_blocks, heads, batch;
  bool snake;  // persistent round-robin alternates direction (kBitSnake builds only)
  bool fold = false;  // causal, persistent: folded units (above); overrides snake
  // Varlen (VarlenTileScheduler): cu_seqlens_q and the packed rows; num_m_blocks is the max's.
  // cu_q null (a fixed-length batch with per-sequence key counts): rows_q query rows per sequence.
  const int32_t* cu_q = nullptr;
  int rows_q = 0;
  bool balanced = false;  // varlen, causal, not folded: varlen_tile_order.hpp's balanced order
  // Varlen, not folded: a zeroed int in global memory (the call's workspace) from which CTAs draw
  // their next work index (dynamic order, VarlenTileScheduler); null: the static round-robin.
  int* counter = nullptr;
  // Fixed-length, unmasked, persistent: the last round's tiles cut into pieces (StaticTileScheduler
  // with kTailSplit reads it; pieces == 1 otherwise).
  TailSplit split{};
  // Causal, not folded: pairs per L2-sized section of the longest-first order (l2_section.hpp);
  // 0: one section. Last, so the fields before it keep their offsets.
  int section = 0;
  // tile()'s divisors (int_divider.hpp), set by prepare() once the fields above are.
  IntDivider heads_div{}, batch_div{}, m_blocks_div{}, units_div{};
  SectionDividers section_div{};
  // Non-causal, persistent, StaticTileScheduler with kRotate: round r of the round-robin rotated by
  // r * rotate slots (round_rotation.hpp), grid_div dividing by the launch's grid. Set by
  // set_rotation() once the grid is known; rotate 0 is the plain round-robin.
  int rotate = 0;
  IntDivider grid_div{};

  // The launch calls it after setting every field above: tile() divides only through these.
  void prepare() {
    heads_div = IntDivider(heads);
    batch_div = IntDivider(batch);
    m_blocks_div = IntDivider(num_m_blocks);
    units_div = IntDivider(units_per_head());
    section_div = SectionDividers(section, num_m_blocks, heads * batch);
  }

  // The rotation for a launch of `grid` persistent CTAs over `indices` work indices (tiles and tail
  // pieces); left at 0 where r * rotate could leave the int range.
  void set_rotation(int grid, int indices) {
    rotate = round_rotation(grid, num_m_blocks);
    if (rotate > 0 && (int64_t(indices) / grid + 2) * rotate + grid >= (int64_t(1) << 30)) rotate = 0;
    grid_div = IntDivider(grid);
  }

  __host__ __device__ int num_tiles() const { return num_m_blocks * heads * batch; }
  __host__ __device__ int units_per_head() const { return (num_m_blocks + 1) / 2; }
  __host__ __device__ int num_units() const { return units_per_head() * heads * batch; }
  // One past the last work index: tiles, or 2 * units when folded.
  __host__ __device__ int num_indices() const { return (kCausal && fold) ? 2 * num_units() : num_tiles(); }

  __device__ WorkTile tile(int idx) const {
    WorkTile t;
    if constexpr (kCausal) {
      if (fold) {
        int u;
        const int pair = units_div.divmod(idx >> 1, u);  // (batch, head), head fastest
        t.batch = heads_div.divmod(pair, t.head);
        t.m_block = folded_m_block(u, idx & 1, num_m_blocks);
        return t;
      }
      if (section > 0) {
        const SectionTile st = sectioned_causal_tile(idx, section_div, num_m_blocks, heads * batch);
        t.batch = heads_div.divmod(st.pair, t.head);
        t.m_block = st.m_block;
        return t;
      }
      // idx = (m_rev * batch + b) * heads + h, m_rev = nb - 1 - m_block
      t.m_block = num_m_blocks - 1 - batch_div.divmod(heads_div.divmod(idx, t.head), t.batch);
    } else {
      // idx = (b * heads + h) * nb + m_block
      const int pair = m_blocks_div.divmod(idx, t.m_block);
      t.batch = heads_div.divmod(pair, t.head);
    }
    return t;
  }
};

// The shared-memory handoff of a dynamically drawn work index from the producer warp, which draws
// it, to the consumer warps: one slot, `full` (1 arrival: the producer wrote it) and `empty` (one
// arrival per consumer warp: they have read it). One slot suffices: the producer cannot publish
// index w + 1 before the consumers have read index w, and it publishes w + 1 only after issuing
// tile w's loads, so the wait costs the consumers nothing while the producer runs ahead.
struct TileSlot {
  uint64_t full, empty;  // ClusterBarrier storage
  int idx;
};

// Static scheduler: CTA b takes tiles b, b + G, ... (persistent, G = gridDim.x) or just tile b.
// With kSnake (and order.snake) the round-robin reverses every round: round r gives CTA b the tile
// r*G + b for even r, r*G + G-1-b for odd r, so a CTA that drew a round's longest causal tile draws
// the next round's shortest. Folded causal order: CTA b takes both halves of units b, b + G, ...
// Every warp of a CTA computes the same sequence without communicating: first(), then next(k) for
// the index after the CTA's k-th item (k from 0). An item's tile may be empty (m_block < 0).
// kTailSplit (non-causal, persistent): past the whole tiles come the pieces of order.split.
// kRotate (non-causal, persistent): round r rotated by r * order.rotate slots (round_rotation.hpp),
// so that a CTA does not draw the same query block in every round when the grid and the query
// blocks per head share a factor.
template <bool kCausal, bool kPersistent, bool kSnake = false, bool kTailSplit = false, bool kRotate = false>
struct StaticTileScheduler {
  static_assert(!kRotate || (!kCausal && kPersistent), "rotated rounds are for the plain non-causal round-robin");
  static_assert(!kTailSplit || (!kCausal && kPersistent), "the tail split deals equal tiles round-robin");
  TileOrder<kCausal> order;

  __device__ int first() const { return index_of(0); }
  __device__ bool valid(int idx) const {
    if constexpr (kTailSplit) return idx < order.split.num_indices(order.num_tiles());
    return idx < order.num_indices();
  }
  __device__ WorkTile tile(int idx) const {
    if constexpr (kTailSplit) {
      if (idx >= order.split.first) {
        const SplitWork w = split_piece(order.split, idx);
        WorkTile t = order.tile(w.tile);
        t.piece = w.piece;
        t.split_tile = w.split_tile;
        return t;
      }
    }
    return order.tile(idx);
  }
  // The index after the CTA's k-th item; the role and the slot are the dynamic order's (the varlen
  // scheduler's), unused here.
  template <bool kProducer = false>
  __device__ int next(int k, TileSlot* = nullptr) const {
    return index_of(k + 1);
  }

  // One CTA per tile, or one per SM (never more CTAs than work items: tiles, folded units, or
  // whole tiles and pieces).
  static int grid_size(const TileOrder<kCausal>& o, int num_sms) {
    const int n = (kCausal && kPersistent && o.fold) ? o.num_units()
                  : kTailSplit                       ? o.split.num_indices(o.num_tiles())
                                                     : o.num_tiles();
    return kPersistent ? (n < num_sms ? n : num_sms) : n;
  }

 private:
  // Round r's indices are all >= r * G: once one is past the end, every later one is too.
  __device__ int index_of(int r) const {
    if constexpr (!kPersistent) return r == 0 ? static_cast<int>(blockIdx.x) : order.num_tiles();
    if constexpr (kRotate)
      return rotated_round_index(r, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), order.rotate,
                                 order.grid_div);
    return round_robin_index<kCausal>(r, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), order.fold,
                                      kSnake && order.snake);
  }
};

// Varlen (packed) batches: only real tiles, numbered consecutively sequence by sequence, so that the
// round-robin hands every CTA about the same work whatever the lengths. (The max_seqlen-sized slot
// grid of TileOrder gives each sequence max_seqlen_q / kBlockM slots per head, and the slots past
// its end, skipped but still taking their turn, land the real tiles unevenly on CTAs: a causal mix
// of 128..8k ran 14% slower than the same tokens in fixed-length batches, docs/perf-notes.md.)
// The host cannot count the tiles without reading cu_seqlens back, so the device does: a warp finds
// the sequence holding a work index by a prefix sum over 32 sequences' tile counts at a time,
// resuming from where its previous lookup stopped (a CTA's indices only grow), so a CTA scans the
// batch once in all. The order within a sequence: varlen_tile_in (varlen_tile_order.hpp).
// Every lane of the calling warp must take part (the producer warp and the consumer warps do).
//
// Dynamic order (kDynamic and order.counter set; never folded): CTA b's first index is b, and each next one is
// G + the counter's next value, drawn by the producer warp once it has issued the current tile's
// loads and handed to the consumers through a TileSlot. Greedy dealing of the same list ends every
// CTA within about one tile of the others, where the static round-robin leaves the busiest CTA of a
// mixed causal batch 5% above the mean (docs/perf-notes.md, "a load model"). A CTA's indices still
// only grow, as the resumable search needs.
template <bool kCausal, int kBlockM, bool kDynamic = false>
struct VarlenTileScheduler {
  TileOrder<kCausal> order;  // heads, batch, cu_q, rows_q, fold (num_m_blocks: the max, for the grid)
  int seq = 0;               // the sequence the last lookup stopped at
  int seq_base = 0;          // its first work index
  WorkTile cur{};            // the last lookup's tile

  // Init of the slot's barriers, by one thread before the CTA-wide sync that precedes any use.
  __device__ static void init_slot(TileSlot* s, int consumer_warps) {
    cutlass::arch::ClusterBarrier::init(&s->full, 1);
    cutlass::arch::ClusterBarrier::init(&s->empty, consumer_warps);
  }

  __device__ bool dynamic() const { return kDynamic && order.counter != nullptr; }

  __device__ int first() const { return index_of(0); }
  // The index after the CTA's k-th tile (k from 0), in the role kProducer (the producer warp) or
  // not (a consumer warp). Dynamic order: the producer draws it and hands it over through `slot`.
  // The k-th handoff fills `full` for the k-th time and the consumers' read of it completes
  // `empty`'s k-th phase, so every barrier phase is k's parity: no state is kept across tiles
  // beyond the loop's own k. (Holding a slot pointer, the role and two counters through the tile
  // loop cost ptxas 20-24 more bytes of spill stores in the 16-bit d64 kernels and 4-8 in the FP8
  // d64 ones, which now have none.)
  template <bool kProducer>
  __device__ int next(int k, TileSlot* slot) const {
    if (!dynamic()) return index_of(k + 1);
    const uint32_t parity = static_cast<uint32_t>(k) & 1u;
    if constexpr (kProducer) {
      const int lane = static_cast<int>(threadIdx.x % 32);
      int drawn = 0;
      if (lane == 0) drawn = atomicAdd(order.counter, 1);
      const int idx = static_cast<int>(gridDim.x) + warp_sum(lane == 0 ? drawn : 0);
      // The consumers have read the previous index (handoff k - 1: empty's phase k - 1).
      if (k > 0) cutlass::arch::ClusterBarrier::wait(&slot->empty, parity ^ 1u);
      if (lane == 0) {
        slot->idx = idx;
        cutlass::arch::ClusterBarrier::arrive(&slot->full);  // release: the store above first
      }
      __syncwarp();
      return idx;
    } else {
      // Only lane 0 reads the slot, and it is the lane that arrives on `empty`: an arrive releases
      // the arriving thread's own accesses, so a read by another lane would be unordered with the
      // producer's next write (compute-sanitizer's racecheck reported exactly that when every lane
      // read it). redux.sync hands the value to the other lanes, in a uniform register.
      cutlass::arch::ClusterBarrier::wait(&slot->full, parity);
      return warp_sum(read_slot_by_lane0(slot));
    }
  }
  // Lane 0 reads the slot's index and then arrives on `empty`; the other lanes get 0. Predicated
  // instructions, not a branch: a lane-divergent branch in the tile loop made ptxas treat the
  // consumer's key loop as divergent (BSSY around its barrier waits, descriptor arithmetic off the
  // uniform datapath: 48 R2UR in the d64 causal varlen loop against the fixed-length kernel's 8).
  __device__ static int read_slot_by_lane0(TileSlot* slot) {
    int v;
    asm volatile(
        "{\n\t.reg .pred p;\n\t.reg .u32 lane;\n\t"
        "mov.u32 lane, %%laneid;\n\t"
        "setp.eq.u32 p, lane, 0;\n\t"
        "mov.b32 %0, 0;\n\t"
        "@p ld.volatile.shared.b32 %0, [%1];\n\t"
        "@p mbarrier.arrive.shared::cta.b64 _, [%2];\n\t"
        "}"
        : "=r"(v)
        : "r"(cute::cast_smem_ptr_to_uint(&slot->idx)), "r"(cute::cast_smem_ptr_to_uint(&slot->empty))
        : "memory");
    return v;
  }
  // Producer, after its loop of k tiles: take the consumers' read of the last index (the one past
  // the end, handoff k - 1), so that no arrival is pending when the CTA exits.
  __device__ void drain(int k, TileSlot* slot) const {
    if (dynamic() && k > 0) cutlass::arch::ClusterBarrier::wait(&slot->empty, (static_cast<uint32_t>(k) & 1u) ^ 1u);
  }
  __device__ WorkTile tile(int) const { return cur; }
  static int grid_size(const TileOrder<kCausal>& o, int num_sms) {
    const int n = (kCausal && o.fold) ? o.num_units() : o.num_tiles();  // upper bounds
    return n < num_sms ? n : num_sms;
  }

  // Locates work index idx (>= the previous lookup's): false once it is past the last tile.
  __device__ bool valid(int idx) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    // Skip whole windows of 32 sequences that end at or before idx. The loop only searches (no
    // tile work inside it), so its reconvergence point is right after it rather than after the
    // tile body, and every warp-wide quantity is a redux.sync (uniform register).
    int count, nb_lane, total;
    for (;;) {
      const int b = seq + lane;
      nb_lane = query_blocks(b);
      count = b < order.batch ? indices_of(nb_lane) : 0;
      total = warp_sum(count);
      if (seq >= order.batch || idx < seq_base + total) break;
      seq_base += total;
      seq += 32;
    }
    if (seq >= order.batch) return false;
    int incl = count;  // inclusive prefix sum over the window's 32 sequences
    CUTE_UNROLL
    for (int s = 1; s < 32; s <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, incl, s);
      if (lane >= s) incl += up;
    }
    const int hit = warp_sum(seq_base + incl <= idx ? 1 : 0);  // lanes before the hit
    const int nb = warp_sum(lane == hit ? nb_lane : 0);
    seq_base += warp_sum(lane < hit ? count : 0);
    seq += hit;
    cur = tile_in(idx - seq_base, nb);
    cur.batch = seq;
    return true;
  }

 private:
  // Query blocks of sequence b: its rows (clamped as FwdMainloop::seq_info clamps them) over kBlockM.
  __device__ int query_blocks(int b) const {
    if (b >= order.batch) return 0;
    if (order.cu_q == nullptr) return (order.rows_q + kBlockM - 1) / kBlockM;  // batched: rows_q each
    const int oq = min(max(__ldg(order.cu_q + b), 0), order.rows_q);
    const int lq = min(max(__ldg(order.cu_q + b + 1) - oq, 0), order.rows_q - oq);
    return (lq + kBlockM - 1) / kBlockM;
  }
  __device__ int indices_of(int nb) const {
    return (kCausal && order.fold) ? 2 * ((nb + 1) / 2) * order.heads : nb * order.heads;
  }
  __device__ WorkTile tile_in(int i, int nb) const {
    const VarlenTileIndex v = varlen_tile_in<kCausal>(i, nb, order.heads, order.fold, order.balanced);
    WorkTile t{};
    t.m_block = v.m_block;
    t.head = v.head;
    return t;
  }
  __device__ int index_of(int r) const {
    return varlen_work_index<kCausal>(r, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), order.fold,
                                      order.balanced);
  }
};

}  // namespace hopattn::sm90::ws
