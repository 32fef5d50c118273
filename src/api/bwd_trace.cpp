#include "sm90/bwd/trace.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "api/tuning_override.hpp"

namespace hopattn::sm90::bwd {

BwdTrace bwd_trace() {
  static std::once_flag once;
  static BwdTrace trace;
  std::call_once(once, [] {
    if (heuristics::env_override("HOPATTN_BWD_TRACE") != 1) return;
    void* p = nullptr;
    const std::size_t bytes = kBwdTraceCapacity * sizeof(BwdTraceRecord) + 256;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return;  // tracing off, the call itself unaffected
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {  // a count that starts as garbage would misplace records
      cudaFree(p);
      cudaGetLastError();
      return;
    }
    trace.count = static_cast<unsigned*>(p);
    trace.records = reinterpret_cast<BwdTraceRecord*>(static_cast<char*>(p) + 256);
  });
  return trace;
}

}  // namespace hopattn::sm90::bwd

// Not in the public header: bench/bwd_trace.py finds it with ctypes. Synchronises the device,
// copies up to `max` records (BwdTraceRecord, 32 bytes each) to `host`, clears the buffer and
// returns how many CTAs recorded since the last call (more than copied when over the capacity);
// -1 when not tracing or on a CUDA error.
extern "C" int hopattn_debug_bwd_trace(void* host, int max) {
  using namespace hopattn::sm90::bwd;
  const BwdTrace t = bwd_trace();
  if (t.records == nullptr || cudaDeviceSynchronize() != cudaSuccess) return -1;
  unsigned n = 0;
  if (cudaMemcpy(&n, t.count, sizeof(n), cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  const unsigned copy = std::min<unsigned>({n, kBwdTraceCapacity, unsigned(std::max(max, 0))});
  if (copy > 0 && cudaMemcpy(host, t.records, copy * sizeof(BwdTraceRecord), cudaMemcpyDeviceToHost) != cudaSuccess)
    return -1;
  if (cudaMemset(t.count, 0, sizeof(unsigned)) != cudaSuccess) return -1;
  return int(n);
}
