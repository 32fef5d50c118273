// Device checks shared by the API entry points.
#pragma once

#include <cuda_runtime_api.h>

#include "hopattn/hopattn.hpp"

namespace hopattn {
Result cuda_error(const char* what, cudaError_t e);
Result check_cuda_device();    // any CUDA device present
Result check_hopper_device();  // the current device is sm_90
// SMs of the current device for the split heuristics (decode's split count, the forward's tail
// split): 132, an H100/H200 SXM's, when none is found, which only matters for a workspace size
// asked without a device.
int split_planning_sm_count();
}  // namespace hopattn
