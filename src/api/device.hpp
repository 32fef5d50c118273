// Device checks shared by the API entry points.
#pragma once

#include <cuda_runtime_api.h>

#include "hopattn/hopattn.hpp"

namespace hopattn {
Result cuda_error(const char* what, cudaError_t e);
Result check_cuda_device();    // any CUDA device present
Result check_hopper_device();  // the current device is sm_90
}  // namespace hopattn
