// CausalMask: which (query, key) scores a tile must set to -inf — keys past seqlen_k, and with
// kCausal keys right of the bottom-right aligned diagonal (query i sees key j iff j <= i + sk - sq).
#pragma once

#include <cmath>

namespace hopattn::sm90 {

template <bool kCausal>
struct CausalMask {
  int seqlen_q;
  int seqlen_k;

  // One past the last key query row `row` may see (<= 0 when it sees none).
  __device__ int key_limit(int row) const {
    return kCausal ? min(seqlen_k, row + seqlen_k - seqlen_q + 1) : seqlen_k;
  }

  // Keys [0, kv_end) are visible to at least one row of the query tile starting at `m_start`;
  // tiles past it are skipped entirely. <= 0 means the whole query tile sees no key.
  __device__ int tile_kv_end(int m_start, int block_m) const { return key_limit(m_start + block_m - 1); }

  // Whether any element of key tile [n_start, n_start + block_n) is masked for some row of the
  // query tile starting at m_start: only then is the per-element pass needed.
  __device__ bool tile_needs_mask(int m_start, int n_start, int block_n) const {
    return n_start + block_n > key_limit(m_start);
  }

  // Masks one warp's m16 x kBlockN accumulator tile (kNTiles n8 fragments). This thread holds
  // rows row0 and row0 + 8, columns col0 + 8*j + {0, 1} of fragment j (mma.sync C layout).
  template <int kNTiles>
  __device__ void apply(float (&s)[kNTiles][4], int row0, int col0) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int limit = key_limit(row0 + 8 * r);
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col0 + 8 * j + e >= limit) s[j][2 * r + e] = -INFINITY;
        }
      }
    }
  }
};

}  // namespace hopattn::sm90
