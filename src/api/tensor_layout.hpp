// Layout facts of a (sizes, strides) view that validation needs for any input, however large or
// malformed: computed with overflow checks, so that a check cannot itself overflow.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace hopattn::detail {

// One past the last byte the view reaches from its base, 0 for a view without elements, or -1 when
// that does not fit in int64 (kernels index with 64-bit offsets; a view beyond them cannot exist).
// Sizes and strides must be non-negative (checked before).
inline int64_t layout_extent_bytes(const int64_t* sizes, const int64_t* strides, int ndim, std::size_t elem_bytes) {
  int64_t last = 0;  // the largest element offset
  for (int i = 0; i < ndim; ++i) {
    if (sizes[i] == 0) return 0;
    int64_t term;
    if (__builtin_mul_overflow(sizes[i] - 1, strides[i], &term) || __builtin_add_overflow(last, term, &last)) return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, int64_t{1}, &last) ||
      __builtin_mul_overflow(last, static_cast<int64_t>(elem_bytes), &bytes))
    return -1;
  return bytes;
}

// Whether two different index tuples may reach the same element: false when the dims of size > 1,
// taken in increasing stride, each step over at least everything the dims inside them span. This
// is sufficient, not necessary, for no overlap; every layout torch gives a fresh or sliced tensor
// passes, and a stride of 0 (expand, broadcast) on a dim of size > 1 does not. An output with such
// a layout would have several CTAs write one element: a race, so a silently wrong result.
inline bool layout_may_alias(const int64_t* sizes, const int64_t* strides, int ndim) {
  std::pair<int64_t, int64_t> dims[8];  // (stride, size) of the dims of size > 1
  int n = 0;
  for (int i = 0; i < ndim && i < 8; ++i) {
    if (sizes[i] == 0) return false;  // no elements, nothing to overlap
    if (sizes[i] > 1) dims[n++] = {strides[i], sizes[i]};
  }
  std::sort(dims, dims + n);
  int64_t spanned = 1;  // elements covered by the dims placed so far
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < spanned) return true;
    if (__builtin_mul_overflow(dims[i].second - 1, dims[i].first, &spanned) ||
        __builtin_add_overflow(spanned, int64_t{1}, &spanned))
      return true;  // beyond int64: the extent check rejects it anyway
  }
  return false;
}

}  // namespace hopattn::detail

#include "hopattn/hopattn.hpp"

namespace hopattn {
// A 4-dim output's layout (validate.cpp): no two elements at one address, checked after
// check_tensor_layout. Declared here, not in problem.hpp, which every kernel includes.
Result check_output_layout(const char* name, const TensorRef& t);
}  // namespace hopattn
