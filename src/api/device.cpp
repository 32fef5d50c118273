// Device capability check, cached per device: the sm90 kernels run only on compute capability 9.0
// (wgmma/setmaxnreg are sm_90a-only), so anything else gets a clear error instead of a bad launch.
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "api/device.hpp"
#include "sm90/launch_util.hpp"

namespace hopattn {

Result cuda_error(const char* what, cudaError_t e) {
  return Result{Status::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)};
}

Result check_cuda_device() {
  int dev = -1;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    cudaGetLastError();
    return Result{Status::kUnsupportedDevice, std::string("no usable CUDA device: ") + cudaGetErrorString(e)};
  }
  if (e != cudaSuccess) return cuda_error("cudaGetDevice", e);
  return {};
}

Result check_hopper_device() {
  if (Result r = check_cuda_device(); !r.ok()) return r;
  int dev = 0;
  cudaGetDevice(&dev);
  constexpr int kMaxDevices = 64;
  static int cached_cc[kMaxDevices] = {};  // major*10+minor; 0 = not read yet
  static std::mutex mu;
  int cc = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (dev < kMaxDevices && cached_cc[dev] != 0) cc = cached_cc[dev];
  }
  if (cc == 0) {
    int major = 0, minor = 0;
    cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) return cuda_error("cudaDeviceGetAttribute", e);
    cc = major * 10 + minor;
    std::lock_guard<std::mutex> lock(mu);
    if (dev < kMaxDevices) cached_cc[dev] = cc;
  }
  if (cc != 90)
    return Result{Status::kUnsupportedDevice,
                  "device " + std::to_string(dev) + " has compute capability " + std::to_string(cc / 10) + "." +
                      std::to_string(cc % 10) + "; hopattn's kernels need a Hopper GPU (sm_90)"};
  return {};
}

int split_planning_sm_count() {
  int sms = 0;
  if (sm90::current_device_sm_count(&sms) != cudaSuccess || sms <= 0) {
    cudaGetLastError();
    return 132;
  }
  return sms;
}

}  // namespace hopattn
