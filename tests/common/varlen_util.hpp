// Shared helpers of the varlen tests (header-only, host-only C++): the index tensors, the packed
// (total_tokens, heads, head_dim) views and the (heads, total) lse of hopattn's varlen API.
// Included by tests/cpu/test_varlen.cpp, tests/cpu/test_c_abi_varlen.cpp, tests/gpu/test_varlen.cpp
// and tests/gpu/test_varlen_backward.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// cu_seqlens from per-sequence lengths: batch + 1 entries, starting at 0.
inline std::vector<int32_t> prefix_sums(const std::vector<int>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t b = 0; b < lens.size(); ++b) cu[b + 1] = cu[b] + lens[b];
  return cu;
}

// A contiguous int32 vector of n entries at `data` (host or device memory): cu_seqlens, seqused.
inline TensorRef index_tensor(void* data, int64_t n) {
  TensorRef t;
  t.data = data;
  t.dtype = DType::kInt32;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}
inline TensorRef index_tensor(std::vector<int32_t>& v) { return index_tensor(v.data(), static_cast<int64_t>(v.size())); }

// varlen's lse: (heads, total) fp32, contiguous.
inline TensorRef lse_tensor(void* data, int64_t heads, int64_t total) {
  TensorRef t;
  t.data = data;
  t.dtype = DType::kFP32;
  t.ndim = 2;
  t.sizes[0] = heads;
  t.sizes[1] = total;
  t.strides[0] = total;
  t.strides[1] = 1;
  return t;
}

// A packed (total, heads, d) view whose token rows are `token_stride` elements apart (heads and
// head_dim contiguous within a row).
inline TensorRef packed(void* data, DType t, int64_t total, int64_t heads, int64_t d, int64_t token_stride) {
  TensorRef r = make_tensor(data, t, total, heads, d);
  r.strides[0] = token_stride;
  return r;
}

}  // namespace hopattn::test
