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
// (Cutting the (batch, head) pairs into L2-sized sections, each run longest first, lifted the L2
// hit rate from 39% to 80% at d128 s=4k but lost up to 30% at 16k: with a static round-robin each
// section restarts the long-to-short ramp, and the CTAs that draw its long tiles fall behind.
// DRAM bandwidth is not what limits this kernel: 41% of peak without sections.)
template <bool kCausal>
struct TileOrder {
  int num_m_blocks, heads, batch;
  bool snake;  // the scheduler's round-robin alternates direction (kBitSnake builds only)

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

// Static scheduler: CTA b takes tiles b, b + gridDim.x, ... (persistent) or just tile b.
// With kSnake the round-robin reverses every round (round r gives CTA b the tile r*G + b for even
// r, r*G + G-1-b for odd r): causal tiles run longest first, so plain round-robin hands CTA 0 the
// longest tile of every round, while the snake pairs each round's longest with the next round's
// shortest (a load-balance model puts the plain order 6% above the ideal finish time at s >= 4k,
// the snake within 0.3%). Every warp of a CTA runs its own copy and so agrees on the sequence
// without communicating.
template <bool kCausal, bool kPersistent, bool kSnake = false>
struct StaticTileScheduler {
  TileOrder<kCausal> order;
  int round, idx;

  __device__ explicit StaticTileScheduler(TileOrder<kCausal> o) : order(o), round(0), idx(blockIdx.x) {}

  __device__ bool valid() const { return idx < order.num_tiles(); }
  __device__ WorkTile tile() const { return order.tile(idx); }
  __device__ void advance() {
    if constexpr (!kPersistent) {
      idx = order.num_tiles();
    } else {
      ++round;
      idx = index_of(round);
    }
  }
  // Whether the CTA gets another tile after the current one (decides the Q-buffer handshake).
  // Round r's indices are all >= r * gridDim.x, so once one is past the end, all later ones are.
  __device__ bool has_next() const { return kPersistent && index_of(round + 1) < order.num_tiles(); }

  // Grid size: one CTA per tile, or one per SM (never more CTAs than tiles).
  static int grid_size(const TileOrder<kCausal>& o, int num_sms) {
    const int n = o.num_tiles();
    return kPersistent ? (n < num_sms ? n : num_sms) : n;
  }

 private:
  __device__ int index_of(int r) const {
    const int g = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int base = r * g;  // r * g < num_tiles + g fits in int: num_tiles <= INT_MAX / 2
    return base + ((kSnake && order.snake && (r & 1)) ? g - 1 - b : b);
  }
};

}  // namespace hopattn::sm90::ws
