// Shared by hopattn-bench and hopattn-demo: checked CUDA calls, device buffers, and a device-side
// random fill (a hash of the index, so multi-GB inputs are filled in microseconds, never zeros).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "hopattn/hopattn.hpp"

#define TOOL_CUDA_CHECK(call)                                                                   \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                 \
                   cudaGetErrorString(err_));                                                   \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

namespace tools {

struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : bytes(n) { TOOL_CUDA_CHECK(cudaMalloc(&ptr, n ? n : 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

__device__ inline float hash_normalish(uint64_t i, uint64_t seed) {
  // splitmix64, then the sum of two uniforms minus 1: a cheap, zero-mean, non-degenerate value.
  uint64_t z = i + seed * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float a = (z & 0xFFFFFF) * (1.f / 16777216.f), b = ((z >> 24) & 0xFFFFFF) * (1.f / 16777216.f);
  return (a + b - 1.f) * 1.7f;
}

template <typename T>
__global__ void fill_random_kernel(T* x, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    x[i] = T(hash_normalish(i, seed));
}

inline void fill_random(void* p, hopattn::DType dt, uint64_t n, uint64_t seed) {
  const int grid = 132 * 8, block = 256;
  if (dt == hopattn::DType::kBF16)
    fill_random_kernel<<<grid, block>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  else
    fill_random_kernel<<<grid, block>>>(static_cast<__half*>(p), n, seed);
  TOOL_CUDA_CHECK(cudaGetLastError());
}

inline double attention_flops(int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d, bool causal) {
  // 2 GEMMs of 2*sq*sk*d each; causal keeps (about) half of the score matrix when sq == sk.
  double f = 4.0 * b * h * double(sq) * double(sk) * d;
  return causal ? f / 2 : f;
}

}  // namespace tools
