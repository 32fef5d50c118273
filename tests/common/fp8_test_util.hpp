// Shared helper of the FP8 GPU tests (header-only, host-only C++).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace hopattn::test {

// The largest |got - ref| / (abs_tol + rel_tol * |ref|) over lse entries: <= 1 passes. -inf (rows
// that see no key) must match exactly and NaN never passes. Why a relative part: the measured lse
// error grows with the size of the scores (only the cases with descales up to 4, scores in the
// hundreds, exceeded 2e-3), as expected if FP8 WGMMA accumulates q.k with less than fp32's
// precision (DeepSeek-V3's report: about 14 bits kept on H800).
inline double lse_excess(const std::vector<float>& got, const std::vector<float>& ref, double abs_tol, double rel_tol) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return INFINITY;
    if (std::isinf(got[i]) || std::isinf(ref[i])) {
      if (got[i] != ref[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(double(got[i]) - ref[i]) / (abs_tol + rel_tol * std::fabs(double(ref[i]))));
  }
  return worst;
}

}  // namespace hopattn::test
