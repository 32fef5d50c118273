// Where a cached key lives and how a warp stages 16 of them in shared memory: the contiguous and
// paged address rule (page indices clamped into the pool, so unchecked page tables never send a
// load outside the cache), the XOR swizzle of the shared tiles, and the cp.async chunk loader.
#pragma once

#include <cstdint>

#include "sm90/decode/params.hpp"
#include "sm90/decode/ptx.cuh"

namespace hopattn::sm90::decode {

// Byte offset of 16-byte chunk c of row r in a shared tile with kRowChunks chunks per row. The
// chunk index is XORed with r % 8, so the 8 row addresses of one ldmatrix phase (same logical
// chunk, 8 consecutive rows) fall in 8 different bank groups.
template <int kRowChunks>
__device__ __forceinline__ uint32_t swizzle(int r, int c) {
  static_assert(kRowChunks % 8 == 0, "rows of at least 128 bytes");
  return static_cast<uint32_t>((r * kRowChunks + (c ^ (r & 7))) * 16);
}

// key / page_size and key % page_size: a shift and a mask when the page size is a power of two
// (16, 64 and 256, the sizes issue 6 names), since a 32-bit integer division by a run-time value
// is a ~20-instruction ALU sequence, paid per row resolved. The branch is uniform across the grid.
__device__ __forceinline__ int page_index(int64_t page_size, int key) {
  const int ps = static_cast<int>(page_size);
  if ((ps & (ps - 1)) == 0) return key >> (__ffs(ps) - 1);
  return key / ps;
}
__device__ __forceinline__ int page_row(int64_t page_size, int key) {
  const int ps = static_cast<int>(page_size);
  if ((ps & (ps - 1)) == 0) return key & (ps - 1);
  return key % ps;
}

// The page that holds key `key` (0 <= key < p.capacity) of sequence b in a paged cache:
// page_table[b][key / page_size], clamped to [0, num_pages). 0 for a contiguous cache (unused).
// Split from the address rule so a warp can load the next chunk's page a step early and not wait
// on the page table right before its copies (load_kv_chunk's caller pipelines it).
__device__ __forceinline__ int cache_page(const KvCacheProblem& p, int b, int key) {
  if (p.page_table == nullptr) return 0;
  const int page = __ldg(p.page_table + b * p.page_table_stride + page_index(p.page_size, key));
  return min(max(page, 0), static_cast<int>(p.num_pages) - 1);
}

// Element offset of key `key` of sequence b, kv head h, in a cache with strides s, given its page
// (cache_page): row `key` of slab b (contiguous), or row key % page_size of that page (paged).
__device__ __forceinline__ int64_t cache_row_offset_in(const KvCacheProblem& p, int64_t s0, int64_t s1, int64_t s2,
                                                        int b, int h, int key, int page) {
  if (p.page_table == nullptr) return b * s0 + key * s1 + h * s2;
  return page * s0 + page_row(p.page_size, key) * s1 + h * s2;
}

__device__ __forceinline__ int64_t cache_row_offset(const KvCacheProblem& p, int64_t s0, int64_t s1, int64_t s2,
                                                     int b, int h, int key) {
  return cache_row_offset_in(p, s0, s1, s2, b, h, key, cache_page(p, b, key));
}

// The page of the row this lane resolves in load_kv_chunk (key key0 + lane % 16), or 0 past key_end.
__device__ __forceinline__ int chunk_row_page(const KvCacheProblem& p, int b, int key0, int key_end, int lane) {
  const int key = key0 + (lane & 15);
  return key < key_end ? cache_page(p, b, key) : 0;
}

// One warp copies keys key0 .. key0 + 15 of (b, h) from k_cache and v_cache into the swizzled
// (16 x head_dim) tiles at shared addresses k_tile and v_tile with cp.async (not waited for here).
// Keys at or past key_end are zero-filled without being read. Lanes 0-15 each resolve one K row's
// address and lanes 16-31 one V row's (`page`: chunk_row_page of this chunk), then every lane
// copies consecutive 16-byte chunks of rows (a coalesced 256 bytes per 16 lanes), fetching the row
// addresses by shuffle.
template <typename Element, int kHeadDim>
__device__ __forceinline__ void load_kv_chunk(const KvCacheProblem& p, int b, int h, int key0, int key_end,
                                              uint32_t k_tile, uint32_t v_tile, int lane, int page) {
  constexpr int kRowChunks = kHeadDim / 8;
  constexpr int kRowsPerPass = 32 / kRowChunks;
  const bool is_v = lane >= 16;
  const int key = key0 + (lane & 15);
  const int valid = key < key_end;
  int64_t offset = 0;
  if (valid)
    offset = is_v ? cache_row_offset_in(p, p.v_stride[0], p.v_stride[1], p.v_stride[2], b, h, key, page)
                  : cache_row_offset_in(p, p.k_stride[0], p.k_stride[1], p.k_stride[2], b, h, key, page);
  const Element* k_base = static_cast<const Element*>(p.k_cache);
  const Element* v_base = static_cast<const Element*>(p.v_cache);
  const int c = lane % kRowChunks;
#pragma unroll
  for (int pass = 0; pass < kChunkKeys / kRowsPerPass; ++pass) {
    const int r = lane / kRowChunks + pass * kRowsPerPass;
    const int64_t k_off = __shfl_sync(0xffffffffu, offset, r);
    const int k_valid = __shfl_sync(0xffffffffu, valid, r);
    const int64_t v_off = __shfl_sync(0xffffffffu, offset, 16 + r);
    const int v_valid = __shfl_sync(0xffffffffu, valid, 16 + r);
    cp_async_16(k_tile + swizzle<kRowChunks>(r, c), k_base + k_off + c * 8, k_valid != 0);
    cp_async_16(v_tile + swizzle<kRowChunks>(r, c), v_base + v_off + c * 8, v_valid != 0);
  }
}

}  // namespace hopattn::sm90::decode
