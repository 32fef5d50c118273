// Maps a linear work index to a (m_block, head, batch) output tile, and hands indices to CTAs:
// one tile per CTA (flattened grid) or a static persistent round-robin over a grid of #SMs.
// The linear order is what decides load balance and L2 reuse; see TileOrder below.
#pragma once

#include <cuda_runtime.h>

namespace hopattn::sm90::ws {

struct WorkTile {
  int m_block, head, batch;
};

// Linear order of tiles. Non-causal: every tile costs the same, so m_block runs fastest and the
// ~#SMs tiles in flight together read the same few (batch, head) K/V tensors from L2.
// Causal: a tile's cost grows with m_block, so m_block runs slowest and descending (longest tiles
// first, short ones fill the tail of the round-robin); heads run fastest so that the query heads of
// one GQA group (h = kv * group + g, adjacent) are in flight together and share K/V in L2.
// (Measured and dropped, docs/perf-notes.md v2: cutting the pairs into L2-sized sections, with a
// static or a dynamic atomic-counter scheduler; L2 hits rose, speed did not.)
template <bool kCausal>
struct TileOrder {
  int num_m_blocks, heads, batch;
  bool snake;  // persistent round-robin alternates direction (kBitSnake builds only)

  __host__ __device__ int num_tiles() const { return num_m_blocks * heads * batch; }

  __device__ WorkTile tile(int idx) const {
    WorkTile t;
    if constexpr (kCausal) {
      t.head = idx % heads;
      idx /= heads;
      t.batch = idx % batch;
      t.m_block = num_m_blocks - 1 - idx / batch;
    } else {
      t.m_block = idx % num_m_blocks;
      idx /= num_m_blocks;
      t.head = idx % heads;
      t.batch = idx / heads;
    }
    return t;
  }
};

// Static scheduler: CTA b takes tiles b, b + G, ... (persistent, G = gridDim.x) or just tile b.
// With kSnake (and order.snake) the round-robin reverses every round: round r gives CTA b the tile
// r*G + b for even r, r*G + G-1-b for odd r, so a CTA that drew a round's longest causal tile draws
// the next round's shortest. Every warp of a CTA computes the same sequence without communicating:
// first(), then next(k) for the index after the CTA's k-th tile (k from 0).
template <bool kCausal, bool kPersistent, bool kSnake = false>
struct StaticTileScheduler {
  TileOrder<kCausal> order;

  __device__ int first() const { return static_cast<int>(blockIdx.x); }
  __device__ bool valid(int idx) const { return idx < order.num_tiles(); }
  __device__ WorkTile tile(int idx) const { return order.tile(idx); }
  __device__ int next(int k) const { return index_of(k + 1); }

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

}  // namespace hopattn::sm90::ws
