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

template <typename Element, int kHeadDim, int kRowTiles, bool kSoftcap = false, int kStages = 0>
cudaError_t launch_split(const DecodeParams& params, int64_t blocks, cudaStream_t stream) {
  constexpr auto kernel = &split_kernel<Element, kHeadDim, kRowTiles, kSoftcap, kStages>;
  constexpr int smem = TileConfig<kHeadDim, kRowTiles, kStages>::kSmemBytes;
  if (cudaError_t e = set_max_dynamic_smem_once<kernel>(smem); e != cudaSuccess) return e;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(params);
  return cudaGetLastError();
}

// The combine kernel, behind the split kernel on the same stream. `programmatic`: launched with
// programmatic stream serialisation, so it is scheduled once every split block has passed
// launch_dependents() and its launch overlaps the split kernel's last merge and stores (it waits
// for the split grid's end and memory flush at its top). Stream capture keeps this as a
// programmatic graph edge.
template <typename Element, int kHeadDim>
cudaError_t launch_combine(const DecodeParams& params, cudaStream_t stream, bool programmatic = true) {
  const int64_t rows = params.p.batch * params.p.heads_q * params.p.seqlen_q;
  return launch_maybe_programmatic(combine_kernel<Element, kHeadDim>, dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps)),
                                    dim3(kThreads), 0, stream, programmatic, params);
}

// The split kernel for the block's row tiles (params.rows_per_block), capped or not.
template <typename Element, int kHeadDim, bool kSoftcap>
cudaError_t launch_split_rows(const DecodeParams& params, int64_t blocks, cudaStream_t stream) {
  if constexpr (max_row_tiles(kHeadDim) >= 2) {
    if (params.rows_per_block > 16) return launch_split<Element, kHeadDim, 2, kSoftcap>(params, blocks, stream);
  }
  return launch_split<Element, kHeadDim, 1, kSoftcap>(params, blocks, stream);
}

template <DType kDType, int kHeadDim>
cudaError_t run_decode(const DecodeParams& params, int64_t blocks, cudaStream_t stream) {
  using Element = typename ElementOf<kDType>::type;
  const cudaError_t e = params.p.softcap > 0.f ? launch_split_rows<Element, kHeadDim, true>(params, blocks, stream)
                                               : launch_split_rows<Element, kHeadDim, false>(params, blocks, stream);
  if (e != cudaSuccess || params.num_splits <= 1) return e;
  return launch_combine<Element, kHeadDim>(params, stream);
}

}  // namespace hopattn::sm90::decode
