// Programmatic dependent launch (PDL, sm_90). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled before the kernel ahead of
// it on the stream has finished: once every block of that primary grid has called
// launch_dependents() (or exited). The dependent must then call wait_for_primary_grid() before it
// touches anything the primary writes: that wait returns once the primary grid has completed and
// its writes are visible. Without the attribute both instructions are no-ops.
//
// Inline PTX on purpose: cutlass::arch::wait_on_dependent_grids() compiles to nothing unless
// CUTLASS_ENABLE_GDC_FOR_SM90 is defined, and a silent no-op wait behind a programmatic launch is
// a race, not a slowdown.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace hopattn::sm90 {

__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_for_primary_grid() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// kernel<<<grid, block, smem, stream>>>(args...), programmatic when `programmatic` (the kernel
// must then wait_for_primary_grid() before reading what the previous kernel writes). Stream
// capture keeps the programmatic edge in the graph.
template <class... KernelArgs, class... Args>
cudaError_t launch_maybe_programmatic(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, bool programmatic, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace hopattn::sm90
