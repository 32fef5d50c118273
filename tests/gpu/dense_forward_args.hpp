// The forward tests' usual arguments: dense [batch, seqlen, heads, head_dim] q/k/v/out and a
// [batch, heads_q, seqlen_q] fp32 lse, over device buffers.
#pragma once

#include <cstdint>

#include "../common/test_util.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn::test {

inline ForwardArgs dense_forward_args(const DeviceBuffer& q, const DeviceBuffer& k, const DeviceBuffer& v,
                                      const DeviceBuffer& out, const DeviceBuffer& lse, DType t, int64_t b,
                                      int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d) {
  ForwardArgs a;
  a.q = make_tensor(q.get(), t, b, sq, hq, d);
  a.k = make_tensor(k.get(), t, b, sk, hkv, d);
  a.v = make_tensor(v.get(), t, b, sk, hkv, d);
  a.out = make_tensor(out.get(), t, b, sq, hq, d);
  a.lse = make_tensor(lse.get(), DType::kFP32, b, hq, sq);
  return a;
}

}  // namespace hopattn::test
