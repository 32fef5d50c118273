// The 16-bit forward kernel's default key and query tiles per (head dim, mask), in a header without CUDA so that
// host code (the KV-cache route's page-size rule, its CPU tests) reads the same numbers the kernel
// configuration (FwdWsConfig, tile_shape.hpp) is built from.
#pragma once

namespace hopattn::sm90::ws {

// Keys per pipeline stage, limited by registers (S and the O accumulator live in registers: d256's
// 64x256 O leaves room only for a 64x80 S) and by 227 KB of shared memory (Q + 2 stages of K and
// V). Causal d128 uses 128 so that diagonal tiles waste less work. `masked`: the causal, window and
// softcap kernels (all built on the causal configuration).
constexpr int default_key_tile(int head_dim, bool masked) {
  return head_dim == 64 ? 128 : head_dim == 128 ? (masked ? 128 : 176) : 80;
}

// Query rows per CTA (FwdWsConfig::kBlockM): 64 per consumer warpgroup, three warpgroups at d64.
constexpr int default_query_tile(int head_dim) { return head_dim == 64 ? 192 : 128; }

}  // namespace hopattn::sm90::ws
