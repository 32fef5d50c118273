// Maps a linear work index to a (m_block, head, batch) output tile, and hands indices to CTAs:
// one tile per CTA (flattened grid), a static persistent round-robin over a grid of #SMs, or (causal)
// a dynamic persistent queue. The linear order decides load balance and L2 reuse; see TileOrder.
//
// Interface shared by the schedulers (the kernel's producer warp and consumer threads each walk the
// same sequence): first() is this CTA's first index; producer_publish(k, producer_fetch()) and
// consumer_next(k) return the index that follows the CTA's k-th tile (k from 0). A dynamic
// scheduler's producer fetches it and publishes it through shared memory, and its consumers read it
// there; static ones compute it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cutlass/arch/barrier.h>

namespace hopattn::sm90::ws {

struct WorkTile {
  int m_block, head, batch;
};

// Linear order of tiles. Non-causal: every tile costs the same, so m_block runs fastest and the
// ~#SMs tiles in flight together read the same few (batch, head) K/V tensors from L2.
// Causal: a tile's cost grows with m_block, so m_block runs slowest and descending (longest tiles
// first, short ones fill the tail). Taken over all (batch, head) pairs at once, that order makes
// every tile in flight read a different pair's K/V, from DRAM (ncu, d128 s=2k: 12% L2 hits and
// ~3 TB/s of DRAM reads), so with the dynamic scheduler the pairs are cut into sections of
// `section` pairs whose K/V fit in part of L2, run one after another, each longest first. Heads run
// fastest inside a section so that the query heads of one GQA group (adjacent) share K/V in L2.
template <bool kCausal>
struct TileOrder {
  int num_m_blocks, heads, batch;
  int section;  // causal: (batch, head) pairs per L2 section, 1..heads*batch
  bool snake;   // static persistent scheduler: alternate the round-robin's direction (kBitSnake)

  __host__ __device__ int num_tiles() const { return num_m_blocks * heads * batch; }

  __device__ WorkTile tile(int idx) const {
    WorkTile t;
    if constexpr (kCausal) {
      const int section_tiles = section * num_m_blocks;
      const int first_pair = idx / section_tiles * section;
      const int pairs = min(section, heads * batch - first_pair);  // the last section may be short
      const int in_section = idx - first_pair * num_m_blocks;
      const int pair = first_pair + in_section % pairs;
      t.m_block = num_m_blocks - 1 - in_section / pairs;
      t.head = pair % heads;
      t.batch = pair / heads;
    } else {
      t.m_block = idx % num_m_blocks;
      idx /= num_m_blocks;
      t.head = idx % heads;
      t.batch = idx / heads;
    }
    return t;
  }
};

// Shared memory of the dynamic scheduler: the next tile index, double-buffered. Each slot has a
// `full` mbarrier (the producer arrives once it has written the slot) and an `empty` one (every
// consumer thread arrives once it has read it), so the ring needs no other handshake.
struct TileQueueStorage {
  int next[2];
  uint64_t full[2];
  uint64_t empty[2];
};

// Static scheduler: CTA b takes tiles b, b + G, ... (persistent, G = gridDim.x) or just tile b.
// With kSnake (and order.snake) the round-robin reverses every round: round r gives CTA b the tile
// r*G + b for even r, r*G + G-1-b for odd r, so a CTA that drew a round's longest causal tile draws
// the next round's shortest.
template <bool kCausal, bool kPersistent, bool kSnake = false>
struct StaticTileScheduler {
  TileOrder<kCausal> order;

  __device__ StaticTileScheduler(TileOrder<kCausal> o, int* /*queue counter: unused*/) : order(o) {}
  template <int kNumConsumerThreads>
  __device__ static void init(TileQueueStorage&) {}

  __device__ int first() const { return static_cast<int>(blockIdx.x); }
  __device__ bool valid(int idx) const { return idx < order.num_tiles(); }
  __device__ WorkTile tile(int idx) const { return order.tile(idx); }
  __device__ int producer_fetch() const { return 0; }
  __device__ int producer_publish(int k, int /*fetched*/, TileQueueStorage&) const { return index_of(k + 1); }
  __device__ int consumer_next(int k, TileQueueStorage&, uint32_t&) const { return index_of(k + 1); }

