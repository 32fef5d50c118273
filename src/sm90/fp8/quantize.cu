// The FP8 pre-passes (quantize.hpp): rotate-and-quantise rows to e4m3 with one scale per 128-row
// block or per (batch, head), and the V^T re-layout (layout.hpp) the FP8 attention kernel reads.
// Both are memory-bound; docs/design-fp8.md ("FP8 pre-passes") explains the launch shapes.
#include "sm90/fp8/quantize.hpp"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "sm90/fp8/layout.hpp"
#include "sm90/fp8/unrotate.cuh"  // rotation_sign_bit, the signs' one device definition
#include "sm90/launch_util.hpp"

namespace hopattn::sm90::fp8 {
namespace {

constexpr float kE4M3Max = 448.f;
constexpr int kMaxHeadDim = 256;
constexpr int64_t kMaxGrid = int64_t{1} << 30;  // CTAs loop over tiles beyond this (grid-stride)

// Tile t of a pass over `lead` (batch entry, head) pairs of `blocks` 128-row blocks each: (pair,
// block). Fixed-length batches: block fastest, one CTA per tile. Packed batches: the tile space is
// max_seqlen-sized per sequence, so most tiles of the short sequences are empty (bench/varlen.py's
// powers-of-two mix: 32768 tiles, 8192 real). There the grid is only the resident CTAs and the
// block runs slowest, so an empty tile costs a few instructions of the grid-stride loop rather
// than a CTA launch and a block-wide reduction, and every CTA's stride meets the real tiles of
// every (sequence, head) alike (block fastest with a stride of 32 x 64-block rows would hand one
// CTA in 32 all the first blocks). Measured there: the q and k passes 1.30 -> 0.48 ms (perf-notes).
struct TileCoord {
  int64_t pair, block;
};
__device__ __forceinline__ TileCoord tile_coord(int64_t tile, int64_t blocks, int64_t pairs, bool packed) {
  if (packed) return {tile % pairs, tile / pairs};
  return {tile / blocks, tile % blocks};
}

// The grid of a pass: one CTA per tile, or with packed rows the CTAs that fit on the device at once.
template <class Kernel>
unsigned pass_grid(Kernel kernel, int threads, int64_t ntiles, bool packed) {
  int64_t grid = std::min(ntiles, kMaxGrid);
  int sms = 0, per_sm = 0;
  if (packed && current_device_sm_count(&sms) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) == cudaSuccess && per_sm > 0)
    grid = std::min<int64_t>(grid, int64_t{sms} * per_sm);  // else (a query failed): one CTA per tile, still right
  return static_cast<unsigned>(grid);
}

// ---- scalar helpers ----------------------------------------------------------------------------

// The rotation's signs of the head_dim elements (a multiple of 32 here), one bit each: the words
// of sign_word (unrotate.cuh), computed once per CTA by its first head_dim / 32 warps, a lane per element and a
// ballot per word (rotation_sign_bit is some 20 instructions, too many to spend per element of
// every row).
__device__ void fill_sign_bits(uint32_t seed, int head_dim, uint32_t* bits) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp < head_dim / 32) {
    const uint32_t word = __ballot_sync(0xFFFFFFFFu, rotation_sign_bit(seed, 32 * warp + lane));
    if (lane == 0) bits[warp] = word;
  }
}

// 448 / amax (capped so a tiny amax cannot make it inf), 0 for an all-zero block.
__device__ __forceinline__ float quant_scale(float amax) {
  return amax > 0.f ? fminf(kE4M3Max / amax, FLT_MAX) : 0.f;
}
__device__ __forceinline__ float quant_descale(float amax) { return amax > 0.f ? amax / kE4M3Max : 1.f; }

// Two 16-bit values of one 32-bit word, low half first.
template <DType kT>
__device__ __forceinline__ void unpack2(uint32_t w, float& lo, float& hi) {
  if constexpr (kT == DType::kBF16) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
  } else {
    lo = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xFFFFu)));
    hi = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  }
}

