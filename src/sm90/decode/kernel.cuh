// The split-KV decode kernel: one block per (row block, key split, kv head, sequence) computes
// softmax(Q K^T) V of up to kRows query rows (the GQA group's heads x seqlen_q, packed) over its
// share of the cached keys (with a sliding window, of the keys some row's window reaches), each K/V
// byte read once per (sequence, kv head, row block).
//
// Why mma.sync and not CUDA-core FMAs: the kernel is bound by HBM, and per cached key it does
// 2 * rows * head_dim multiply-adds against 4 * head_dim bytes, i.e. rows / 2 FMAs per byte. At
// 4.8 TB/s that is 2.4 * rows TFMA/s: fine on the SM's FP32 pipes (~33 TFMA/s) for rows = 4, but
// not for the 16..64 rows of GQA groups times a few speculative tokens. The m16n8k16 tensor-core
// instruction covers every row count at well under 10% of its throughput, keeps the FP32 pipes for
// the softmax, and needs no register transpose (ldmatrix does it). WGMMA would need 64-row tiles
// (mostly padding here) and a warpgroup-wide pipeline for no gain in a memory-bound loop.
//
// Softcap (Gemma 2) applies to the scores before the mask, as in the attention kernels.
//
// Work split inside the block: each of the 4 warps takes every 4th 16-key chunk of the block's key
// range with its own cp.async pipeline (kStages chunks deep) and its own online-softmax state, so
// the main loop has no block-wide barrier. At the end the warps merge (max, sum, O) in shared
// memory; with one split the block writes out/lse, else its normalised O and log2-domain LSE go to
// the workspace for combine.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/decode/kv_rows.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/ptx.cuh"

namespace hopattn::sm90::decode {

template <typename Element, int kHeadDim, int kRowTiles, bool kSoftcap = false, int kStagesArg = 0>
__global__ void __launch_bounds__(kThreads) split_kernel(const __grid_constant__ DecodeParams params) {
  using Cfg = TileConfig<kHeadDim, kRowTiles, kStagesArg>;
  using Op = Mma<Element>;
  constexpr int kRows = Cfg::kRows;
  constexpr int kRowChunks = Cfg::kRowChunks;
  constexpr int kStages = Cfg::kStages;
  constexpr int kKSteps = kHeadDim / 16;  // k-steps of Q K^T, and pairs of 8-column tiles of P V
  constexpr int kOTiles = kHeadDim / 8;

  extern __shared__ __align__(128) uint8_t smem[];
  const KvCacheProblem& p = params.p;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;

  // Row blocks vary fastest, so the blocks that read the same K/V run together and share it in L2.
  int64_t x = blockIdx.x;
  const int row_block = static_cast<int>(x % params.row_blocks);
  x /= params.row_blocks;
  const int split = static_cast<int>(x % params.num_splits);
  x /= params.num_splits;
  const int h_kv = static_cast<int>(x % p.heads_kv);
  const int b = static_cast<int>(x / p.heads_kv);

  const int sq = static_cast<int>(p.seqlen_q), heads_q = static_cast<int>(p.heads_q);
  const int group = heads_q / static_cast<int>(p.heads_kv);
  const int rows = sq * group;  // row r: query i = r / group of head h_kv * group + r % group
  const int row0 = row_block * kRows;
  const int row_last = min(row0 + kRows, rows) - 1;

  // Keys of the sequence: the cached ones and the appended ones, clamped into the cache.
  const int64_t cached = max(__ldg(p.cache_seqlens + b), 0);
  const int len_k = static_cast<int>(min(cached + p.seqlen_new, p.capacity));
  // The keys [row_key_begin(r), row_key_end(r)) row r sees (query i = r / group): the window as
  // validate_kvcache normalised it (causal is right = 0), params.hpp's window_key_begin/end. With
  // no window the begin is 0 and the end len_k, as before.
  const int64_t left = p.window_left, right = p.window_right;
  const auto row_key_begin = [&](int r) { return window_key_begin(r / group, sq, len_k, left); };
  const auto row_key_end = [&](int r) { return window_key_end(r / group, sq, len_k, right); };
  // The sequence's keys are [key_lo, len_k): row 0's window starts lowest and the last query's
  // always ends at len_k. Splits share that range (a 4k window over a 128k cache splits ~4k keys),
  // and this block's share is cut further to what its first row and its last row can see.
  const int key_lo = row_key_begin(0);
  const int share = keys_per_split(len_k - key_lo, params.num_splits);
  const int split_begin = key_lo + split * share;
  const int key_begin = max(split_begin, row_key_begin(row0));
  const int key_end = min(split_begin + share, row_key_end(row_last));
  const int steps = key_end > key_begin ? (key_end - key_begin + kStepKeys - 1) / kStepKeys : 0;

  uint8_t* q_smem = smem;
  uint8_t* pipe = smem + Cfg::kQBytes;
  const uint32_t q_tile = smem_addr(q_smem);
  const uint32_t warp_pipe = smem_addr(pipe + warp * kStages * Cfg::kWarpStageBytes);
  const auto chunk_key = [&](int step) { return key_begin + step * kStepKeys + warp * kChunkKeys; };
  // One commit group per step, empty when the warp has no chunk there: the wait counts stay uniform.
  // Paged caches: the page of the chunk issued next is loaded one issue ahead (next_page), so the
  // copies never wait on the page table (a dependent L2 round trip per chunk otherwise).
  int next_page = chunk_row_page(p, b, chunk_key(0), key_end, lane);
  const auto issue = [&](int step) {
    const int page = next_page;
    if (step + 1 < steps) next_page = chunk_row_page(p, b, chunk_key(step + 1), key_end, lane);
    if (step < steps && chunk_key(step) < key_end) {
      const uint32_t k_tile = warp_pipe + (step % kStages) * Cfg::kWarpStageBytes;
      load_kv_chunk<Element, kHeadDim>(p, b, h_kv, chunk_key(step), key_end, k_tile, k_tile + Cfg::kTileBytes, lane,
                                       page);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  // Q tile (kRows x head_dim, swizzled), loaded while the first chunks are in flight; rows past
  // `rows` are zeros.
  const Element* q = static_cast<const Element*>(p.q);
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kRowChunks; idx += kThreads) {
    const int r = idx / kRowChunks, c = idx % kRowChunks, rr = row0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (rr < rows) {
      const int i = rr / group, h = h_kv * group + rr % group;
      v = __ldg(reinterpret_cast<const uint4*>(q + b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2] + c * 8));
    }
    *reinterpret_cast<uint4*>(q_smem + swizzle<kRowChunks>(r, c)) = v;
  }
  __syncthreads();

  // This thread's fragment rows: lane / 4 and lane / 4 + 8 of each 16-row tile, each seeing the
  // key_count[mt][half] keys from key_first[mt][half] on (within the block's range; none for padding
  // rows). The mask tests both bounds with one unsigned compare, (unsigned)(key - first) < count:
  // 3 registers fewer than two signed compares at head_dim 128 (250 against 247 before windows).
  int key_first[kRowTiles][2], key_count[kRowTiles][2];
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int rr = row0 + mt * 16 + lane / 4 + 8 * half;
      key_first[mt][half] = rr < rows ? row_key_begin(rr) : 0;
      key_count[mt][half] = rr < rows ? max(min(row_key_end(rr), key_end) - key_first[mt][half], 0) : 0;
    }

