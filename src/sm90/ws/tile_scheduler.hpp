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
template <bool kCausal>
struct TileOrder {
  int num_m_blocks, heads, batch;

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
// Every warp of a CTA runs its own copy and so agrees on the sequence without communicating.
template <bool kCausal, bool kPersistent>
struct StaticTileScheduler {
  TileOrder<kCausal> order;
  int idx;

  __device__ explicit StaticTileScheduler(TileOrder<kCausal> o) : order(o), idx(blockIdx.x) {}

  __device__ bool valid() const { return idx < order.num_tiles(); }
  __device__ WorkTile tile() const { return order.tile(idx); }
  __device__ void advance() { idx = kPersistent ? idx + static_cast<int>(gridDim.x) : order.num_tiles(); }
  // Whether the CTA gets another tile after the current one (decides the Q-buffer handshake).
  __device__ bool has_next() const { return kPersistent && idx + static_cast<int>(gridDim.x) < order.num_tiles(); }

  // Grid size: one CTA per tile, or one per SM (never more CTAs than tiles).
  static int grid_size(const TileOrder<kCausal>& o, int num_sms) {
    const int n = o.num_tiles();
    return kPersistent ? (n < num_sms ? n : num_sms) : n;
  }
};

}  // namespace hopattn::sm90::ws