// Eight consecutive 16-bit elements as raw words; 16-byte load when `vec` (address 16-aligned).
__device__ __forceinline__ uint4 load16x8(const uint8_t* p, bool vec) {
  if (vec) return __ldg(reinterpret_cast<const uint4*>(p));
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = static_cast<uint32_t>(__ldg(h + 2 * k)) | (static_cast<uint32_t>(__ldg(h + 2 * k + 1)) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <DType kT>
__device__ __forceinline__ void to_float8(const uint4& r, float (&x)[8]) {
  unpack2<kT>(r.x, x[0], x[1]);
  unpack2<kT>(r.y, x[2], x[3]);
  unpack2<kT>(r.z, x[4], x[5]);
  unpack2<kT>(r.w, x[6], x[7]);
}

// e4m3(x * scale) for 8 values, byte j = element j (cvt.rn.satfinite.e4m3x2.f32, x.x in the low byte).
__device__ __forceinline__ uint2 to_e4m3x8(const float (&x)[8], float scale) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * k] * scale, x[2 * k + 1] * scale), __NV_SATFINITE, __NV_E4M3);
  return make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
}

__device__ __forceinline__ void store8(uint8_t* p, uint2 v, bool vec) {
  if (vec) {
    *reinterpret_cast<uint2*>(p) = v;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      p[j] = static_cast<uint8_t>(v.x >> (8 * j));
      p[4 + j] = static_cast<uint8_t>(v.y >> (8 * j));
    }
  }
}

// The elements of one row a thread holds: kChunks chunks of 8 (slot i = chunk chunk_of(i, l) for
// lane l of the row's kLanes lanes). Adjacent slot pairs are adjacent chunks, so a lane stores 16
// contiguous code bytes; any assignment of element bits to slots and lanes is a valid Hadamard
// butterfly order, since the butterflies on different bits commute.
template <int kLanes, int kChunks>
struct RowSlots {
  static constexpr int kPair = kChunks >= 2 ? 2 : 1;
  static __device__ __forceinline__ int chunk_of(int i, int l) { return (i / kPair) * (kPair * kLanes) + kPair * l + i % kPair; }
};

// x @ (diag(signs) H) for one row over kLanes lanes x kChunks slots (without the 1/sqrt(d), which
// the caller folds into the quantisation scale): signs, then the Walsh-Hadamard butterflies on the
// element bits held in registers (the 8 of a chunk, then across slots) and, last, the lane bits
// through shfl.xor. Few lanes a row keep the shuffles, at one warp-wide SHFL per clock per SM the
// bottleneck of a one-chunk-per-lane layout (4 per element at d128), to one per element.
template <int kLanes, int kChunks>
__device__ __forceinline__ void rotate_row(float (&x)[kChunks][8], const uint32_t* sign_bits, int lane_in_row) {
  using Slots = RowSlots<kLanes, kChunks>;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = Slots::chunk_of(i, lane_in_row);
    const uint32_t s8 = sign_bits[c / 4] >> (8 * (c % 4));
#pragma unroll
    for (int j = 0; j < 8; ++j) x[i][j] = __uint_as_float(__float_as_uint(x[i][j]) ^ ((s8 << (31 - j)) & 0x80000000u));
#pragma unroll
    for (int h = 1; h < 8; h <<= 1)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if ((j & h) == 0) {
          const float a = x[i][j], b = x[i][j + h];
          x[i][j] = a + b;
          x[i][j + h] = a - b;
        }
  }
#pragma unroll
  for (int h = 1; h < kChunks; h <<= 1)
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
      if ((i & h) == 0)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float a = x[i][j], b = x[i + h][j];
          x[i][j] = a + b;
          x[i + h][j] = a - b;
        }
#pragma unroll
  for (int m = 1; m < kLanes; m <<= 1) {
    // The lane holding b of the pair (a, b) -> (a + b, a - b) computes o - x = fma(-1, x, o), the
    // other x + o = fma(1, x, o): one FFMA with the rounding of the add or subtract (the product by
    // +-1 is exact), where `upper ? o - x : x + o` compiled to FADD, FADD and FSEL.
    const float sign = (lane_in_row & m) != 0 ? -1.f : 1.f;
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float o = __shfl_xor_sync(0xFFFFFFFFu, x[i][j], m);
        x[i][j] = __fmaf_rn(sign, x[i][j], o);
      }
  }
}

