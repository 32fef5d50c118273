// The first sm90 forward kernel: FlashAttention-2 style, register-level mma.sync m16n8k16 with
// ldmatrix and cp.async double buffering. Correct for every shape; WGMMA/TMA replace it later.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/copy_sm80.hpp>

#include "sm90/causal_mask.cuh"
#include "sm90/element_traits.cuh"
#include "sm90/fwd_params.hpp"
#include "sm90/online_softmax.cuh"
#include "sm90/smem_tile.cuh"

namespace hopattn::sm90 {

// ldmatrix.x4: lane l supplies the row address of 8x8 matrix l/8, row l%8; every lane gets
// elements (l/4, 2*(l%4)..+1) of each matrix (transposed with .trans).
__device__ inline void ldsm_x4(const void* smem, uint32_t (&r)[4]) {
  cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(smem), r[0], r[1], r[2], r[3]);
}
__device__ inline void ldsm_x4_trans(const void* smem, uint32_t (&r)[4]) {
  cute::SM75_U16x8_LDSM_T::copy(*reinterpret_cast<const cute::uint128_t*>(smem), r[0], r[1], r[2], r[3]);
}

template <class Mma>
__device__ inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Mma::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b0, b1, d[0], d[1], d[2], d[3]);
}

// One CTA computes a kBlockM x kHeadDim tile of O for one (batch, query head). Each warp owns
// 16 query rows and walks every visible key tile; K/V tiles are shared by all warps via smem.
template <DType kDType, int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(FwdTileConfig<kHeadDim>::kThreads, 1) fwd_mma_kernel(const FwdParams p) {
  using Cfg = FwdTileConfig<kHeadDim>;
  using Traits = ElementTraits<kDType>;
  using Element = typename Traits::Element;
  using Mma = typename Traits::Mma;
  using QTile = SwizzledTile<Cfg::kBlockM, kHeadDim>;
  using KVTile = SwizzledTile<Cfg::kBlockN, kHeadDim>;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  constexpr int kSTiles = kBlockN / 8;   // n8 fragments across one key tile (S = Q K^T)
  constexpr int kOTiles = kHeadDim / 8;  // n8 fragments across the head dim (O)

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* const sQ = reinterpret_cast<Element*>(smem_raw);
  Element* const sK = sQ + QTile::kElems;              // kStages K tiles
  Element* const sV = sK + Cfg::kStages * KVTile::kElems;  // kStages V tiles

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // grid.x is flattened (batch, head, query tile): grid.y/z stop at 65535 and batch * heads can
  // exceed that. Query tiles vary fastest so neighbouring CTAs share K/V in L2; the tile order
  // is reversed so under a causal mask the longest tiles start first.
  const int m_block = p.num_m_blocks - 1 - static_cast<int>(blockIdx.x % p.num_m_blocks);
  const int bh = static_cast<int>(blockIdx.x / p.num_m_blocks);
  const int head = bh % p.heads_q, batch = bh / p.heads_q;
  const int head_kv = head / p.group;
  const int m_start = m_block * kBlockM;

  const Element* q = static_cast<const Element*>(p.q) + batch * p.q_stride[0] + m_start * p.q_stride[1] +
                     head * p.q_stride[2];
  const Element* k = static_cast<const Element*>(p.k) + batch * p.k_stride[0] + head_kv * p.k_stride[2];
  const Element* v = static_cast<const Element*>(p.v) + batch * p.v_stride[0] + head_kv * p.v_stride[2];

  const CausalMask<kCausal> mask{p.seqlen_q, p.seqlen_k};
  const int kv_end = mask.tile_kv_end(m_start, kBlockM);
  const int n_block_max = kv_end > 0 ? (kv_end + kBlockN - 1) / kBlockN : 0;

  float acc_o[kOTiles][4];
#pragma unroll
  for (int o = 0; o < kOTiles; ++o) acc_o[o][0] = acc_o[o][1] = acc_o[o][2] = acc_o[o][3] = 0.f;
  OnlineSoftmax softmax;

  // Per-lane ldmatrix coordinates (rows within a 16-row slab, chunk offset within a 16-col step).
  // Q as the A operand: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) -> a0..a3.
  const typename QTile::LaneOffsets q_lane = QTile::lane_offsets(warp * 16 + (lane & 15), lane >> 4);
  // K as the B operand (keys are B's columns): (keys 0-7: dims 0-7 | 8-15), then keys 8-15.
  const typename KVTile::LaneOffsets k_lane = KVTile::lane_offsets((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  // V as the B operand via .trans (keys are B's rows): (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
  const typename KVTile::LaneOffsets v_lane = KVTile::lane_offsets(lane & 15, lane >> 4);
  // This thread's rows / columns in the mma.sync C fragment (and in P as the A fragment).
  const int frag_row0 = m_start + warp * 16 + lane / 4;
  const int frag_col = 2 * (lane % 4);

  if (n_block_max > 0) {
    // Key tiles run from the last visible one down to 0, so the tiles that need the element
    // mask (seqlen_k edge, diagonal) come first and the rest run unmasked.
    const int rows_q = p.seqlen_q - m_start;
    load_tile_async<QTile, kThreads>(sQ, q, p.q_stride[1], rows_q, tid);
    {
      const int n0 = (n_block_max - 1) * kBlockN;
      load_tile_async<KVTile, kThreads>(sK, k + n0 * p.k_stride[1], p.k_stride[1], p.seqlen_k - n0, tid);
      cute::cp_async_fence();  // group: Q + K[last]
      load_tile_async<KVTile, kThreads>(sV, v + n0 * p.v_stride[1], p.v_stride[1], p.seqlen_k - n0, tid);
      cute::cp_async_fence();  // group: V[last]
    }

    for (int it = 0, n_block = n_block_max - 1; n_block >= 0; ++it, --n_block) {
      const int stage = it & 1;
      const Element* sK_cur = sK + stage * KVTile::kElems;
      const Element* sV_cur = sV + stage * KVTile::kElems;
      const int n_start = n_block * kBlockN;

      // Outstanding: {K[n], V[n]}. Wait for K[n]; the barrier also makes every thread's copies
      // visible and guarantees the other stage (read in the previous iteration) is free.
      cute::cp_async_wait<1>();
      __syncthreads();
      if (n_block > 0) {
        const int nn = n_start - kBlockN;
        load_tile_async<KVTile, kThreads>(sK + (stage ^ 1) * KVTile::kElems, k + nn * p.k_stride[1],
                                          p.k_stride[1], p.seqlen_k - nn, tid);
      }
      cute::cp_async_fence();  // possibly empty: keeps the group count uniform

      // S = Q K^T for this warp's 16 rows x kBlockN keys.
      float s[kSTiles][4];
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        uint32_t a[4];
        ldsm_x4(sQ + QTile::at(q_lane, 0, 2 * kk), a);
#pragma unroll
        for (int np = 0; np < kSTiles / 2; ++np) {
          uint32_t b[4];  // b0,b1 of key fragment 2np, then of 2np+1
          ldsm_x4(sK_cur + KVTile::at(k_lane, np * 16, 2 * kk), b);
          mma_16x8x16<Mma>(s[2 * np], a, b[0], b[1]);
          mma_16x8x16<Mma>(s[2 * np + 1], a, b[2], b[3]);
        }
      }

      if (mask.tile_needs_mask(m_start, n_start, kBlockN)) mask.apply(s, frag_row0, n_start + frag_col);
      softmax.update(s, acc_o, p.scale_log2);

      // Outstanding: {V[n], K[n-1]}. Wait for V[n], then prefetch V[n-1] into the free stage.
      cute::cp_async_wait<1>();
      __syncthreads();
      if (n_block > 0) {
        const int nn = n_start - kBlockN;
        load_tile_async<KVTile, kThreads>(sV + (stage ^ 1) * KVTile::kElems, v + nn * p.v_stride[1],
                                          p.v_stride[1], p.seqlen_k - nn, tid);
      }
      cute::cp_async_fence();

      // O += P V. The m16n8 C fragments of two adjacent key fragments are exactly the m16n8k16
      // A fragment (rows g / g+8, columns 2t.. and 8+2t..), so P never leaves registers.
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[4];
        a[0] = Traits::pack(s[2 * kk][0], s[2 * kk][1]);
        a[1] = Traits::pack(s[2 * kk][2], s[2 * kk][3]);
        a[2] = Traits::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = Traits::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < kOTiles / 2; ++dp) {
          uint32_t b[4];  // b0,b1 of head-dim fragment 2dp, then of 2dp+1
          ldsm_x4_trans(sV_cur + KVTile::at(v_lane, kk * 16, 2 * dp), b);
          mma_16x8x16<Mma>(acc_o[2 * dp], a, b[0], b[1]);
          mma_16x8x16<Mma>(acc_o[2 * dp + 1], a, b[2], b[3]);
        }
      }
    }
  }

  // ---- epilogue: normalise, stage through this warp's own Q rows, 16-byte coalesced stores ----
  float inv_sum[2], lse[2];
  softmax.finalize(p.scale, inv_sum, lse);

  cute::cp_async_wait<0>();
  __syncthreads();  // every warp is done with sQ (only its own rows, but Q was loaded by all)
  const int warp_row = warp * 16;
