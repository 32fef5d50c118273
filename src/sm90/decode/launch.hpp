// Declaration of the per-(dtype, head dim) decode launcher; the definitions are instantiated in
// instantiate_bf16.cu / instantiate_fp16.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "hopattn/hopattn.hpp"
#include "sm90/decode/params.hpp"

namespace hopattn::sm90::decode {

// Enqueues the split kernel (row tiles from params.rows_per_block) and, with num_splits > 1, the
// combine kernel, for `blocks` blocks of a validated problem with query rows. The workspace
// pointers in params must be set when num_splits > 1. Returns the first launch error.
template <DType kDType, int kHeadDim>
cudaError_t run_decode(const DecodeParams& params, int64_t blocks, cudaStream_t stream);

}  // namespace hopattn::sm90::decode
