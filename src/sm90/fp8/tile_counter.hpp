// Where a packed FP8 call keeps its tile counter: the int at the first 256-byte boundary after V^T
// in the workspace (api_fp8.cpp lays it out there and zeroes it on the stream; the launcher hands
// it to the dynamic tile order, sm90/ws/tile_scheduler.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "sm90/fp8/layout.hpp"

namespace hopattn::sm90::fp8 {

inline constexpr std::size_t kTileCounterAlign = 256;

// Bytes of a packed batch's V^T: (heads_kv, head_dim, vt_varlen_columns(total_k, batch)) e4m3.
inline std::size_t vt_varlen_bytes(int64_t heads_kv, int64_t head_dim, int64_t total_k, int64_t batch) {
  return std::size_t(heads_kv * head_dim * vt_varlen_columns(total_k, batch));
}
inline std::size_t tile_counter_offset(std::size_t vt_bytes) {
  return (vt_bytes + kTileCounterAlign - 1) / kTileCounterAlign * kTileCounterAlign;
}
inline int* varlen_tile_counter(const void* vt, int64_t heads_kv, int64_t head_dim, int64_t total_k, int64_t batch) {
  const std::size_t at = tile_counter_offset(vt_varlen_bytes(heads_kv, head_dim, total_k, batch));
  return reinterpret_cast<int*>(static_cast<char*>(const_cast<void*>(vt)) + at);
}

}  // namespace hopattn::sm90::fp8
