// Per-CTA timestamps of the backward's main kernel and postprocess, for HOPATTN_BWD_TRACE=1 runs
// (bench/bwd_trace.py): when each CTA started and ended (%globaltimer, ns) and on which SM. A
// diagnostic for where a call's time goes between waves (the last, partial wave; what the
// postprocess does during it), not a timer: the atomic per CTA costs a few hundred ns.
#pragma once

#include <cstdint>

namespace hopattn::sm90::bwd {

struct BwdTraceRecord {
  uint32_t kernel;  // 0: main kernel, 1: postprocess, 2: a forward tile (sm90/ws/trace.cuh)
  uint32_t block;   // blockIdx.x
  uint32_t smid;
  uint32_t detail;  // the kernel's own figure: a forward tile's key blocks; 0 in the backward
  uint64_t start, end;
};
inline constexpr uint32_t kBwdTraceCapacity = 1u << 17;

struct BwdTrace {
  BwdTraceRecord* records = nullptr;  // null: not tracing
  unsigned* count = nullptr;
};
// Host: the device buffer while HOPATTN_BWD_TRACE=1 (allocated once), else nulls.
BwdTrace bwd_trace();

#if defined(__CUDACC__)
__device__ __forceinline__ uint64_t trace_clock() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// One thread of a CTA (or of a forward tile), at its end: its record.
__device__ __forceinline__ void trace_cta(const BwdTrace& t, uint32_t kernel, uint64_t start, uint32_t detail = 0u) {
  if (t.records == nullptr) return;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const unsigned i = atomicAdd(t.count, 1u);
  if (i < kBwdTraceCapacity) t.records[i] = BwdTraceRecord{kernel, blockIdx.x, sm, detail, start, trace_clock()};
}
#endif

}  // namespace hopattn::sm90::bwd
