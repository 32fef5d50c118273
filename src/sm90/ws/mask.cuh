// Which keys a query row may see: the key-length bound (TMA zero-fills past seqlen_k, so padded
// keys must be forced to -inf) and optionally the bottom-right aligned causal bound. Also gives
// the key-block range of a query tile so fully masked blocks are never loaded nor multiplied.
#pragma once

#include <cute/tensor.hpp>

namespace hopattn::sm90::ws {

// Query row i sees keys j < key_limit(i): seqlen_k, and for causal also i + 1 + seqlen_k - seqlen_q
// (bottom-right alignment: the last query row sees every key). A limit <= 0 means the row sees
// no key at all; the softmax then yields zeros and lse = -inf.
template <int kBlockM, int kBlockN, bool kCausal>
struct FwdMask {
  int seqlen_q, seqlen_k;

  __device__ __forceinline__ int key_limit(int row) const {
    if constexpr (kCausal) {
      const int causal = row + 1 + seqlen_k - seqlen_q;
      return causal < seqlen_k ? causal : seqlen_k;
    } else {
      return seqlen_k;
    }
  }

  // Key blocks [0, n_block_end) hold every key the tile's rows can see. For causal this uses the
  // last real row of the tile (rows past seqlen_q are padding and never stored). May be <= 0.
  __device__ __forceinline__ int n_block_end(int m_block) const {
    int keys = seqlen_k;
    if constexpr (kCausal) {
      const int last_row = min((m_block + 1) * kBlockM, seqlen_q) - 1;
      keys = key_limit(last_row);
    }
    return keys <= 0 ? 0 : (keys + kBlockN - 1) / kBlockN;
  }

  // Only blocks that cross seqlen_k or the diagonal of the tile's first row pay for masking.
  __device__ __forceinline__ bool block_needs_mask(int m_block, int n_block) const {
    const int block_end = (n_block + 1) * kBlockN;
    if (block_end > seqlen_k) return true;
    if constexpr (kCausal) return block_end > key_limit(m_block * kBlockM);
    return false;
  }

  // s_rc: scores in (row, col) view; c_rc: the matching (row, col) tile coordinates.
  template <class Scores, class Coords>
  __device__ __forceinline__ void apply(Scores& s_rc, const Coords& c_rc, int m_block, int n_block) const {
    using namespace cute;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      const int row = m_block * kBlockM + get<0>(c_rc(r, 0));
      const int limit = key_limit(row) - n_block * kBlockN;  // first masked column in this block
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        if (get<1>(c_rc(r, c)) >= limit) s_rc(r, c) = -INFINITY;
      }
    }
  }
};

}  // namespace hopattn::sm90::ws