  float o[kRowTiles][kOTiles][4];
  float row_max[kRowTiles][2], row_sum[kRowTiles][2];  // log2 domain; row_sum is this lane's share
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  const float scale_log2 = p.scale * kLog2e;
  // kSoftcap (launched when p.softcap > 0): a score x becomes softcap * tanh(scale * x / softcap),
  // in log2 units. A template flag, not a run-time branch: as a select, the compiler evaluated the
  // tanhf of every score in the uncapped kernel too, and a block alone on its SM then fell 10-20%
  // behind (perf-notes, decode v3). Full-precision tanhf, as a few query rows per 16 keys leave
  // the ALUs idle next to the bytes.
  const float cap_inner = kSoftcap ? p.scale / p.softcap : 0.f;
  const float cap_outer = p.softcap * kLog2e;

  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kStages - 2>();  // this lane's copies of chunk `step` have landed
    __syncwarp();                  // ... and every lane's; the stage refilled next was read last step
    issue(step + kStages - 1);
    const int key0 = chunk_key(step);
    if (key0 >= key_end) continue;  // warp-uniform: this warp has no chunk in the last step
    const uint32_t k_tile = warp_pipe + (step % kStages) * Cfg::kWarpStageBytes;
    const uint32_t v_tile = k_tile + Cfg::kTileBytes;

