// The forward's tail split: the persistent CTAs deal equal tiles round-robin, so when the tile count
// is not a multiple of the grid, the last round runs `tiles mod grid` tiles while the other SMs idle
// for a whole tile (3% of a call on the paper grid, docs/perf-notes.md). The split cuts each of those
// tiles along its keys into `pieces` ranges of key blocks, dealt as extra work indices after the
// whole tiles. Each piece finishes its softmax as usual (O normalised, lse); then every consumer
// warpgroup stores its 64 rows to a slot and counts itself on its (tile, warpgroup) counter, and the
// warpgroup that counts last merges all the pieces' slots (the split-KV combine, by a warpgroup
// instead of a kernel) and stores O through the ordinary epilogue. Host and device share this
// header's layout.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90::ws {

// Kernel parameters (TileOrder::split). pieces == 1: no split.
struct TailSplit {
  int first = INT_MAX;        // work index of the first split tile: tiles [first, first + tiles) are split
  int tiles = 0;              // split tiles (the last round's)
  int pieces = 1;             // key ranges per split tile
  int* counters = nullptr;    // tiles x consumer warpgroups, zeroed on the stream before the launch
  float* partial = nullptr;   // tiles x pieces slots of tail_split_slot_floats floats

  HOPATTN_HOST_DEVICE bool on() const { return pieces > 1; }
  // Work indices: the whole tiles, then piece p of split tile s at first + p * tiles + s, so that
  // the pieces in flight together cover the same key range of adjacent tiles (one head's K/V in L2).
  HOPATTN_HOST_DEVICE int num_indices(int num_tiles) const { return on() ? first + tiles * pieces : num_tiles; }
};

// What work index idx is: a whole tile (piece -1), or piece `piece` of split tile `split_tile`,
// whose tile index is `tile`. The scheduler's mapping, here so that the CPU tests walk it.
struct SplitWork {
  int tile, piece, split_tile;
};
// A piece's index (idx >= s.first, s.on()): what the scheduler calls past its whole tiles.
HOPATTN_HOST_DEVICE inline SplitWork split_piece(const TailSplit& s, int idx) {
  const int p = idx - s.first;
  return {s.first + p % s.tiles, p / s.tiles, p % s.tiles};
}
HOPATTN_HOST_DEVICE inline SplitWork split_work(const TailSplit& s, int idx) {
  return (!s.on() || idx < s.first) ? SplitWork{idx, -1, 0} : split_piece(s, idx);
}

// Key blocks of piece j out of a tile's [begin, end): near-equal consecutive ranges, none empty
// when there are at least as many blocks as pieces (the host plans no more pieces than that, and
// the launcher checks it).
struct BlockRange {
  int begin, end;
};
HOPATTN_HOST_DEVICE inline BlockRange piece_block_range(const TailSplit& s, int begin, int end, int piece) {
  const int n = end - begin;
  return {begin + piece * n / s.pieces, begin + (piece + 1) * n / s.pieces};
}

// Consumer warps of a tile of block_m rows: two warpgroups of 128 threads per 128 rows.
HOPATTN_HOST_DEVICE constexpr int tail_split_warps(int block_m) { return block_m / 16; }
// A slot: the O of every consumer thread (block_m x head_dim fp32) and its two rows' lse.
HOPATTN_HOST_DEVICE constexpr int64_t tail_split_slot_floats(int block_m, int head_dim) {
  return int64_t(block_m) * head_dim + int64_t(tail_split_warps(block_m)) * 32 * 2;
}
// The counters (one per split tile and consumer warpgroup) first, padded to 256 bytes, then the slots.
HOPATTN_HOST_DEVICE constexpr std::size_t tail_split_counter_bytes(int tiles, int block_m) {
  return (std::size_t(tiles) * (block_m / 64) * sizeof(int) + 255) / 256 * 256;
}
HOPATTN_HOST_DEVICE constexpr std::size_t tail_split_workspace_bytes(int tiles, int pieces, int block_m, int head_dim) {
  return pieces <= 1 ? 0
                     : tail_split_counter_bytes(tiles, block_m) +
                           std::size_t(tiles) * pieces * tail_split_slot_floats(block_m, head_dim) * sizeof(float);
}

}  // namespace hopattn::sm90::ws