// Rows of sequence / batch entry b: [first, first + len) of the packed tensor (cu given; values
// clamped to total rows and to seqlen, so wrong index values never reach outside the tensors), or
// rows [0, seqlen) of batch entry b.
struct RowRange {
  int64_t first, len;
};
__device__ __forceinline__ RowRange row_range(const int32_t* cu, int64_t total, int64_t seqlen, int64_t b) {
  if (cu == nullptr) return {0, seqlen};
  const int64_t first = min(max(int64_t{__ldg(cu + b)}, int64_t{0}), total);
  const int64_t last = min(max(int64_t{__ldg(cu + b + 1)}, first), total);
  return {first, min(last - first, seqlen)};
}

// ---- rotate-and-quantise rows --------------------------------------------------------------------

enum class RowsMode {
  kBlockScale,  // amax per 128-row tile: write descale[tile] and the codes
  kHeadAmax,    // first pass of per-head scales: atomicMax of the tile's amax into amax[b, h]
  kHeadScale,   // second pass: codes with amax[b, h] from the first pass
};

struct RowsParams {
  const uint8_t* in = nullptr;  // 16-bit elements
  int64_t in_stride[3] = {0, 0, 0};
  uint8_t* out = nullptr;  // e4m3
  int64_t out_stride[3] = {0, 0, 0};
  float* scales = nullptr;  // kBlockScale: descale (b, h, nblocks); else amax (b, h) as float bits
  int64_t seqlen = 0, heads = 0, nblocks = 0, ntiles = 0;
  const int32_t* cu = nullptr;  // packed rows (QuantizeRowsProblem::cu_seqlens), else null
  int64_t total_rows = 0;
  int head_dim = 0;
  bool rotate = false, vec_in = false, vec_out = false, vec_out16 = false;
  uint32_t seed = 0;
  float inv_sqrt_d = 1.f;
};

// A CTA owns one tile of kBlockRows rows of one (batch, head), one row per kLanes lanes, and keeps
// it in registers (kChunks x 8 fp32 per thread, 64 at most) while the CTA reduces the amax, so `in`
// is read once. kPadChunks: head_dim / 8 rounded up to a power of two (chunks past head_dim idle).
// kLanes is 2 (4 from 32 chunks, to stay at 64 values a thread): the rotation's cross-lane
// butterflies cost a shuffle per element and stage, and shuffles (one warp-wide SHFL per clock per
// SM) bounded the d128 pass with 16 lanes a row (docs/perf-notes.md, "quantiser lanes").
// kBlockRows: rows per tile and per descale block, kQuantBlock or (K of the d128 one-call path)
// kWideKeyBlock.
template <int kPadChunks, int kBlockRows = kQuantBlock>
struct RowsShape {
  static constexpr int kLanes = kPadChunks >= 32 ? 4 : 2;
  static constexpr int kChunks = kPadChunks / kLanes;
  static constexpr int kThreads = kBlockRows * kLanes;  // 256, 448 (wide) or 512 (head_dim > 128)
  static_assert(kChunks >= 1 && kChunks * 8 <= 64 && kThreads % 32 == 0 && kThreads <= 1024, "row layout");
};

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* warp_max) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warp_max[lane] : 0.f;
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
  return v;  // every thread has it; warp_max may be rewritten only after another __syncthreads
}

