// Which keys a query row may see: the key-length bound (TMA zero-fills past seqlen_k, so padded
// keys must be forced to -inf) and, in the masked instantiation (kMasked), the bottom-right aligned
// window: causal is the window (unbounded, 0). Also gives the key-block range of a query tile so
// fully masked blocks are never loaded nor multiplied.
#pragma once

#include <cute/tensor.hpp>

namespace hopattn::sm90::ws {

// Query row i sees keys key_first(i) <= j < key_limit(i): with d = seqlen_k - seqlen_q,
// key_first = i + d - left and key_limit = i + d + right + 1, clipped to [0, seqlen_k). left and
// right are the window's run-time bounds with "unbounded" stored as seqlen_k (left) and seqlen_q
// (right) (make_window): far enough to reach every key from every row, and the sums stay inside
// int (seqlen <= INT_MAX / 2). An empty range means the row sees no key at all; the softmax then
// yields zeros and lse = -inf.
// kLocal: the window's run-time bounds; without it a masked kernel is causal (right 0, no left
// bound) with compile-time bounds.
// kTailShift (the 16-bit varlen kernels): the block holding a sequence's last key, tail_block, is
// loaded shifted left by shift = (tail_block + 1) * kBlockN - seqlen_k rows so that it ends at
// seqlen_k: its column c is key tail_block * kBlockN - shift + c. Rows past seqlen_k are then never
// read (unused KV-cache slots may hold NaN, and 0 * NaN = NaN in P V); its first `shift` columns,
// which block tail_block - 1 already holds, are masked. tail_block = -1: no block is shifted.
template <int kBlockM, int kBlockN, bool kMasked, bool kLocal = false, bool kTailShift = false>
struct FwdMask {
  int seqlen_q, seqlen_k;
  int left, right;
  int tail_block = -1;

  __device__ __forceinline__ int key_limit(int row) const {
    if constexpr (kMasked) {
      const int limit = row + 1 + seqlen_k - seqlen_q + (kLocal ? right : 0);
      return limit < seqlen_k ? limit : seqlen_k;
    } else {
      return seqlen_k;
    }
  }
  __device__ __forceinline__ int key_first(int row) const {
    if constexpr (kLocal) {
      const int first = row + seqlen_k - seqlen_q - left;
      return first > 0 ? first : 0;
    } else {
      return 0;
    }
  }

  // Key blocks [n_block_begin, n_block_end) hold every key the tile's rows can see: the end from the
  // last real row of the tile (rows past seqlen_q are padding and never stored), the beginning
  // from its first row. The range may be empty (end <= begin).
  __device__ __forceinline__ int n_block_end(int m_block) const {
    int keys = seqlen_k;
    if constexpr (kMasked) {
      const int last_row = min((m_block + 1) * kBlockM, seqlen_q) - 1;
      keys = key_limit(last_row);
    }
    return keys <= 0 ? 0 : (keys + kBlockN - 1) / kBlockN;
  }
  __device__ __forceinline__ int n_block_begin(int m_block) const {
    if constexpr (kLocal) return key_first(m_block * kBlockM) / kBlockN;
    return 0;
  }

  // Only blocks that cross seqlen_k, the window's right edge for the tile's first row or its left
  // edge for the tile's last row pay for masking.
  __device__ __forceinline__ bool block_needs_mask(int m_block, int n_block) const {
    const int block_end = (n_block + 1) * kBlockN;
    if (block_end > seqlen_k) return true;
    if constexpr (kLocal)
      return block_end > key_limit(m_block * kBlockM) || n_block * kBlockN < key_first((m_block + 1) * kBlockM - 1);
    if constexpr (kMasked) return block_end > key_limit(m_block * kBlockM);
    return false;
  }

  // s_rc: scores in (row, col) view; c_rc: the matching (row, col) tile coordinates. Blocks that
  // reach no row's left edge (every block of a causal problem) take the one-compare loop the causal
  // kernel always had; the choice is uniform per block.
  template <class Scores, class Coords>
  __device__ __forceinline__ void apply(Scores& s_rc, const Coords& c_rc, int m_block, int n_block) const {
    if constexpr (kTailShift) {
      if (n_block == tail_block) {  // the shifted block: key base moved left, its first columns hidden
        const int shift = (n_block + 1) * kBlockN - seqlen_k;
        apply_rows<true>(s_rc, c_rc, m_block, seqlen_k - kBlockN, shift);
        return;
      }
    }
    if constexpr (kLocal) {
      if (n_block * kBlockN < key_first((m_block + 1) * kBlockM - 1)) {
        apply_rows<true>(s_rc, c_rc, m_block, n_block * kBlockN, 0);
        return;
      }
    }
    apply_rows<false>(s_rc, c_rc, m_block, n_block * kBlockN, 0);
  }

 private:
  // base: the key of column 0; columns below `lowest` are masked too (the shifted block's overlap).
  template <bool kLeftEdge, class Scores, class Coords>
  __device__ __forceinline__ void apply_rows(Scores& s_rc, const Coords& c_rc, int m_block, int base,
                                             int lowest) const {
    using namespace cute;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      const int row = m_block * kBlockM + get<0>(c_rc(r, 0));
      const int limit = key_limit(row) - base;  // first masked column right of the window
      const int first = kLeftEdge ? max(key_first(row) - base, lowest) : 0;  // first visible column
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        const int col = get<1>(c_rc(r, c));
        if (col >= limit || (kLeftEdge && col < first)) s_rc(r, c) = -INFINITY;
      }
    }
  }
};

// The run-time window bounds of the masked kernels from AttnProblem's normalised ones (-1 means
// unbounded), clamped to where a bound stops changing anything: the left one at seqlen_k (row i's
// first key i + d - left <= 0 for every row), the right one at seqlen_q (i + d + right >= seqlen_k
// - 1 for every row, d = seqlen_k - seqlen_q, even when seqlen_q > seqlen_k). Varlen: the max
// lengths, which bound every sequence's.
struct WindowBounds {
  int left, right;
};
inline WindowBounds make_window(int64_t window_left, int64_t window_right, int64_t seqlen_q, int64_t seqlen_k) {
  const auto clamp = [](int64_t w, int64_t at) { return int(w < 0 || w > at ? at : w); };
  return {clamp(window_left, seqlen_k), clamp(window_right, seqlen_q)};
}

}  // namespace hopattn::sm90::ws
