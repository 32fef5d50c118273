// The fixed-length forward arguments the validation tests start from: valid for every backend of
// this build, on a fake address (validation never dereferences it).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "../common/test_util.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// The first kernel this build has ("fwd:bf16:128" -> bf16, 128), so a valid base is valid here.
struct BuiltKernel {
  DType dtype;
  int64_t head_dim;
};
inline BuiltKernel first_built_kernel() {
  const std::string list = build_instantiations();
  const std::string first = list.substr(0, list.find(','));
  const size_t a = first.find(':'), b = first.rfind(':');
  return {first.substr(a + 1, b - a - 1) == "fp16" ? DType::kFP16 : DType::kBF16, std::atoll(first.c_str() + b + 1)};
}

// batch 2, seqlen_q 64, seqlen_k 48, heads 4/2 (GQA), contiguous, with lse: accepted by every backend.
inline ForwardArgs valid_forward_args(void* fake) {
  const BuiltKernel k = first_built_kernel();
  ForwardArgs a;
  a.q = make_tensor(fake, k.dtype, 2, 64, 4, k.head_dim);
  a.k = make_tensor(fake, k.dtype, 2, 48, 2, k.head_dim);
  a.v = make_tensor(fake, k.dtype, 2, 48, 2, k.head_dim);
  a.out = make_tensor(fake, k.dtype, 2, 64, 4, k.head_dim);
  a.lse = make_tensor(fake, DType::kFP32, 2, 4, 64);
  return a;
}

}  // namespace hopattn::test
