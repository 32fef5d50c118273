// Shared helper of the C ABI tests (header-only, host-only C++): a TensorRef as the C struct.
#pragma once

#include <cstdint>

#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn::test {

inline hopattn_tensor to_c(const TensorRef& t) {
  hopattn_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.ndim = t.ndim;
  for (int i = 0; i < 4; ++i) {
    c.sizes[i] = t.sizes[i];
    c.strides[i] = t.strides[i];
  }
  return c;
}

}  // namespace hopattn::test