#pragma unroll
  for (int o = 0; o < kOTiles; ++o) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row + lane / 4 + 8 * r;
      // Chunk o holds columns 8o..8o+7; this thread's pair starts at column 8o + frag_col.
      Element* dst = sQ + QTile::chunk_offset(row, o) + frag_col;
      *reinterpret_cast<uint32_t*>(dst) =
          Traits::pack(acc_o[o][2 * r] * inv_sum[r], acc_o[o][2 * r + 1] * inv_sum[r]);
    }
  }
  __syncwarp();

  Element* out = static_cast<Element*>(p.out) + batch * p.o_stride[0] + head * p.o_stride[2];
  constexpr int kChunksPerWarp = 16 * QTile::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < kChunksPerWarp / 32; ++i) {
    const int idx = i * 32 + lane;
    const int row = warp_row + idx / QTile::kChunksPerRow;
    const int chunk = idx % QTile::kChunksPerRow;
    const int grow = m_start + row;
    if (grow < p.seqlen_q) {
      const cute::uint128_t val = *reinterpret_cast<const cute::uint128_t*>(sQ + QTile::chunk_offset(row, chunk));
      *reinterpret_cast<cute::uint128_t*>(out + grow * p.o_stride[1] + chunk * QTile::kChunkElems) = val;
    }
  }

  if (p.lse != nullptr && lane % 4 == 0) {
    float* lse_row = p.lse + (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int grow = frag_row0 + 8 * r;
      if (grow < p.seqlen_q) lse_row[grow] = lse[r];
    }
  }
}

}  // namespace hopattn::sm90