template <DType kT, int kPadChunks, RowsMode kMode, bool kRotate, int kBlockRows = kQuantBlock>
__global__ void __launch_bounds__(RowsShape<kPadChunks, kBlockRows>::kThreads) quantize_rows_kernel(const RowsParams p) {
  using Shape = RowsShape<kPadChunks, kBlockRows>;
  using Slots = RowSlots<Shape::kLanes, Shape::kChunks>;
  constexpr int kChunks = Shape::kChunks;
  __shared__ float warp_max[Shape::kThreads / 32];
  __shared__ uint32_t sign_bits[kRotate ? kMaxHeadDim / 32 : 1];
  const int lane_in_row = threadIdx.x % Shape::kLanes;
  const int row_in_tile = threadIdx.x / Shape::kLanes;
  if constexpr (kRotate) {
    fill_sign_bits(p.seed, p.head_dim, sign_bits);
    __syncthreads();
  }
  // The rotation's 1/sqrt(d) rides on the amax and the code scale rather than on every element:
  // max(|x|) * c rounds to the max of the rounded |x| * c (rounding is monotone), so the descale is
  // unchanged and a code moves by at most one where x * (c * scale) rounds differently.
  const float post = kRotate ? p.inv_sqrt_d : 1.f;

  for (int64_t tile = blockIdx.x; tile < p.ntiles; tile += gridDim.x) {
    const TileCoord tc = tile_coord(tile, p.nblocks, p.ntiles / p.nblocks, p.cu != nullptr);
    const int64_t bh = tc.pair, blk = tc.block;
    const int64_t b = bh / p.heads, h = bh - b * p.heads;
    const int64_t s = blk * kBlockRows + row_in_tile;
    const RowRange rows = row_range(p.cu, p.total_rows, p.seqlen, b);
    if (p.cu != nullptr && blk * kBlockRows >= rows.len) {
      // Past the sequence (the same for the whole CTA, so no barrier is skipped by part of it): no
      // row to read or write; the block's descale is 1, as for an all-zero block.
      if (kMode == RowsMode::kBlockScale && threadIdx.x == 0) p.scales[bh * p.nblocks + blk] = quant_descale(0.f);
      continue;
    }
    const bool row_active = s < rows.len;
    const int64_t in_at = p.cu == nullptr ? b * p.in_stride[0] : rows.first * p.in_stride[1];
    const uint8_t* in = p.in + 2 * (in_at + h * p.in_stride[2] + s * p.in_stride[1]);

    // All loads first (kChunks 16-byte loads in flight), then convert, rotate and take |max|.
    uint4 raw[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = Slots::chunk_of(i, lane_in_row);
      raw[i] = row_active && c * 8 < p.head_dim ? load16x8(in + 16 * c, p.vec_in) : make_uint4(0, 0, 0, 0);
    }
    // Rotated rows live as fp32 until the codes are written; unrotated ones stay packed 16-bit and
    // are converted again for the codes (an instruction an element), half the registers.
    float x[kRotate ? kChunks : 1][8];
    float tmax = 0.f;
    if constexpr (kRotate) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i) to_float8<kT>(raw[i], x[i]);
      rotate_row<Shape::kLanes, kChunks>(x, sign_bits, lane_in_row);  // rows past seqlen stay 0
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) tmax = fmaxf(tmax, fabsf(x[i][j]));
    } else if constexpr (kMode != RowsMode::kHeadScale) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        float v[8];
        to_float8<kT>(raw[i], v);
#pragma unroll
        for (int j = 0; j < 8; ++j) tmax = fmaxf(tmax, fabsf(v[j]));
      }
    }
    const auto codes = [&](int i, float scale) {
      if constexpr (kRotate) return to_e4m3x8(x[i], scale);
      float v[8];
      to_float8<kT>(raw[i], v);
      return to_e4m3x8(v, scale);
    };

    float amax;
    if constexpr (kMode == RowsMode::kHeadScale) {
      amax = p.scales[bh];
    } else {
      amax = block_max<Shape::kThreads>(tmax, warp_max) * post;
      if constexpr (kMode == RowsMode::kHeadAmax) {
        // Non-negative floats order like their bit patterns; the scratch starts at +0.
        if (threadIdx.x == 0 && amax > 0.f) atomicMax(reinterpret_cast<int*>(p.scales + bh), __float_as_int(amax));
        __syncthreads();  // warp_max is reused by the next tile
        continue;
      } else {
        if (threadIdx.x == 0) p.scales[bh * p.nblocks + blk] = quant_descale(amax);
        __syncthreads();
      }
    }

    if constexpr (kMode != RowsMode::kHeadAmax) {
      const float scale = quant_scale(amax) * post;
      const bool zero = !(amax > 0.f);  // an all-zero block is written as +0, never -0
      const int64_t out_at = p.cu == nullptr ? b * p.out_stride[0] : rows.first * p.out_stride[1];
      uint8_t* out = p.out + out_at + h * p.out_stride[2] + s * p.out_stride[1];
      if (row_active) {
#pragma unroll
        for (int i = 0; i < kChunks; i += Slots::kPair) {
          // A pair's first chunk is even, and head_dim % 16 == 0: both chunks are in or both out.
          const int c = Slots::chunk_of(i, lane_in_row);
          if (c * 8 >= p.head_dim) continue;
          const uint2 lo = zero ? make_uint2(0, 0) : codes(i, scale);
          if constexpr (Slots::kPair == 2) {
            const uint2 hi = zero ? make_uint2(0, 0) : codes(i + 1, scale);
            if (p.vec_out16) {
              *reinterpret_cast<uint4*>(out + 8 * c) = make_uint4(lo.x, lo.y, hi.x, hi.y);
              continue;
            }
            store8(out + 8 * (c + 1), hi, p.vec_out);
          }
          store8(out + 8 * c, lo, p.vec_out);
        }
      }
    }
  }
}

