// O M^T for the FP8 kernel's rotated V: when V^T holds V M (M = diag(s) H / sqrt(d), the rotation
// of fp8_reference.random_rotation), P (V M) = O M, and O = (O M) M^T = ((O M) H) * s / sqrt(d)
// (H is symmetric). Applied to the normalised fp32 accumulator before the epilogue, on each
// thread's fragment: a fast Walsh-Hadamard transform along head_dim split between registers and
// lane shuffles, then the signs.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

namespace hopattn::sm90::fp8 {

// Row-view column c of a thread's accumulator fragment is head_dim column
// (c % 2) + 2 * (lane % 4) + 8 * (c / 2): bit 0 in registers, bits 1-2 across the quad's lanes,
// bits 3.. in registers again.
__device__ __forceinline__ int fragment_column(int c, int lane) { return (c & 1) + 2 * (lane & 3) + 8 * (c >> 1); }

// The rotation's sign bit of column `col`: splitmix64(seed * 2^32 + col) >> 63, as
// hopattn.fp8_reference.rotation_signs and the quantiser define it.
__device__ __forceinline__ bool rotation_sign_bit(uint32_t seed, int col) {
  uint64_t z = (uint64_t(seed) << 32) + uint64_t(col) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return ((z ^ (z >> 31)) >> 63) != 0;
}

// Sign bits of columns 32w .. 32w+31 (bit i: column 32w + i is negative).
__device__ __forceinline__ uint32_t sign_word(uint32_t seed, int w) {
  uint32_t bits = 0;
  for (int i = 0; i < 32; ++i) bits |= uint32_t(rotation_sign_bit(seed, 32 * w + i)) << i;
  return bits;
}

// o_rc: (rows, head_dim / 4) row view of one 64 x head_dim accumulator; sign_words: head_dim / 32
// words of sign_word (shared memory). All 32 lanes call it.
template <int kHeadDim, class Acc>
__device__ __forceinline__ void unrotate_rows(Acc& o_rc, const uint32_t* sign_words, int lane) {
  using namespace cute;
  constexpr int kCols = kHeadDim / 4;
  static_assert(decltype(size<1>(o_rc))::value == kCols);
  const float inv_sqrt_d = 1.f / sqrtf(float(kHeadDim));
  CUTE_UNROLL
  for (int r = 0; r < size<0>(o_rc); ++r) {
    // Column bit 0: register pairs.
    CUTE_UNROLL
    for (int c = 0; c < kCols; c += 2) {
      const float a = o_rc(r, c), b = o_rc(r, c + 1);
      o_rc(r, c) = a + b;
      o_rc(r, c + 1) = a - b;
    }
    // Column bits 1 and 2: the partner lane holds the same register with the bit flipped.
    CUTE_UNROLL
    for (int m = 1; m <= 2; m <<= 1) {
      const bool upper = (lane & m) != 0;
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const float v = o_rc(r, c), p = __shfl_xor_sync(0xffffffffu, v, m);
        o_rc(r, c) = upper ? p - v : v + p;
      }
    }
    // Column bits 3..: register strides 2, 4, ... of c.
    CUTE_UNROLL
    for (int h = 2; h < kCols; h <<= 1) {
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        if ((c & h) == 0) {
          const float a = o_rc(r, c), b = o_rc(r, c + h);
          o_rc(r, c) = a + b;
          o_rc(r, c + h) = a - b;
        }
      }
    }
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const int col = fragment_column(c, lane);
      o_rc(r, c) *= (sign_words[col >> 5] >> (col & 31)) & 1 ? -inv_sqrt_d : inv_sqrt_d;
    }
  }
}

}  // namespace hopattn::sm90::fp8
