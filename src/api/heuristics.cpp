#include "api/heuristics.hpp"

#include <cstdlib>

namespace hopattn::heuristics {

FwdTuning& fwd_tuning() {
  static FwdTuning t = [] {
    FwdTuning f;
    if (const char* v = std::getenv("HOPATTN_WS_SNAKE")) f.snake = std::atoi(v);
    if (const char* v = std::getenv("HOPATTN_WS_L2_SECTION_MB")) f.l2_section_mb = std::atof(v);
    return f;
  }();
  return t;
}

// Measured over the paper grid: the snake order gains 6-11% at seqlen >= 4k, where each CTA runs
// many causal tiles of widely different lengths, and loses ~5% at 1k-2k, where tiles are short
// and runs of equal-length ones already balance the plain round-robin.
bool causal_snake_order(int64_t seqlen_q) {
  const int forced = fwd_tuning().snake;
  return forced < 0 ? seqlen_q >= 4096 : forced != 0;
}

// A section's K/V should stay in L2 while its tiles run; a third of L2 leaves room for the Q and O
// streams and for the sections before and after it, whose tiles overlap it in time.
int causal_l2_section_pairs(int64_t kv_bytes_per_pair, int pairs, int l2_bytes) {
  const double mb = fwd_tuning().l2_section_mb;
  const int64_t budget = mb >= 0 ? int64_t(mb * (1 << 20)) : int64_t(l2_bytes) / 3;
  const int64_t n = kv_bytes_per_pair > 0 ? budget / kv_bytes_per_pair : pairs;
  return int(n < 1 ? 1 : (n > pairs ? pairs : n));
}

// Up to 1k keys, N = 128 pads nothing at the grid's powers of two and leaves shared memory for the
// separate O buffer (+18% at 512); up to 4k, N = 160 keeps the separate O buffer (+4% at 2k);
// beyond, N = 176 amortises each softmax over the most keys (+1.5% at 16k).
int d128_noncausal_key_tile(int64_t seqlen_k) { return seqlen_k <= 1024 ? 128 : seqlen_k <= 4096 ? 160 : 0; }

}  // namespace hopattn::heuristics
