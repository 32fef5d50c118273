// A shared-memory tile of 16-bit elements with an XOR swizzle on 16-byte chunks, plus the cp.async
// loader that fills it from a strided global tensor (zero-filling rows past the sequence end).
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm80.hpp>
#include <cute/numeric/int.hpp>

namespace hopattn::sm90 {

// Row-major kRows x kCols tile. Every row is a multiple of 128 bytes, so without a swizzle the
// 8 rows one ldmatrix phase reads would all start in bank 0 (8-way conflict). Chunk c of row r
// is stored at chunk c ^ (r & 7): 8 consecutive rows at the same logical chunk then cover all
// 32 banks, for ldmatrix reads, cp.async writes and the epilogue's fragment writes alike.
template <int kRows, int kCols>
struct SwizzledTile {
  static constexpr int kChunkElems = 8;  // 16 bytes of 16-bit elements
  static constexpr int kChunksPerRow = kCols / kChunkElems;
  static constexpr int kNumRows = kRows;
  static constexpr int kElems = kRows * kCols;
  static_assert(kChunksPerRow % 8 == 0, "rows must be a multiple of 128 bytes for the swizzle");

  // Element offset of the 16-byte chunk `chunk` of row `row`.
  __device__ static int chunk_offset(int row, int chunk) {
    return row * kCols + ((chunk ^ (row & 7)) * kChunkElems);
  }

  // ldmatrix addressing. A lane reads logical chunk (C + lane_chunk) of row (R + lane_row), with
  // C even and R a multiple of 8 known at compile time (unrolled loops). Since C | lane_chunk =
  // C ^ lane_chunk and R leaves row & 7 unchanged, the swizzled offset is one of four per-lane
  // values (picked by C & 7) plus a compile-time constant. Computing it naively instead makes the
  // compiler hoist one address register per distinct C out of the main loop (~50 at head dim 256).
  struct LaneOffsets {
    int base[4];
  };
  __device__ static LaneOffsets lane_offsets(int lane_row, int lane_chunk) {
    LaneOffsets o;
    const int y = lane_chunk ^ (lane_row & 7);
#pragma unroll
    for (int k = 0; k < 4; ++k) o.base[k] = lane_row * kCols + ((y ^ (2 * k)) * kChunkElems);
    return o;
  }
  // Offset of logical chunk (C + lane_chunk) in row (R + lane_row); C even, R % 8 == 0.
  __device__ static int at(const LaneOffsets& o, int row_r, int chunk_c) {
    return o.base[(chunk_c & 7) >> 1] + row_r * kCols + (chunk_c & ~7) * kChunkElems;
  }
};

// Issues cp.async (16 bytes each, L2-only: the tile is reused from shared memory, not L1) for a
// whole tile; `kThreads` threads split it evenly. Rows >= rows_valid are zero-filled (src-size 0)
// so masked keys hold 0, not stale data that could be NaN (0 * NaN would poison P.V).
// `gmem` points at the tile's first row, which is always inside the tensor.
template <class Tile, int kThreads, class Element>
__device__ void load_tile_async(Element* smem, const Element* gmem, int64_t row_stride, int rows_valid, int tid) {
  static_assert(kThreads % Tile::kChunksPerRow == 0, "a pass must cover whole rows");
  constexpr int kRowsPerPass = kThreads / Tile::kChunksPerRow;
  static_assert(Tile::kNumRows % kRowsPerPass == 0, "tile rows must split evenly over the passes");
  // Each thread keeps one chunk column and walks rows kRowsPerPass apart. The source pointer is
  // advanced rather than recomputed: precomputed 64-bit offsets per pass would be hoisted out of
  // the main loop and pin two registers each (16 passes at head dim 256).
  const int row0 = tid / Tile::kChunksPerRow;
  const int chunk = tid % Tile::kChunksPerRow;
  const Element* src = gmem + row0 * row_stride + chunk * Tile::kChunkElems;
  const int64_t step = kRowsPerPass * row_stride;
#pragma unroll
  for (int i = 0; i < Tile::kNumRows / kRowsPerPass; ++i) {
    const int row = row0 + i * kRowsPerPass;
    const bool valid = row < rows_valid;
    // With src-size 0 nothing is read; the address is still kept inside the tensor.
    cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>::copy(
        *reinterpret_cast<const cute::uint128_t*>(valid ? src : gmem),
        *reinterpret_cast<cute::uint128_t*>(smem + Tile::chunk_offset(row, chunk)), valid);
    src += step;
  }
}

}  // namespace hopattn::sm90
