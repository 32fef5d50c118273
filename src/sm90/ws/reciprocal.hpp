// 1 / d on the FMA pipe, for the softcap forward's share of scores whose reciprocal does not go
// through MUFU.RCP (ws/softmax.cuh, Softcap::on_fma). Host and device: the CPU tests walk its error.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "api/problem.hpp"  // HOPATTN_HOST_DEVICE

namespace hopattn::sm90::ws {

// For a normal float d >= 1 whose reciprocal is normal (the softcap's d = 1 + e lies in [1, 2^64]):
// the exponent-flip seed 0x7EF311C7 - bits(d) (relative error 5.1e-2), one Newton step (2.6e-3),
// then one cubic step r (1 + t + t^2) with t = 1 - d r (7.6e-8 over [1, 2^64]). Five FFMAs and an
// integer subtract: ~6 issue slots against one MUFU operation. A NaN d gives NaN.
// kNegate: -1 / d, the sign carried by the last FFMA's operands (no extra instruction; the
// softcap forward's recip-score form wants the negated value).
template <bool kNegate = false>
HOPATTN_HOST_DEVICE inline float reciprocal_on_fma(float d) {
#ifdef __CUDA_ARCH__
  float r = __int_as_float(0x7EF311C7 - __float_as_int(d));
#else
  int32_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  bits = 0x7EF311C7 - bits;
  float r;
  std::memcpy(&r, &bits, sizeof r);
#endif
  r = fmaf(r, fmaf(-d, r, 1.f), r);
  const float t = fmaf(-d, r, 1.f);
  const float rs = kNegate ? -r : r;
  return fmaf(rs, fmaf(t, t, t), rs);
}

}  // namespace hopattn::sm90::ws