    // S = Q K^T over the chunk's 16 keys: s[mt][n] is the m16n8 tile of keys n*8 .. n*8 + 7.
    float s[kRowTiles][2][4];
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
      for (int n = 0; n < 2; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t kb[4];  // B fragments (k = head dims, n = keys) of both key tiles
      ldmatrix_x4(kb, k_tile + swizzle<kRowChunks>((lane >> 4) * 8 + (lane & 7), ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        uint32_t qa[4];
        ldmatrix_x4(qa, q_tile + swizzle<kRowChunks>(mt * 16 + (lane & 15), ks * 2 + (lane >> 4)));
        Op::run(s[mt][0], qa, kb[0], kb[1]);
        Op::run(s[mt][1], qa, kb[2], kb[3]);
      }
    }

    // Mask, then the online softmax update of each row (the row's 4 lanes agree on its maximum).
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // Eight rows that are all padding (a GQA group of 8 or fewer heads at seqlen_q 1 leaves
        // rows 8..15 of the 16-row tile empty): warp-uniform, so the warp skips their mask, max,
        // exponentials and O rescale. Their P stays the raw scores (zeros: Q's padding rows are
        // zero), which reach only their own O rows, never stored (the merge skips rows >= rows).
        // H100, session 63: +0.1-0.5% at batch 32-64, level at batch 1-8 (perf-notes).
        if (row0 + mt * 16 + 8 * half >= rows) continue;
        float mx = row_max[mt][half];
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + n * 8 + 2 * (lane & 3) + e;
            float& v = s[mt][n][2 * half + e];
            const bool visible = static_cast<unsigned>(key - key_first[mt][half]) < static_cast<unsigned>(key_count[mt][half]);
            if constexpr (kSoftcap) v = cap_outer * tanhf(v * cap_inner);
            else v *= scale_log2;
            if (!visible) v = -INFINITY;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.f : mx;  // a row with no key yet: all weights 0
        const float correction = exp2f(row_max[mt][half] - base);
        row_max[mt][half] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = s[mt][n][2 * half + e];
            v = exp2f(v - base);
            sum += v;
          }
        row_sum[mt][half] = row_sum[mt][half] * correction + sum;
#pragma unroll
        for (int n = 0; n < kOTiles; ++n) {
          o[mt][n][2 * half] *= correction;
          o[mt][n][2 * half + 1] *= correction;
        }
      }

    // O += P V: the S accumulators of the two key tiles are exactly P's A fragment (k = keys).
    uint32_t pa[kRowTiles][4];
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      pa[mt][0] = Op::pack(s[mt][0][0], s[mt][0][1]);
      pa[mt][1] = Op::pack(s[mt][0][2], s[mt][0][3]);
      pa[mt][2] = Op::pack(s[mt][1][0], s[mt][1][1]);
      pa[mt][3] = Op::pack(s[mt][1][2], s[mt][1][3]);
    }
#pragma unroll
    for (int nd = 0; nd < kKSteps; ++nd) {
      uint32_t vb[4];  // B fragments (k = keys, n = head dims nd*16 .. nd*16 + 15), transposed by ldmatrix
      ldmatrix_x4_trans(vb, v_tile + swizzle<kRowChunks>(lane & 15, nd * 2 + (lane >> 4)));
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        Op::run(o[mt][2 * nd], pa[mt], vb[0], vb[1]);
        Op::run(o[mt][2 * nd + 1], pa[mt], vb[2], vb[3]);
      }
    }
  }

  // The combine kernel (with splits) may launch now: it waits for this grid's end anyway, and its
  // launch then overlaps the merge below instead of following the last block.
  launch_dependents();

  // Merge the warps: their states go to shared memory (the pipeline's bytes, now idle).
  cp_async_wait<0>();
  __syncthreads();
  float* merge_o = reinterpret_cast<float*>(pipe);  // [warp][row][kMergeStride]
  float* merge_max = merge_o + kWarps * kRows * Cfg::kMergeStride;
  float* merge_sum = merge_max + kWarps * kRows;
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[mt][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = mt * 16 + lane / 4 + 8 * half;
      if ((lane & 3) == 0) {
        merge_max[warp * kRows + r] = row_max[mt][half];
        merge_sum[warp * kRows + r] = sum;
      }
      float* dst = merge_o + (warp * kRows + r) * Cfg::kMergeStride + 2 * (lane & 3);
#pragma unroll
      for (int n = 0; n < kOTiles; ++n)
        *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[mt][n][2 * half], o[mt][n][2 * half + 1]);
    }
  __syncthreads();

  // Each thread finishes 8 columns of one row at a time, summing the warps in a fixed order
  // (bitwise reproducible).
  const int64_t total_rows = p.batch * p.heads_q * p.seqlen_q;
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kRowChunks; idx += kThreads) {
    const int r = idx / kRowChunks, c = idx % kRowChunks, rr = row0 + r;
    if (rr >= rows) continue;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, merge_max[w * kRows + r]);
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float l = 0.f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float weight = exp2f(merge_max[w * kRows + r] - m);  // 0 for a warp that saw no key
        l += merge_sum[w * kRows + r] * weight;
        const float* src = merge_o + (w * kRows + r) * Cfg::kMergeStride + c * 8;
        const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
        acc[0] += lo.x * weight; acc[1] += lo.y * weight; acc[2] += lo.z * weight; acc[3] += lo.w * weight;
        acc[4] += hi.x * weight; acc[5] += hi.y * weight; acc[6] += hi.z * weight; acc[7] += hi.w * weight;
      }
    }
    const bool any_key = l > 0.f;  // m finite implies l >= 1
    const float inv = any_key ? 1.f / l : 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] *= inv;
    const float lse2 = any_key ? m + log2f(l) : -INFINITY;
    const int i = rr / group, h = h_kv * group + rr % group;
    const int64_t row = (static_cast<int64_t>(b) * heads_q + h) * sq + i;  // lse's index
    if (params.partial_o == nullptr) {
      Element* out = static_cast<Element*>(p.out) + b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2] + c * 8;
      *reinterpret_cast<uint4*>(out) = pack8<Element>(acc);
      if (c == 0 && p.lse != nullptr) p.lse[row] = any_key ? lse2 * kLn2 : -INFINITY;
    } else {
      float* dst = params.partial_o + (split * total_rows + row) * kHeadDim + c * 8;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (c == 0) params.partial_lse[split * total_rows + row] = lse2;
    }
  }
}

}  // namespace hopattn::sm90::decode
