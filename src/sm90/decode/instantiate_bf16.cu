// The bf16 decode kernels for head dims 64, 128 and 256 (split kernel with its row-tile variants, and
// combine): one translation unit per dtype keeps the family's compile time to two parallel jobs.
#include "sm90/decode/launch.cuh"

namespace hopattn::sm90::decode {
template cudaError_t run_decode<DType::kBF16, 64>(const DecodeParams&, int64_t, cudaStream_t);
template cudaError_t run_decode<DType::kBF16, 128>(const DecodeParams&, int64_t, cudaStream_t);
template cudaError_t run_decode<DType::kBF16, 256>(const DecodeParams&, int64_t, cudaStream_t);
}  // namespace hopattn::sm90::decode