// descale = amax / 448 (1 when amax == 0), in place over the amax scratch. Runs after the pass that
// read the amax (same stream), so no CTA ever sees a half-converted value.
__global__ void amax_to_descale_kernel(float* scales, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    scales[i] = quant_descale(scales[i]);
}

template <DType kT, RowsMode kMode, int kPadChunks, bool kRotate, int kBlockRows = kQuantBlock>
cudaError_t launch_rows_chunks(const RowsParams& p, cudaStream_t stream) {
  constexpr int kThreads = RowsShape<kPadChunks, kBlockRows>::kThreads;
  const auto kernel = quantize_rows_kernel<kT, kPadChunks, kMode, kRotate, kBlockRows>;
  const unsigned grid = pass_grid(kernel, kThreads, p.ntiles, p.cu != nullptr);
  kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <DType kT, RowsMode kMode>
cudaError_t launch_rows(const RowsParams& p, cudaStream_t stream) {
  const int chunks = p.head_dim / 8;
  if (p.rotate) {  // head_dim 64, 128 or 256 (quantize_rows checks)
    if (chunks == 8) return launch_rows_chunks<kT, kMode, 8, true>(p, stream);
    if (chunks == 16) return launch_rows_chunks<kT, kMode, 16, true>(p, stream);
    return launch_rows_chunks<kT, kMode, 32, true>(p, stream);
  }
  if (chunks <= 2) return launch_rows_chunks<kT, kMode, 2, false>(p, stream);
  if (chunks <= 4) return launch_rows_chunks<kT, kMode, 4, false>(p, stream);
  if (chunks <= 8) return launch_rows_chunks<kT, kMode, 8, false>(p, stream);
  if (chunks <= 16) return launch_rows_chunks<kT, kMode, 16, false>(p, stream);
  return launch_rows_chunks<kT, kMode, 32, false>(p, stream);
}

template <RowsMode kMode>
cudaError_t launch_rows_dtype(DType t, const RowsParams& p, cudaStream_t stream) {
  return t == DType::kBF16 ? launch_rows<DType::kBF16, kMode>(p, stream) : launch_rows<DType::kFP16, kMode>(p, stream);
}

// Block scales in tiles of kWideKeyBlock rows: head_dim 128 (16 chunks a row) only, fixed length.
cudaError_t launch_wide_block_rows(DType t, const RowsParams& p, cudaStream_t stream) {
  constexpr RowsMode kMode = RowsMode::kBlockScale;
  if (p.rotate)
    return t == DType::kBF16 ? launch_rows_chunks<DType::kBF16, kMode, 16, true, kWideKeyBlock>(p, stream)
                             : launch_rows_chunks<DType::kFP16, kMode, 16, true, kWideKeyBlock>(p, stream);
  return t == DType::kBF16 ? launch_rows_chunks<DType::kBF16, kMode, 16, false, kWideKeyBlock>(p, stream)
                           : launch_rows_chunks<DType::kFP16, kMode, 16, false, kWideKeyBlock>(p, stream);
}

cudaError_t finish_descale(float* scales, int64_t n, cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  amax_to_descale_kernel<<<grid, 256, 0, stream>>>(scales, n);
  return cudaGetLastError();
}

bool aligned(const void* ptr, const int64_t (&stride)[3], int64_t elem_bytes, int64_t bytes) {
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) return false;
  for (int64_t s : stride)
    if ((s * elem_bytes) % bytes != 0) return false;
  return true;
}

bool is_16bit(DType t) { return t == DType::kBF16 || t == DType::kFP16; }

// ---- V^T ---------------------------------------------------------------------------------------

struct VtParams {
  const uint8_t* in = nullptr;
  int64_t in_stride[3] = {0, 0, 0};
  uint8_t* vt = nullptr;
  const float* amax = nullptr;  // (b, h) from the amax pass; 16-bit input only
  int64_t seqlen = 0, heads = 0, padded = 0, key_tiles = 0, ntiles = 0;  // padded: V^T's row length
  const int32_t* cu = nullptr;  // packed keys (VtProblem::cu_seqlens), else null
  int64_t total_rows = 0;
  int head_dim = 0;
  int swizzle_mul = 1;  // 32 / (head_dim / 8 rounded up to a power of two): conflict-free smem stores
  bool vec_in = false, vec_out = false;
  int* zero_word = nullptr;  // VtProblem::zero_word
};

