// The backward pass's device scratch, laid out in one caller-provided buffer. Plain C++ so that the
// host API sizes it without CUDA headers. Every per-row array is padded to whole query blocks, so
// the kernels read and write whole tiles without bounds checks (the pad rows hold neutral values).
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"

namespace hopattn::sm90::bwd {

// Query rows per step of the main kernel's loop are 64 or 128 (BwdConfig::kBlockM); every per-row
// array is padded to kRowPadding, a multiple of both, and there is one semaphore per kQueryBlock
// (the smaller) rows, enough for either.
inline constexpr int64_t kQueryBlock = 64;
inline constexpr int64_t kRowPadding = 128;

struct WorkspaceLayout {
  int64_t seqlen_q_padded = 0;  // seqlen_q rounded up to kRowPadding
  int64_t m_blocks = 0;         // seqlen_q_padded / kQueryBlock
  // Byte offsets into the workspace (each 256-byte aligned) and the total.
  std::size_t lse_log2 = 0;   // float (batch, heads_q, seqlen_q_padded): lse * log2(e); +inf for pad rows and rows with no key
  std::size_t dpsum = 0;      // float (batch, heads_q, seqlen_q_padded): D = rowsum(dout * out); 0 for pad rows
  std::size_t dq_accum = 0;   // float (batch, heads_q, seqlen_q_padded, head_dim): dQ / scale, summed over key blocks
  std::size_t semaphore = 0;  // int (batch, heads_q, m_blocks): deterministic mode's turn counters
  std::size_t total = 0;
};

inline std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

inline WorkspaceLayout workspace_layout(const AttnProblem& p) {
  WorkspaceLayout w;
  w.seqlen_q_padded = (p.seqlen_q + kRowPadding - 1) / kRowPadding * kRowPadding;
  w.m_blocks = w.seqlen_q_padded / kQueryBlock;
  const std::size_t rows = std::size_t(p.batch) * std::size_t(p.heads_q) * std::size_t(w.seqlen_q_padded);
  std::size_t off = 0;
  w.lse_log2 = off;
  off = align256(off + rows * sizeof(float));
  w.dpsum = off;
  off = align256(off + rows * sizeof(float));
  w.dq_accum = off;
  off = align256(off + rows * std::size_t(p.head_dim) * sizeof(float));
  w.semaphore = off;
  off = align256(off + std::size_t(p.batch) * std::size_t(p.heads_q) * std::size_t(w.m_blocks) * sizeof(int));
  w.total = off;
  return w;
}

inline std::size_t workspace_bytes(const AttnProblem& p) { return p.empty() ? 0 : workspace_layout(p).total; }

}  // namespace hopattn::sm90::bwd
