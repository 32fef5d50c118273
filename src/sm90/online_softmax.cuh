// OnlineSoftmax: the running row max and row sum of one thread's two rows of an m16 MMA fragment,
// so a row's softmax is built tile by tile without ever holding the whole row of scores.
#pragma once

#include <cmath>

namespace hopattn::sm90 {

// The four threads of a quad (lanes 4g..4g+3) hold the same two rows; xor 1 and 2 stay in the quad.
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

struct OnlineSoftmax {
  // Raw (unscaled) scores: the scale is folded into the exponent, scale * log2(e) in one FFMA.
  float row_max[2] = {-INFINITY, -INFINITY};
  // Partial sums over this thread's columns only; the quad reduction waits until finalize(),
  // which is exact because all four threads apply the same rescale factors.
  float row_sum[2] = {0.f, 0.f};

  // Turns a masked score tile into unnormalised probabilities in place (p = 2^(s*c - max*c)) and
  // rescales the output accumulator rows by 2^(old_max*c - new_max*c).
  template <int kNTiles, int kOTiles>
  __device__ void update(float (&s)[kNTiles][4], float (&acc_o)[kOTiles][4], float scale_log2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = row_max[r];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) m = fmaxf(m, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      m = quad_max(m);
      // A row with every key so far masked keeps max -inf; subtracting 0 instead of -inf avoids
      // (-inf) - (-inf) = NaN, and its p = 2^-inf = 0 as it should be.
      const float ref = m == -INFINITY ? 0.f : m * scale_log2;
      const float rescale = exp2f(row_max[r] * scale_log2 - ref);  // 0 on the first visible tile
      row_max[r] = m;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(fmaf(s[j][2 * r + e], scale_log2, -ref));
          s[j][2 * r + e] = p;
          sum += p;
        }
      }
      row_sum[r] = row_sum[r] * rescale + sum;
#pragma unroll
      for (int o = 0; o < kOTiles; ++o) {
        acc_o[o][2 * r] *= rescale;
        acc_o[o][2 * r + 1] *= rescale;
      }
    }
  }

  // Completes the row sums. inv_sum is 1/sum, or 0 for a row that saw no key (so O = 0, not NaN);
  // lse is the natural-log logsumexp of the scaled scores, -inf for such a row.
  __device__ void finalize(float scale, float (&inv_sum)[2], float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool any = sum > 0.f;  // the row max contributes exp(0) = 1 whenever a key is visible
      inv_sum[r] = any ? 1.f / sum : 0.f;
      lse[r] = any ? row_max[r] * scale + logf(sum) : -INFINITY;
    }
  }
};

}  // namespace hopattn::sm90
