// Host helpers shared by the sm90 launchers: per-device caches for the two driver queries a launch
// needs (the >48 KB shared-memory opt-in, the SM count), so the hot path pays for them once.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace hopattn::sm90 {

// Opts kKernel into `bytes` of dynamic shared memory, once per device (bit d of a mask that is
// per kernel: the template is keyed on the kernel's address, not its type, which kernels share).
// A redundant set is harmless, so two threads racing here only cost a repeated call.
template <auto kKernel>
cudaError_t set_max_dynamic_smem_once(int bytes) {
  static std::atomic<uint64_t> done_mask{0};
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (done_mask.load(std::memory_order_relaxed) & bit)) return cudaSuccess;
  if (cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes); e != cudaSuccess)
    return e;
  done_mask.fetch_or(bit, std::memory_order_relaxed);
  return cudaSuccess;
}

// Multiprocessor count of the current device, read once per device.
inline cudaError_t current_device_sm_count(int* num_sms) {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < 64 && (*num_sms = cached[device].load(std::memory_order_relaxed)) > 0) return cudaSuccess;
  if (cudaError_t e = cudaDeviceGetAttribute(num_sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess)
    return e;
  if (device < 64) cached[device].store(*num_sms, std::memory_order_relaxed);
  return cudaSuccess;
}

// A launch of `grid` CTAs of `block` threads with `smem` bytes of dynamic shared memory, in clusters
// of cluster_x CTAs along x. `attr` is the caller's and must live until the launch: the config
// points at it.
inline cudaLaunchConfig_t cluster_launch_config(unsigned grid, unsigned block, size_t smem, unsigned cluster_x,
                                                cudaStream_t stream, cudaLaunchAttribute* attr) {
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster_x;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid, 1, 1);
  cfg.blockDim = dim3(block, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Clusters of cluster_size CTAs of kKernel (block_threads threads, smem_bytes of dynamic shared
// memory, already opted into) that can be resident at once on the current device: the grid of a
// persistent clustered launch. Read once per device (the answer depends only on those arguments,
// which are fixed per kernel).
template <auto kKernel>
cudaError_t max_active_clusters_once(int cluster_size, int block_threads, int smem_bytes, int* clusters) {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < 64 && (*clusters = cached[device].load(std::memory_order_relaxed)) > 0) return cudaSuccess;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_launch_config(unsigned(cluster_size), unsigned(block_threads),
                                                       size_t(smem_bytes), unsigned(cluster_size), nullptr, &attr);
  if (cudaError_t e = cudaOccupancyMaxActiveClusters(clusters, kKernel, &cfg); e != cudaSuccess) return e;
  if (*clusters <= 0) return cudaErrorInvalidConfiguration;  // not even one cluster fits
  if (device < 64) cached[device].store(*clusters, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace hopattn::sm90
