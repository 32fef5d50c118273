// Kernel arguments and tile shapes of the sm90 mma.sync forward pass. FwdParams is AttnProblem
// reduced to what the device code reads, with 32-bit sizes (checked by the launcher) and 64-bit strides.
#pragma once

#include <cstdint>

namespace hopattn::sm90 {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // (batch, heads_q, seqlen_q) contiguous, or null

  // Element strides of (batch, seq, head); 64-bit so offsets past 2^31 elements stay exact.
  int64_t q_stride[3];
  int64_t k_stride[3];
  int64_t v_stride[3];
  int64_t o_stride[3];

  int seqlen_q, seqlen_k, heads_q;
  int group;          // query heads per K/V head (GQA): kv head = h / group
  int num_m_blocks;   // query tiles per (batch, head)
  float scale;        // softmax scale, natural units (for the lse)
  float scale_log2;   // scale * log2(e): softmax runs in base 2 so each exp is one FFMA + EX2
};

// Tile shape per head dim. Each warp owns 16 query rows (one m16 MMA fragment), so
// kBlockM = 16 * kNumWarps. Shared memory holds Q once plus two stages each of K and V:
//   hdim  64: 128 x 64, 8 warps -> 16 + 2*8 + 2*8   = 48 KB
//   hdim 128: 128 x 64, 8 warps -> 32 + 2*16 + 2*16 = 96 KB
//   hdim 256:  64 x 64, 4 warps -> 32 + 2*32 + 2*32 = 160 KB (O alone is 128 fp32 regs/thread,
//   so 16 rows per warp is the most that fits the 255-register budget without spilling)
template <int kHeadDim>
struct FwdTileConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dim must be 64, 128 or 256");
  static constexpr int kNumWarps = kHeadDim == 256 ? 4 : 8;
  static constexpr int kThreads = 32 * kNumWarps;
  static constexpr int kBlockM = 16 * kNumWarps;
  static constexpr int kBlockN = 64;
  static constexpr int kStages = 2;  // K and V are each double-buffered
  static constexpr int kElementBytes = 2;
  static constexpr int kSmemBytes =
      (kBlockM * kHeadDim + 2 * kStages * kBlockN * kHeadDim) * kElementBytes;
  static_assert(kSmemBytes <= 227 * 1024, "exceeds Hopper's 227 KB of dynamic shared memory per block");
};

}  // namespace hopattn::sm90