  // One CTA per tile, or one per SM (never more CTAs than tiles).
  static int grid_size(const TileOrder<kCausal>& o, int num_sms) {
    const int n = o.num_tiles();
    return kPersistent ? (n < num_sms ? n : num_sms) : n;
  }

 private:
  // Round r's indices are all >= r * G: once one is past the end, every later one is too.
  __device__ int index_of(int r) const {
    if constexpr (!kPersistent) return r == 0 ? static_cast<int>(blockIdx.x) : order.num_tiles();
    const int g = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    return r * g + ((kSnake && order.snake && (r & 1)) ? g - 1 - b : b);  // < num_tiles + 2g <= INT_MAX
  }
};

// Dynamic persistent scheduler: CTA b starts with tile b; after that, the CTA's producer warp takes
// the next index from a global counter (atomicAdd), so CTAs that drew short tiles take more of them
// and no fixed assignment can leave one SM with the long ones. The counter is zero at launch, and
// the launch's last fetch resets it: the CTAs fetch num_tiles times in all (one failing fetch each
// after their share), so the fetch that returns num_tiles - 1 is the last one of the launch.
template <bool kCausal>
struct DynamicTileScheduler {
  TileOrder<kCausal> order;
  int* counter;

  __device__ DynamicTileScheduler(TileOrder<kCausal> o, int* c) : order(o), counter(c) {}

  // Thread 0, before the CTA-wide sync that publishes barrier initialisation.
  template <int kNumConsumerThreads>
  __device__ static void init(TileQueueStorage& q) {
    for (int s = 0; s < 2; ++s) {
      cutlass::arch::ClusterBarrier::init(&q.full[s], 1);
      cutlass::arch::ClusterBarrier::init(&q.empty[s], kNumConsumerThreads);
    }
  }

  __device__ int first() const { return static_cast<int>(blockIdx.x); }
  __device__ bool valid(int idx) const { return idx < order.num_tiles(); }
  __device__ WorkTile tile(int idx) const { return order.tile(idx); }

  // Whole producer warp, converged. The fetch is issued early (its latency hides behind the tile's
  // loads; only lane 0's value means anything), the publish once the tile's loads are issued.
  __device__ int producer_fetch() const {
    int raw = 0;
    if (threadIdx.x % 32 == 0) {
      raw = atomicAdd(counter, 1);
      if (raw == order.num_tiles() - 1) atomicExch(counter, 0);
    }
    return raw;
  }
  // k-th publish goes to slot (k+1)&1; that slot's previous contents (publish k-2) must have been
  // read by every consumer: its empty barrier's (k-1)/2-th phase (k >= 2).
  __device__ int producer_publish(int k, int fetched, TileQueueStorage& q) const {
    const int next = static_cast<int>(gridDim.x) + fetched;
    if (threadIdx.x % 32 == 0) {
      const int slot = (k + 1) & 1;
      if (k >= 2) cutlass::arch::ClusterBarrier::wait(&q.empty[slot], uint32_t(((k - 2) >> 1) & 1));
      q.next[slot] = next;
      cutlass::arch::ClusterBarrier::arrive(&q.full[slot]);  // release: the slot write is visible
    }
    return __shfl_sync(0xffffffffu, next, 0);
  }

  // Every consumer thread. phases: bit s = parity of slot s's next completion.
  __device__ int consumer_next(int k, TileQueueStorage& q, uint32_t& phases) const {
    const int slot = (k + 1) & 1;
    cutlass::arch::ClusterBarrier::wait(&q.full[slot], (phases >> slot) & 1u);
    phases ^= 1u << slot;
    const int next = q.next[slot];
    cutlass::arch::ClusterBarrier::arrive(&q.empty[slot]);
    return next;
  }

  static int grid_size(const TileOrder<kCausal>& o, int num_sms) {
    const int n = o.num_tiles();
    return n < num_sms ? n : num_sms;
  }
};

}  // namespace hopattn::sm90::ws
