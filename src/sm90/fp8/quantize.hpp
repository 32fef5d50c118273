// The FP8 pre-passes: rotate-and-quantise rows (Q, K, or any (batch, seqlen, heads, head_dim)
// tensor) and the V^T re-layout the FP8 attention kernel reads (layout.hpp). Memory-bound kernels:
// each reads its input once (twice when scales are per head: the maximum must be known first).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90::fp8 {

// in: (batch, seqlen, heads, head_dim) bf16/fp16, element strides of (batch, seq, head), head_dim
// contiguous. out: e4m3, same shape, its own strides, head_dim contiguous. descale: fp32
// contiguous (batch, heads, nblocks), nblocks = ceil(seqlen / kQuantBlock) when block_quant else 1.
// With rotate, every row x (head_dim values) becomes x @ M, M = diag(signs(seed)) * H / sqrt(d)
// (H the Sylvester Hadamard matrix, signs as hopattn.fp8_reference.rotation_signs). Then for each
// block (or head): amax = max |value|; descale = amax / 448 (1 when amax == 0);
// out = e4m3_rn_satfinite(value * (448 / amax)).
struct QuantizeRowsProblem {
  const void* in = nullptr;
  DType in_dtype = DType::kBF16;
  int64_t in_stride[3] = {0, 0, 0};
  void* out = nullptr;
  int64_t out_stride[3] = {0, 0, 0};
  float* descale = nullptr;
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  bool rotate = true;
  bool block_quant = true;
  uint32_t seed = 0;
  // Packed (varlen) rows: sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1) of in and out
  // (device int32, batch + 1 entries; in_stride[0] and out_stride[0] unused), batch = sequences,
  // seqlen = max_seqlen (descale blocks per sequence: a sequence's rows past it are not written),
  // total_rows = the packed tensors' rows, to which index values are clamped.
  const int32_t* cu_seqlens = nullptr;
  int64_t total_rows = 0;
  // Rows per descale block with block_quant: 0 or kQuantBlock, or kWideKeyBlock (K of the d128
  // one-call path: head_dim 128, fixed length; nblocks = ceil(seqlen / 224)). Ignored per head.
  int block_rows = 0;
};
cudaError_t quantize_rows(const QuantizeRowsProblem& p, cudaStream_t stream);

// V (batch, seqlen_k, heads_kv, head_dim), strided as above -> vt (batch, heads_kv, head_dim,
// vt_padded_seqlen(seqlen_k)) e4m3 contiguous, keys permuted within groups of 16 by
// vt_key_position, zeros in the padding.
//  - in_dtype bf16/fp16: quantised with one scale per (batch, head): descale (batch, heads)
//    contiguous is written (amax / 448, or 1 when amax == 0).
//  - in_dtype kE4M3: the bytes are moved unchanged; descale is not touched (may be null).
struct VtProblem {
  const void* in = nullptr;
  DType in_dtype = DType::kBF16;
  int64_t in_stride[3] = {0, 0, 0};
  void* vt = nullptr;
  float* descale = nullptr;
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  // Packed (varlen) V, as QuantizeRowsProblem's: vt is then (heads_kv, head_dim,
  // vt_varlen_columns(total_rows, batch)) with sequence b at column vt_varlen_start(cu_seqlens[b], b),
  // its keys up to its length rounded to 128 written (zeros past its last key), the rest untouched.
  const int32_t* cu_seqlens = nullptr;
  int64_t total_rows = 0;
  // Optional: an int that make_vt sets to 0 on the stream (the attention kernel's tile counter),
  // written by its kernel's first thread rather than by a memset of its own.
  int* zero_word = nullptr;
};
cudaError_t make_vt(const VtProblem& p, cudaStream_t stream);

}  // namespace hopattn::sm90::fp8
