// The references every test trusts: a CPU one (double accumulation) and a CUDA one (fp64
// accumulation, one block per query row). Both take a validated AttnProblem; any shape.
#pragma once

#include <cuda_runtime_api.h>

#include "api/problem.hpp"

namespace hopattn::reference {

// Host memory. Handles bf16/fp16/fp32, GQA, bottom-right causal, rows with no visible key
// (out = 0, lse = -inf), seqlen_k == 0.
void forward_cpu(const AttnProblem& p);

// Host memory, the index arrays too. Each sequence runs through forward_cpu's per-head code on its
// (seqused-limited) rows, causal bottom-right aligned per sequence; rows of a sequence beyond
// seqused_q get out = 0 and lse = -inf; rows past cu_seqlens_q[batch] are not touched.
void forward_varlen_cpu(const VarlenProblem& p);

// Device memory, bf16/fp16, head_dim <= kMaxReferenceHeadDim. Asynchronous on `stream`.
cudaError_t forward_cuda(const AttnProblem& p, cudaStream_t stream);

// Host memory. Gradients of sum(dout * out) in double, per row: P = softmax(S), D = rowsum(dout * out),
// dV += P^T dout, dP = dout V^T, dS = P * (dP - D), dQ = scale dS K, dK += scale dS^T Q; dK and dV sum
// over the query heads of a GQA group. Rows that see no key contribute nothing (dq = 0).
void backward_cpu(const AttnBackwardProblem& p);

// Device memory: out = 0 and lse = -inf for every row (the seqlen_k == 0 case of any backend).
cudaError_t fill_no_keys(const AttnProblem& p, cudaStream_t stream);

// Device memory: zeros into every element of a strided 4-D tensor of `dtype` (any non-negative
// strides, 64-bit offsets); the empty-sequence gradients of backward. Asynchronous on `stream`.
cudaError_t zero_fill(void* data, DType dtype, const int64_t sizes[4], const int64_t strides[4], cudaStream_t stream);

}  // namespace hopattn::reference
