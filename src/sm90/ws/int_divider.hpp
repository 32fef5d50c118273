// Division by a run-time divisor fixed at launch, as a multiply-high and a shift. The tile
// scheduler maps every work index to (m_block, head, batch) with two or three such divisions per
// tile; as plain `/` and `%` each is a ~20-instruction dependent chain through I2F, MUFU.RCP and
// F2I (fwd_bf16_hdim64's SASS: ~0.3 us between a warpgroup's O store and its next S GEMM, session
// 51's trace). Host and device, so that the CPU tests check it against `/`.
#pragma once

#include <cstdint>

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90::ws {

// For 1 <= d < 2^31 and 0 <= n < 2^31: s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1 (< 2^32),
// n / d = (mulhi(n, m) + n) >> s (Granlund and Montgomery; with n < 2^31 the sum cannot overflow).
struct IntDivider {
  int32_t d = 1;
  uint32_t m = 1;
  uint32_t s = 0;

  IntDivider() = default;
  explicit IntDivider(int divisor) : d(divisor < 1 ? 1 : divisor) {
    while ((uint64_t(1) << s) < uint64_t(d)) ++s;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - uint64_t(d))) / uint64_t(d) + 1);
  }

  HOPATTN_HOST_DEVICE int div(int n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(uint32_t(n), m);
#else
    const uint32_t hi = uint32_t((uint64_t(uint32_t(n)) * m) >> 32);
#endif
    return int((hi + uint32_t(n)) >> s);
  }
  // quotient, and n - quotient * d
  HOPATTN_HOST_DEVICE int divmod(int n, int& rem) const {
    const int q = div(n);
    rem = n - q * d;
    return q;
  }
};

}  // namespace hopattn::sm90::ws
