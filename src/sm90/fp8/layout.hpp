// The data contract between the FP8 pre-passes (quantise, V re-layout) and the FP8 attention
// kernel: block granularity of the descales, and the layout of V^T in the workspace.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOPATTN_FP8_HD __host__ __device__
#else
#define HOPATTN_FP8_HD
#endif

namespace hopattn::sm90::fp8 {

// Rows (tokens) per quantisation block: the kernel's query tile and key tile, so that one tile
// reads one descale.
constexpr int kQuantBlock = 128;

// The d128 wider key tile (FlashAttention-3's FP8 d128 tile is 128 x 224): fewer key-block
// iterations per tile, so fewer per-block softmax and barrier costs per FLOP. attention_fp8 then
// quantises K in blocks of 224 rows, one descale per key tile (forward_fp8 takes it only with
// per-head K descales). Q keeps 128-row blocks, and V^T its
// 128-key padding (a 224-key tile past the padding reads TMA's zero fill).
constexpr int kWideKeyBlock = 224;

// V^T, the B operand of O = P V: FP8 WGMMA reads B K-major only, i.e. keys contiguous. The
// workspace holds V as (batch, heads_kv, head_dim, seqlen_k_pad), seqlen_k_pad = seqlen_k rounded
// up to kQuantBlock, zero past seqlen_k (so a key tile never reads past the buffer and padded keys
// contribute 0 * 0).
HOPATTN_FP8_HD constexpr int64_t vt_padded_seqlen(int64_t seqlen_k) {
  return (seqlen_k + kQuantBlock - 1) / kQuantBlock * kQuantBlock;
}

// Packed (varlen) batches: V^T is (heads_kv, head_dim, vt_varlen_columns) and sequence b's keys
// start at column vt_varlen_start(cu_seqlens_k[b], b): its first key rounded up to a multiple of
// 128, plus 128 per earlier sequence. That leaves room for the sequence's ceil(len / 128) whole key
// tiles (zero past its last key) before the next one starts, since for any a, l >= 0
// roundup(a) + roundup(l) <= roundup(a + l) + 128, and it needs no prefix sum over the batch.
HOPATTN_FP8_HD constexpr int64_t vt_varlen_start(int64_t first_key, int64_t seq) {
  return vt_padded_seqlen(first_key) + kQuantBlock * seq;
}
HOPATTN_FP8_HD constexpr int64_t vt_varlen_columns(int64_t total_k, int64_t batch) {
  return vt_padded_seqlen(total_k) + kQuantBlock * batch;
}

// Within every group of 16 keys, V^T stores key k at position vt_key_position(k). Why: the kernel
// converts the fp32 score accumulator of S = Q K^T to e4m3 in registers and feeds it as the A
// operand of O = P V. Thread t (of a quad) holds accumulator columns {2t, 2t+1, 8+2t, 9+2t} of each
// 16 columns, while the 8-bit A operand wants columns {4t .. 4t+3} from it. Instead of shuffling
// bytes between threads, the kernel packs its own four values as A positions 4t..4t+3, which makes
// A position 4t+i stand for key 8*(i/2) + 2t + (i%2); V^T's columns are permuted the same way, so
// the sum over keys is unchanged. This is the inverse map: key -> position.
HOPATTN_FP8_HD constexpr int vt_key_position(int key_in_group16) {
  const int k = key_in_group16;
  return 4 * ((k & 7) >> 1) + 2 * (k >> 3) + (k & 1);
}

// Column of V^T (within the padded key range) that holds key `key`.
HOPATTN_FP8_HD constexpr int64_t vt_column(int64_t key) { return (key & ~int64_t(15)) + vt_key_position(int(key & 15)); }

}  // namespace hopattn::sm90::fp8
