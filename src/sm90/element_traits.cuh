// Maps the API's DType to the device element type, its m16n8k16 tensor-core instruction and the
// fp32 -> 16-bit packing used for P (softmax probabilities) and the output.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include <cute/arch/mma_sm80.hpp>

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

template <DType kDType>
struct ElementTraits;

template <>
struct ElementTraits<DType::kBF16> {
  using Element = __nv_bfloat16;
  using Mma = cute::SM80_16x8x16_F32BF16BF16F32_TN;  // mma.sync m16n8k16, fp32 accumulate
  // Two fp32 -> one register of two bf16, `lo` in the low half (the lower column of a fragment).
  __device__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};

template <>
struct ElementTraits<DType::kFP16> {
  using Element = __half;
  using Mma = cute::SM80_16x8x16_F32F16F16F32_TN;
  __device__ static uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};

}  // namespace hopattn::sm90
