// The backward pass's device scratch, laid out in one caller-provided buffer. Plain C++ so that the
// host API sizes it without CUDA headers. Every per-row array is padded to whole query blocks, so
// the kernels read and write whole tiles without bounds checks (the pad rows hold neutral values).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>

#include "api/problem.hpp"
#include "sm90/bwd/launch_order.hpp"  // HOPATTN_BWD_HD

namespace hopattn::sm90::bwd {

// Query rows per step of the main kernel's loop are 64, 80 or 128 (BwdConfig::kBlockM, chosen by
// bwd_query_step). Packed batches pad every sequence's per-row arrays to kRowPadding, a multiple of
// 64 and 128; fixed-length ones pad seqlen_q to row_padding(step), a multiple of the step too. There
// is one semaphore per kQueryBlock (the smallest multiple of 16 that every step's tile index maps
// onto uniquely) rows, enough for any step.
inline constexpr int64_t kQueryBlock = 64;
inline constexpr int64_t kRowPadding = 128;

// How the fp32 dQ accumulator starts. With the key split (head_dim 64, 128) the preprocess leaves
// it as it is, and the first key block to reach a query tile stores its partial there (a bulk copy)
// instead of adding it; the tile's counter, zeroed by the preprocess, records the arrivals
// (BwdKernel::dq_semaphore). That saves the preprocess writing the whole accumulator (as many bytes
// as it reads from O and dO). The head_dim split (d256) adds its two halves from consumer threads,
// where a follower's spin would stall a whole warpgroup (-16 to -19% measured with a ticket per
// half, perf-notes backward v16), so its accumulator is still zeroed.
inline constexpr bool dq_first_store(int64_t head_dim) { return head_dim != 256; }
// Whether the dQ postprocess overlaps the main kernel's last wave (head_dim 256): launched
// programmatically, its CTAs start on the SMs that the last, partial wave of the main grid leaves
// idle, and each converts a tile as soon as every main-kernel CTA of that tile's (batch, kv head)
// has counted itself done (dq_done), rather than once the whole grid has. The d256 grid is 2048
// units of equal length at the paper's shapes: 15.5 waves on 132 SMs, the last half-empty for a
// whole unit, while the postprocess (reading the 128 MB accumulator) takes ~48 us after it.
inline constexpr bool dq_overlap(int64_t head_dim) { return head_dim == 256; }
// A tile's counter: bits below kdQStored count the key blocks that reached it (deterministic mode:
// the turn, which counts them too); kdQStored is set once the first one's store has landed.
inline constexpr int kdQStored = 1 << 30;
// The counter of the tile-th block_m-row tile of the per-row arrays: counters are per kQueryBlock
// rows; at 128-row tiles a tile spans two and the first counts.
inline constexpr int64_t dq_semaphore_index(int64_t tile, int block_m) { return tile * (block_m / kQueryBlock); }

// The main kernel's query rows per step for a problem (BwdConfig's kQueryStep):
// - d64: 128 (dK and dV take 2 x 32 fp32 per thread, so 128-query transposed scores fit);
// - d128 without a mask (causal, window or softcap) on fixed-length batches: 80, FlashAttention-3's
//   step there: 25% more work per step than 64 for the same per-step barriers and dQ hand-off. It
//   needs the dQ GEMM transposed (WGMMA's M is 64 per warpgroup; see BwdMainloop::kdQSwapAB) and
//   per-row arrays padded to a multiple of 80, which fixed-length batches can afford and packed ones
//   (one pad per sequence) cannot;
// - otherwise 64.
inline constexpr int bwd_query_step(int64_t head_dim, bool masked, bool packed) {
  return head_dim == 64 ? 128 : (head_dim == 128 && !masked && !packed ? 80 : 64);
}
inline bool bwd_masked(const AttnProblem& p) {
  return p.causal || p.masked() || p.softcap > 0.f;
}
inline int bwd_query_step(const AttnProblem& p) { return bwd_query_step(p.head_dim, bwd_masked(p), p.varlen()); }
// Fixed-length batches: seqlen_q is padded to a multiple of this (whole tiles of `step` rows, and
// of kRowPadding so that the semaphores and the 64/128-row kernels' tiles stay aligned).
inline constexpr int64_t row_padding(int step) { return std::lcm(kRowPadding, int64_t(step)); }

// Where the per-row arrays keep the rows of (batch entry b, query head h): row r of the sequence is
// at base(b, offset_q) + h * head_stride + r. Fixed-length batches: (batch, heads, seqlen_q_padded)
// in order. Packed (varlen) batches: (heads, padded total), sequence b starting at the first
// multiple of kRowPadding at or after offset_q + b * kRowPadding: whole query blocks per sequence,
// never overlapping the next (its start is at least ceil(length / kRowPadding) blocks later), all
// inside padded_total(total_q, batch) rows per head even for unchecked index values (clamped).
struct RowLayout {
  int64_t head_stride = 0;
  int64_t batch_stride = 0;  // fixed-length only
  bool packed = false;
  HOPATTN_HOST_DEVICE int64_t base(int64_t b, int64_t offset_q) const {
    return packed ? (offset_q + b * kRowPadding) / kRowPadding * kRowPadding : b * batch_stride;
  }
  static int64_t padded_total(int64_t total_q, int64_t batch) {
    return (total_q + (batch + 1) * kRowPadding) / kRowPadding * kRowPadding;
  }
};

// The head_dim split's tail (d256 without a mask, fixed-length, not deterministic). Its units (key
// blocks) are all the same length, so the grid runs in waves of one unit per SM, and the last,
// partial wave (units mod SMs of them) leaves the other SMs idle for a whole unit: 3% of a call at
// 2048 units on 132 SMs. Split the last `units` units into `parts` pieces each, pieces of a unit
// walking disjoint query blocks and adding their fp32 dK and dV into a workspace slot; the last
// piece to finish writes the unit's dK and dV. Launched after the whole units, the pieces fill the
// tail. The cost model, per piece: its steps plus kTailPieceCost steps (prologue, epilogue, the
// slot's adds): the split pays when the tail's pieces take fewer rounds of that than one unit.
struct TailSplit {
  int units = 0;  // the last `units` units of the launch order are split (0: none)
  int parts = 0;  // into `parts` pieces each
};
inline constexpr int kMaxTailUnits = 160;         // the workspace's slots; at least any Hopper's SM count
inline constexpr int kTailSlotFloats = 64 * 256 * 2;  // a unit's fp32 dK and dV (64 keys x head_dim 256)
// Steps a piece costs beyond its own (d256: ~7.5 us per CTA + ~3 us of slot adds, 3.33 us a step).
// Traced in v17 (perf-notes): 7.2 us beyond 13 steps of 3.1 us, i.e. 2.3 steps; the model's 3.2
// only makes it pick fewer or no pieces at the margin, and was left as measured in A/B.
inline constexpr double kTailPieceCost = 3.2;
// The main-kernel CTAs that count themselves done for (batch, kv head) `head_batch` (dq_overlap):
// its key blocks, and for each of its units that is split, parts - 1 more. Split units are the
// launch's last (from tail_first on), and the tail split's launches keep the key blocks of one head
// side by side (unit = head_batch x n_blocks + key block).
HOPATTN_BWD_HD constexpr int dq_done_target(int head_batch, int n_blocks, int tail_first, int tail_parts) {
  const long long lo = (long long)head_batch * n_blocks, hi = lo + n_blocks;
  const long long split = hi <= tail_first ? 0 : hi - (tail_first > lo ? tail_first : lo);
  return n_blocks + int(split) * (tail_parts - 1);
}

// units: the launch's; steps: a unit's steps (query blocks x query heads per kv head); sms: the
// device's. Pure: the host tests check it.
inline TailSplit bwd_tail_split(int64_t units, int64_t steps, int sms) {
  if (sms <= 0 || units <= sms || steps < 16) return {};
  const int tail = int(units % sms);
  if (tail == 0 || tail > kMaxTailUnits) return {};
  const double whole = double(steps) + 2.3;  // the last wave as it is: one unit (its ~7.5 us too)
  TailSplit best{};
  double best_cost = 0.95 * whole;  // only a clear gain: the model is rough
  for (int k = 2; k <= 16 && k <= steps; ++k) {
    const int64_t rounds = (int64_t(tail) * k + sms - 1) / sms;
    const double cost = double(rounds) * (double((steps + k - 1) / k) + kTailPieceCost);
    if (cost < best_cost) {
      best_cost = cost;
      best = {tail, k};
    }
  }
  return best;
}
// The problems the split may apply to (the workspace holds its slots for them).
inline bool bwd_tail_eligible(const AttnProblem& p) {
  return p.head_dim == 256 && !bwd_masked(p) && !p.varlen();
}

struct WorkspaceLayout {
  int64_t seqlen_q_padded = 0;  // seqlen_q rounded up to row_padding(step) (varlen: max_seqlen_q to kRowPadding)
  int query_step = 0;           // the main kernel's kBlockM (bwd_query_step)
  int64_t m_blocks = 0;         // seqlen_q_padded / kQueryBlock
  RowLayout rows;
  // Byte offsets into the workspace (each 256-byte aligned) and the total.
  // Per-row arrays in RowLayout order (the dQ accumulator with head_dim values per row):
  std::size_t lse_log2 = 0;   // float: lse * log2(e); +inf for pad rows and rows with no key
  std::size_t dpsum = 0;      // float: D = rowsum(dout * out); 0 for pad rows
  std::size_t dq_accum = 0;   // float x head_dim: dQ / scale, summed over key blocks
  std::size_t semaphore = 0;  // int per kQueryBlock rows: deterministic mode's turn counters
  std::size_t dq_done = 0;    // int per (batch, kv head): its main-kernel CTAs done (dq_overlap)
  std::size_t tail_acc = 0;    // float x kTailSlotFloats per split unit (bwd_tail_eligible problems)
  std::size_t tail_count = 0;  // int per split unit: its pieces finished
  std::size_t total = 0;
};

inline std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

inline WorkspaceLayout workspace_layout(const AttnProblem& p) {
  WorkspaceLayout w;
  w.query_step = bwd_query_step(p);
  const int64_t pad = p.varlen() ? kRowPadding : row_padding(w.query_step);
  w.seqlen_q_padded = (p.seqlen_q + pad - 1) / pad * pad;
  w.m_blocks = w.seqlen_q_padded / kQueryBlock;
  if (p.varlen()) {
    w.rows = {RowLayout::padded_total(p.total_q, p.batch), 0, true};
  } else {
    w.rows = {w.seqlen_q_padded, p.heads_q * w.seqlen_q_padded, false};
  }
  const std::size_t rows = p.varlen() ? std::size_t(p.heads_q) * std::size_t(w.rows.head_stride)
                                      : std::size_t(p.batch) * std::size_t(p.heads_q) * std::size_t(w.seqlen_q_padded);
  std::size_t off = 0;
  w.lse_log2 = off;
  off = align256(off + rows * sizeof(float));
  w.dpsum = off;
  off = align256(off + rows * sizeof(float));
  w.dq_accum = off;
  off = align256(off + rows * std::size_t(p.head_dim) * sizeof(float));
  w.semaphore = off;
  off = align256(off + rows / kQueryBlock * sizeof(int));
  w.dq_done = off;
  off = align256(off + std::size_t(p.batch) * std::size_t(p.heads_kv) * sizeof(int));
  // Slots for the most units a split can take: fewer than the SMs, and fewer than the units.
  const int64_t n_blocks = (p.seqlen_k + 63) / 64;
  const std::size_t slots = bwd_tail_eligible(p) ? std::size_t(std::min<int64_t>(kMaxTailUnits, n_blocks * p.heads_kv * p.batch)) : 0;
  w.tail_acc = off;
  off = align256(off + slots * kTailSlotFloats * sizeof(float));
  w.tail_count = off;
  off = align256(off + slots * sizeof(int));
  w.total = off;
  return w;
}

inline std::size_t workspace_bytes(const AttnProblem& p) { return p.empty() ? 0 : workspace_layout(p).total; }

}  // namespace hopattn::sm90::bwd