constexpr int kVtThreads = 256;

// 4x4 byte transpose: o[j] = {a.byte j, b.byte j, c.byte j, d.byte j}.
__device__ __forceinline__ void transpose4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t* o) {
  const uint32_t ab_lo = __byte_perm(a, b, 0x5140), ab_hi = __byte_perm(a, b, 0x7362);  // a0 b0 a1 b1 | a2 b2 a3 b3
  const uint32_t cd_lo = __byte_perm(c, d, 0x5140), cd_hi = __byte_perm(c, d, 0x7362);
  o[0] = __byte_perm(ab_lo, cd_lo, 0x5410);
  o[1] = __byte_perm(ab_lo, cd_lo, 0x7632);
  o[2] = __byte_perm(ab_hi, cd_hi, 0x5410);
  o[3] = __byte_perm(ab_hi, cd_hi, 0x7632);
}

// 8 e4m3 codes of one key: the input's 8 head-dim values (quantised unless kT is kE4M3).
template <DType kT>
__device__ __forceinline__ uint2 load_codes8(const uint8_t* p, bool vec, float scale, bool zero) {
  if constexpr (kT == DType::kE4M3) {
    if (vec) return __ldg(reinterpret_cast<const uint2*>(p));
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j / 4] |= static_cast<uint32_t>(__ldg(p + j)) << (8 * (j % 4));
    return make_uint2(w[0], w[1]);
  } else {
    float x[8];
    to_float8<kT>(load16x8(p, vec), x);
    return zero ? make_uint2(0, 0) : to_e4m3x8(x, scale);
  }
}

// One CTA per (128-key tile, head, batch). Phase 1: a work item is (key group g of 16, quad t,
// head-dim chunk c); it loads the 4 keys that V^T stores at positions 4t .. 4t+3 of the group
// (keys 2t, 2t+1, 8+2t, 9+2t; layout.hpp) for 8 head-dim values, transposes the 4x8 bytes in
// registers and stores one 32-bit word per head-dim row to shared memory. Phase 2: each warp writes
// whole 128-byte rows of V^T. The smem word column is XOR-swizzled by the row's chunk so that both
// phases are free of bank conflicts.
template <DType kT>
__global__ void __launch_bounds__(kVtThreads) make_vt_kernel(const VtParams p) {
  __shared__ uint32_t tile_t[kMaxHeadDim * (kQuantBlock / 4)];
  constexpr int64_t kInBytes = kT == DType::kE4M3 ? 1 : 2;
  const int chunks = p.head_dim / 8;
  const auto swizzle = [&](int row) { return ((row >> 3) * p.swizzle_mul) & 31; };
  if (p.zero_word != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *p.zero_word = 0;

  for (int64_t tile = blockIdx.x; tile < p.ntiles; tile += gridDim.x) {
    const TileCoord tc = tile_coord(tile, p.key_tiles, p.ntiles / p.key_tiles, p.cu != nullptr);
    const int64_t bh = tc.pair, kt = tc.block;
    const int64_t b = bh / p.heads, h = bh - b * p.heads;
    float scale = 1.f;
    bool zero = false;
    if constexpr (kT != DType::kE4M3) {
      const float amax = p.amax[bh];
      scale = quant_scale(amax);
      zero = !(amax > 0.f);
    }
    const RowRange keys = row_range(p.cu, p.total_rows, p.seqlen, b);
    if (kt * kQuantBlock >= keys.len && p.cu != nullptr) continue;  // past the sequence: nothing to lay out
    const int64_t in_at = p.cu == nullptr ? b * p.in_stride[0] : keys.first * p.in_stride[1];
    const uint8_t* in = p.in + kInBytes * (in_at + h * p.in_stride[2]);

    for (int w = threadIdx.x; w < 32 * chunks; w += kVtThreads) {
      const int c = w % chunks, q = w / chunks, t = q & 3, g = q >> 2;
      uint2 k8[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // position 4t + i holds key 8 * (i / 2) + 2t + (i % 2)
        const int64_t s = kt * kQuantBlock + 16 * g + 8 * (i / 2) + 2 * t + (i % 2);
        k8[i] = s < keys.len ? load_codes8<kT>(in + kInBytes * (s * p.in_stride[1] + 8 * c), p.vec_in, scale, zero)
                             : make_uint2(0, 0);  // padding keys are zero
      }
      uint32_t words[8];
      transpose4x4(k8[0].x, k8[1].x, k8[2].x, k8[3].x, words);
      transpose4x4(k8[0].y, k8[1].y, k8[2].y, k8[3].y, words + 4);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int row = 8 * c + j;
        tile_t[row * 32 + ((4 * g + t) ^ swizzle(row))] = words[j];
      }
    }
    __syncthreads();

    // (b, h, head_dim, padded), or packed (h, head_dim, padded) from the sequence's start column.
    uint8_t* out = p.cu == nullptr ? p.vt + bh * p.head_dim * p.padded + kt * kQuantBlock
                                   : p.vt + h * p.head_dim * p.padded + vt_varlen_start(keys.first, b) + kt * kQuantBlock;
    for (int w = threadIdx.x; w < 32 * p.head_dim; w += kVtThreads) {
      const int row = w >> 5, col = w & 31;
      const uint32_t v = tile_t[row * 32 + (col ^ swizzle(row))];
      uint8_t* dst = out + row * p.padded + 4 * col;
      if (p.vec_out) {
        *reinterpret_cast<uint32_t*>(dst) = v;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) dst[j] = static_cast<uint8_t>(v >> (8 * j));
      }
    }
    __syncthreads();  // tile_t is rewritten by the next tile
  }
}

