// The GPU entry points' optional checks of index values (cu_seqlens, seqused, cache_seqlens, page
// tables): off by default because they cost a device-to-host copy and a sync per call.
#pragma once

#include <cuda_runtime_api.h>

#include "api/problem.hpp"

namespace hopattn::detail {

// Whether a call checks its index values on the host: its own flag, or HOPATTN_DEBUG_CHECKS=1 in the
// environment (read once per process).
bool check_index_values_requested(bool flag);

// Varlen: copies cu_seqlens/seqused to the host (in stream order, then waits) and checks their
// values as the CPU reference does.
Result check_index_values_on_device(const VarlenProblem& p, cudaStream_t stream);

}  // namespace hopattn::detail
