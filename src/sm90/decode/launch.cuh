// Definition of run_decode: picks the row-tile instantiation, opts it into its shared memory, and
// launches the split kernel then (with splits) the combine kernel on the same stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "sm90/decode/combine.cuh"
#include "sm90/decode/kernel.cuh"
#include "sm90/decode/launch.hpp"
#include "sm90/launch_util.hpp"

namespace hopattn::sm90::decode {

template <DType kDType>
struct ElementOf;
template <>
struct ElementOf<DType::kBF16> { using type = __nv_bfloat16; };
template <>
struct ElementOf<DType::kFP16> { using type = __half; };

template <typename Element, int kHeadDim, int kRowTiles>
cudaError_t launch_split(const DecodeParams& params, int64_t blocks, cudaStream_t stream) {
  constexpr auto kernel = &split_kernel<Element, kHeadDim, kRowTiles>;
  constexpr int smem = TileConfig<kHeadDim, kRowTiles>::kSmemBytes;
  if (cudaError_t e = set_max_dynamic_smem_once<kernel>(smem); e != cudaSuccess) return e;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(params);
  return cudaGetLastError();
}

template <DType kDType, int kHeadDim>
cudaError_t run_decode(const DecodeParams& params, int64_t blocks, cudaStream_t stream) {
  using Element = typename ElementOf<kDType>::type;
  cudaError_t e = cudaSuccess;
  if constexpr (max_row_tiles(kHeadDim) >= 2) {
    e = params.rows_per_block > 16 ? launch_split<Element, kHeadDim, 2>(params, blocks, stream)
                                   : launch_split<Element, kHeadDim, 1>(params, blocks, stream);
  } else {
    e = launch_split<Element, kHeadDim, 1>(params, blocks, stream);
  }
  if (e != cudaSuccess || params.num_splits <= 1) return e;
  const int64_t rows = params.p.batch * params.p.heads_q * params.p.seqlen_q;
  const auto combine_blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  combine_kernel<Element, kHeadDim><<<combine_blocks, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace hopattn::sm90::decode