template <DType kT>
cudaError_t launch_vt(const VtParams& p, cudaStream_t stream) {
  const unsigned grid = pass_grid(make_vt_kernel<kT>, kVtThreads, p.ntiles, p.cu != nullptr);
  make_vt_kernel<kT><<<grid, kVtThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

bool valid_head_dim(int64_t d) { return d >= 16 && d <= kMaxHeadDim && d % 16 == 0; }

}  // namespace

cudaError_t quantize_rows(const QuantizeRowsProblem& p, cudaStream_t stream) {
  if (p.batch < 0 || p.seqlen < 0 || p.heads < 0 || !is_16bit(p.in_dtype) || !valid_head_dim(p.head_dim))
    return cudaErrorInvalidValue;
  if (p.rotate && p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return cudaErrorInvalidValue;
  if (!(p.block_rows == 0 || p.block_rows == kQuantBlock || p.block_rows == kWideKeyBlock)) return cudaErrorInvalidValue;
  // Per-head scales sweep 128-row tiles whatever block_rows says: the tiles must cover every row.
  const bool wide = p.block_quant && p.block_rows == kWideKeyBlock;
  if (wide && (p.head_dim != 128 || p.cu_seqlens != nullptr)) return cudaErrorInvalidValue;
  if (p.batch == 0 || p.seqlen == 0 || p.heads == 0) return cudaSuccess;
  if (p.in == nullptr || p.out == nullptr || p.descale == nullptr) return cudaErrorInvalidValue;

  RowsParams r;
  r.in = static_cast<const uint8_t*>(p.in);
  r.out = static_cast<uint8_t*>(p.out);
  for (int i = 0; i < 3; ++i) {
    r.in_stride[i] = p.in_stride[i];
    r.out_stride[i] = p.out_stride[i];
  }
  r.scales = p.descale;
  r.seqlen = p.seqlen;
  r.heads = p.heads;
  r.cu = p.cu_seqlens;
  r.total_rows = p.total_rows;
  const int block_rows = wide ? kWideKeyBlock : kQuantBlock;
  r.nblocks = (p.seqlen + block_rows - 1) / block_rows;
  r.ntiles = r.nblocks * p.heads * p.batch;
  r.head_dim = static_cast<int>(p.head_dim);
  r.rotate = p.rotate;
  r.vec_in = aligned(p.in, p.in_stride, 2, 16);
  r.vec_out = aligned(p.out, p.out_stride, 1, 8);
  r.vec_out16 = aligned(p.out, p.out_stride, 1, 16);
  r.seed = p.seed;
  r.inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));

  if (p.block_quant) {
    return wide ? launch_wide_block_rows(p.in_dtype, r, stream)
                : launch_rows_dtype<RowsMode::kBlockScale>(p.in_dtype, r, stream);
  }
  // Per (batch, head): the descale buffer holds the amax bits between the passes.
  const int64_t nscales = p.batch * p.heads;
  if (cudaError_t e = cudaMemsetAsync(p.descale, 0, static_cast<size_t>(nscales) * sizeof(float), stream); e != cudaSuccess)
    return e;
  if (cudaError_t e = launch_rows_dtype<RowsMode::kHeadAmax>(p.in_dtype, r, stream); e != cudaSuccess) return e;
  if (cudaError_t e = launch_rows_dtype<RowsMode::kHeadScale>(p.in_dtype, r, stream); e != cudaSuccess) return e;
  return finish_descale(p.descale, nscales, stream);
}

