// Shared test helpers (header-only): host bf16/fp16 <-> float conversion with round-to-nearest-even,
// seeded random data (mt19937, and splitmix64 for bulk 16-bit data), relative-error norms, GPU
// presence checks and an RAII device buffer.
// Host-only C++ so both the CPU and GPU test binaries can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

// ---- scalar conversions --------------------------------------------------------------------------

inline uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
inline float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// bf16 is the top half of an fp32, so RNE is "add half an ulp (plus the tie bit) and truncate".
inline uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / inf
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (half-way past 65504) rounds to inf
  if (ax < 0x38800000u) {                         // below 2^-14: fp16 subnormal, unit 2^-24
    // Scaling by 2^24 is exact in fp32; nearbyint rounds half-to-even in the default mode.
    // A result of 1024 encodes the smallest normal (0x0400), which is the correct carry.
    const float m = std::nearbyint(bits_float(ax) * 16777216.0f);
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t h = (((ax >> 23) - 127u + 15u) << 10) | ((ax & 0x7fffffu) >> 13);
  const uint32_t rest = ax & 0x1fffu;  // the 13 mantissa bits fp16 drops
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;  // a carry into the exponent is right
  return sign | static_cast<uint16_t>(h);
}
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15u + 127u) << 23) | (mant << 13));
}

// The value `f` takes once stored in `t`.
inline float round_to(DType t, float f) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(float_to_bf16(f));
    case DType::kFP16: return fp16_to_float(float_to_fp16(f));
    case DType::kFP32: return f;
  }
  return f;
}

// Unit in the last place of `x` once stored in `t` (subnormals share the smallest normal's ulp).
inline double dtype_ulp(DType t, double x) {
  const int precision = t == DType::kBF16 ? 8 : t == DType::kFP16 ? 11 : 24;  // significand bits
  const int min_exp = t == DType::kFP16 ? -14 : -126;
  const int e = x == 0 ? min_exp : std::max(std::ilogb(x), min_exp);
  return std::ldexp(1.0, e - (precision - 1));
}

// ---- host arrays in any dtype --------------------------------------------------------------------

// Raw storage of `values` in dtype `t` (2 or 4 bytes per element).
inline std::vector<uint8_t> encode(const std::vector<float>& values, DType t) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(t));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::kFP32) {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    } else {
      const uint16_t h = t == DType::kBF16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

inline std::vector<float> decode(const void* data, size_t n, DType t) {
  std::vector<float> out(n);
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::kFP32) {
      std::memcpy(&out[i], bytes + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes + i * 2, 2);
      out[i] = t == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return out;
}

// Uniform values in [lo, hi), already rounded to `t` so host and device see identical inputs.
inline std::vector<float> random_values(size_t n, uint64_t seed, DType t = DType::kFP32, float lo = -1.f,
                                        float hi = 1.f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(t, dist(gen));
  return v;
}

// splitmix64: fast enough for the hundreds of millions of elements the GPU suites generate (too
// many for mt19937 + uniform_real_distribution in a test that should take seconds).
struct FastRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// n 16-bit elements uniform in [lo, hi), stored in dtype t (bf16 or fp16; never all zeros): two
// elements from each 64-bit draw.
inline std::vector<uint16_t> random_elements(size_t n, uint64_t seed, DType t, float lo, float hi) {
  std::vector<uint16_t> out(n);
  FastRng rng{seed};
  for (size_t i = 0; i < n; i += 2) {
    const uint64_t bits = rng.next();
    for (size_t j = 0; j < 2 && i + j < n; ++j) {
      const float u = static_cast<float>((bits >> (32 * j + 8)) & 0xFFFFFFu) * (1.f / 16777216.f);
      const float x = lo + (hi - lo) * u;
      out[i + j] = t == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
    }
  }
  return out;
}

// 0xFF bytes are NaN in bf16, fp16 and fp32 alike: any element a kernel forgets to write shows.
inline void poison(std::vector<uint8_t>& bytes) { std::fill(bytes.begin(), bytes.end(), uint8_t{0xFF}); }

// ---- error norms ---------------------------------------------------------------------------------

// ||a - b|| / ||b|| in double; `b` is the reference. Returns +inf on a size mismatch or any NaN,
// and the absolute norm ||a - b|| when b is all zeros.
inline double rel_l2_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

inline double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;  // -inf lse must match -inf exactly
      continue;
    }
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// ---- CUDA helpers --------------------------------------------------------------------------------

#define HOPATTN_TEST_CUDA(expr)                                                                      \
  do {                                                                                               \
    const cudaError_t hopattn_test_err_ = (expr);                                                    \
    if (hopattn_test_err_ != cudaSuccess)                                                            \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #expr   \
                               " failed: " + cudaGetErrorString(hopattn_test_err_));                 \
  } while (0)

inline bool has_cuda_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return false;
  }
  return n > 0;
}

// A compute capability 9.0 device is current (the sm_90a kernels run nowhere else).
inline bool has_sm90() {
  if (!has_cuda_device()) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

// Owns one cudaMalloc allocation; copies are synchronous (tests value clarity over overlap).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) HOPATTN_TEST_CUDA(cudaMalloc(&ptr_, bytes));
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t n) {
    if (n > bytes_) throw std::runtime_error("DeviceBuffer::upload: too many bytes");
    if (n > 0) HOPATTN_TEST_CUDA(cudaMemcpy(ptr_, host, n, cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<uint8_t>& host) { upload(host.data(), host.size()); }
  template <typename T>
  void upload(const std::vector<T>& host) { upload(host.data(), host.size() * sizeof(T)); }

  void download(void* host, size_t n) const {
    if (n > bytes_) throw std::runtime_error("DeviceBuffer::download: too many bytes");
    if (n > 0) HOPATTN_TEST_CUDA(cudaMemcpy(host, ptr_, n, cudaMemcpyDeviceToHost));
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> host(bytes_);
    download(host.data(), bytes_);
    return host;
  }
  // Sets every byte (0xFF = NaN poison for every dtype).
  void fill(uint8_t byte) {
    if (bytes_ > 0) HOPATTN_TEST_CUDA(cudaMemset(ptr_, byte, bytes_));
  }

 private:
  void release() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; a failure here is moot
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hopattn::test
