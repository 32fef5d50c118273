// Layout facts of a (sizes, strides) view that validation needs for any input, however large or
// malformed: computed with overflow checks, so that a check cannot itself overflow. Shared by the
// 4-dim (validate.cpp, KV cache, FP8) and the packed 3-dim (varlen) tensor checks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "api/messages.hpp"
#include "hopattn/hopattn.hpp"

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

// "(a, b, c)": the first ndim entries of a sizes or strides array, for messages.
inline std::string dims_text(const int64_t* v, int ndim) {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

// A view's extent must fit in int64 bytes (after the sign checks); the message names `name`.
inline Result check_extent(const char* name, const TensorRef& t, int ndim) {
  if (layout_extent_bytes(t.sizes, t.strides, ndim, dtype_size(t.dtype)) >= 0) return {};
  return fail(Status::kInvalidArgument, cat(name, ": sizes ", dims_text(t.sizes, ndim), " and strides ",
                                            dims_text(t.strides, ndim), " reach beyond 2^63 bytes"));
}

}  // namespace hopattn::detail

namespace hopattn {

// An output tensor (out, dq, dk, dv and their packed varlen forms, a cache being appended to,
// quantize_fp8's out): no element reachable by two index tuples, since each would be written by a
// different CTA. Checked after the tensor's layout rules, which bound its extent.
inline Result check_output_layout(const char* name, const TensorRef& t) {
  const int ndim = std::clamp(t.ndim, 0, 4);
  if (!detail::layout_may_alias(t.sizes, t.strides, ndim)) return {};
  return detail::fail(Status::kInvalidArgument,
                      detail::cat(name, ": strides ", detail::dims_text(t.strides, ndim),
                                  " let two elements share an address (a stride of 0, or smaller than the dims inside "
                                  "it); an output needs a layout without overlap"));
}

}  // namespace hopattn