cudaError_t make_vt(const VtProblem& p, cudaStream_t stream) {
  if (p.batch < 0 || p.seqlen < 0 || p.heads < 0 || !valid_head_dim(p.head_dim) ||
      !(is_16bit(p.in_dtype) || p.in_dtype == DType::kE4M3))
    return cudaErrorInvalidValue;
  if (p.batch == 0 || p.seqlen == 0 || p.heads == 0)
    return p.zero_word != nullptr ? cudaMemsetAsync(p.zero_word, 0, sizeof(int), stream) : cudaSuccess;
  const bool e4m3 = p.in_dtype == DType::kE4M3;
  if (p.in == nullptr || p.vt == nullptr || (!e4m3 && p.descale == nullptr)) return cudaErrorInvalidValue;

  VtParams v;
  v.in = static_cast<const uint8_t*>(p.in);
  for (int i = 0; i < 3; ++i) v.in_stride[i] = p.in_stride[i];
  v.vt = static_cast<uint8_t*>(p.vt);
  v.amax = p.descale;
  v.seqlen = p.seqlen;
  v.heads = p.heads;
  v.cu = p.cu_seqlens;
  v.total_rows = p.total_rows;
  v.padded = p.cu_seqlens != nullptr ? vt_varlen_columns(p.total_rows, p.batch) : vt_padded_seqlen(p.seqlen);
  v.key_tiles = vt_padded_seqlen(p.seqlen) / kQuantBlock;
  v.ntiles = v.key_tiles * p.heads * p.batch;
  v.head_dim = static_cast<int>(p.head_dim);
  int lanes = 2;
  while (lanes < p.head_dim / 8) lanes *= 2;
  v.swizzle_mul = 32 / lanes;
  v.vec_in = e4m3 ? aligned(p.in, p.in_stride, 1, 8) : aligned(p.in, p.in_stride, 2, 16);
  v.vec_out = reinterpret_cast<uintptr_t>(p.vt) % 4 == 0;
  v.zero_word = p.zero_word;
  if (e4m3) return launch_vt<DType::kE4M3>(v, stream);

  // 16-bit: amax per (batch, head) over all keys (the rows kernel, no rotation), then V^T, then the
  // descale, which must not overwrite the amax before make_vt_kernel has read it.
  RowsParams r;
  r.in = v.in;
  for (int i = 0; i < 3; ++i) r.in_stride[i] = p.in_stride[i];
  r.scales = p.descale;
  r.seqlen = p.seqlen;
  r.heads = p.heads;
  r.cu = v.cu;
  r.total_rows = v.total_rows;
  r.nblocks = v.key_tiles;
  r.ntiles = v.ntiles;
  r.head_dim = v.head_dim;
  r.vec_in = v.vec_in;
  const int64_t nscales = p.batch * p.heads;
  if (cudaError_t e = cudaMemsetAsync(p.descale, 0, static_cast<size_t>(nscales) * sizeof(float), stream); e != cudaSuccess)
    return e;
  if (cudaError_t e = launch_rows_dtype<RowsMode::kHeadAmax>(p.in_dtype, r, stream); e != cudaSuccess) return e;
  const cudaError_t e = p.in_dtype == DType::kBF16 ? launch_vt<DType::kBF16>(v, stream) : launch_vt<DType::kFP16>(v, stream);
  if (e != cudaSuccess) return e;
  return finish_descale(p.descale, nscales, stream);
}

}  // namespace hopattn::sm90::fp8
