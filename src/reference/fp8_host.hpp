// Host (CPU) reference of the FP8 pre-passes (sm90/fp8/quantize.hpp): e4m3 encode/decode, the
// rotation M = diag(signs) * H / sqrt(d) of hopattn.fp8_reference, and dense-buffer mirrors of
// quantize_rows and make_vt. Tests judge the GPU kernels against these; plain C++, no CUDA.
#pragma once

#include <cstdint>
#include <vector>

namespace hopattn::reference::fp8 {

constexpr float kE4M3Max = 448.f;

// e4m3fn (OCP, no infinities): 0x7F and 0xFF are NaN, the largest finite value is 448.
float e4m3_to_float(uint8_t code);
// Round to nearest even, saturate to +-448 (infinities too: cvt.rn.satfinite), NaN -> 0x7F.
uint8_t float_to_e4m3(float x);

uint64_t splitmix64(uint64_t x);
// +-1 for i < d: -1 iff the top bit of splitmix64((uint64(seed) << 32) + i) is set.
std::vector<float> rotation_signs(int d, uint32_t seed);

// In place, every one of `nrows` rows of d values (d a power of two) becomes x @ M, in double:
// signs first, then the Sylvester-ordered fast Walsh-Hadamard transform, then / sqrt(d).
void rotate_rows(std::vector<double>& rows, int64_t nrows, int d, uint32_t seed);

// The scale the kernels multiply by before rounding (448 / amax, capped at FLT_MAX, 0 when
// amax == 0) and the descale they store (amax / 448, or 1 when amax == 0); fp32 as on the device.
float quant_scale(float amax);
float quant_descale(float amax);

// A quantised tensor: codes dense (batch, seqlen, heads, head_dim) e4m3, descale dense
// (batch, heads, nblocks) fp32.
struct QuantizedRows {
  std::vector<uint8_t> codes;
  std::vector<float> descale;
  int64_t nblocks = 0;
};

// Mirrors sm90::fp8::quantize_rows. `in` is dense (batch, seqlen, heads, head_dim), already rounded
// to the 16-bit input dtype. With rotate, rows are rotated in double (rotate_rows) and rounded to
// fp32 (the device's fp32 transform differs from that by an ulp or two); without, the arithmetic
// is exactly the device's (fp32 products, the same rounding), so the codes match bit for bit.
// block_rows: rows per descale block with block_quant (QuantizeRowsProblem::block_rows; 0 = 128).
QuantizedRows quantize_rows_reference(const std::vector<float>& in, int64_t batch, int64_t seqlen, int64_t heads,
                                      int64_t head_dim, bool rotate, bool block_quant, uint32_t seed,
                                      int64_t block_rows = 0);

// V^T as sm90::fp8::make_vt writes it: dense (batch, heads, head_dim, vt_padded_seqlen(seqlen))
// e4m3, key s at column vt_column(s), zeros in the padding.
struct VtReference {
  std::vector<uint8_t> vt;
  std::vector<float> descale;  // (batch, heads); empty for e4m3 input
};
// 16-bit input: `in` dense (batch, seqlen, heads, head_dim) values, one scale per (batch, head).
VtReference make_vt_reference(const std::vector<float>& in, int64_t batch, int64_t seqlen, int64_t heads,
                              int64_t head_dim);
// e4m3 input: the bytes moved unchanged (descale left empty).
VtReference make_vt_reference_e4m3(const std::vector<uint8_t>& in, int64_t batch, int64_t seqlen, int64_t heads,
                                   int64_t head_dim);

}  // namespace hopattn::reference::fp8
