// The validated, normalised form of ForwardArgs that every backend (CPU reference, CUDA reference,
// sm90 kernels) consumes. Validation happens once, in validate.cpp; backends trust this struct.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "hopattn/hopattn.hpp"

#if defined(__CUDACC__)
#define HOPATTN_HOST_DEVICE __host__ __device__
#else
#define HOPATTN_HOST_DEVICE
#endif

namespace hopattn {

// Strides are in elements and 64-bit, so batch*seqlen*heads*head_dim past 2^31 indexes correctly.
struct AttnProblem {
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  DType dtype = DType::kBF16;
  bool causal = false;
  float scale = 1.f;  // softmax scale applied to q.k
  // Window, normalised by validation: -1 (unbounded) or >= 0 on each side, and causal sets
  // window_right = 0. So masked() covers causal and every window: those problems run the
  // masked-kernel instantiations with the bounds as run-time values.
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;  // > 0: scores are softcap * tanh(scale * q.k / softcap); 0: off

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // (batch, heads_q, seqlen_q) contiguous, or null

  // Strides of dims (batch, seq, head); the head_dim stride is 1.
  int64_t q_stride[3] = {0, 0, 0};
  int64_t k_stride[3] = {0, 0, 0};
  int64_t v_stride[3] = {0, 0, 0};
  int64_t o_stride[3] = {0, 0, 0};

  // Variable-length batches (forward_varlen, via to_attn_problem): a non-null cu_seqlens_q makes
  // q/k/v/out packed along tokens. Sequence b's rows start at cu_seqlens_q[b] / cu_seqlens_k[b]
  // (device memory, read by the kernel), seqlen_q/seqlen_k hold the max_seqlen bounds,
  // total_q/total_k the packed row counts, the batch strides are 0 and lse is (heads_q, total_q).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_q = nullptr;  // or null
  const int32_t* seqused_k = nullptr;  // or null
  int64_t total_q = 0, total_k = 0;
  // A packed batch's tile counter (forward_varlen's workspace), or null: the launcher zeroes it on
  // the stream and the kernels that deal their tiles dynamically draw from it; others ignore it.
  int* tile_counter = nullptr;
  // The fixed-length forward's tail split (api/fwd_tail_split.hpp), set by forward's workspace form:
  // pieces > 1 with a workspace of the plan's bytes. The launcher re-derives the split tiles from
  // its own tile count and grid, and refuses a workspace smaller than that layout needs.
  int tail_split_pieces = 1;
  void* tail_split_workspace = nullptr;
  std::size_t tail_split_workspace_bytes = 0;

  // A paged K/V cache (set only by the KV-cache call's forward route, with seqused_k): k and v are
  // (num_pages, page_size, heads_kv, head_dim) with k_stride/v_stride (page, row in page, head),
  // seqlen_k is the capacity max_pages * page_size, and key j of sequence b lives in row
  // j % page_size of page page_table[b * page_table_stride + j / page_size]. The varlen kernels
  // read it with one TMA box per key tile, so page_size must be a multiple of the key tile.
  const int32_t* page_table = nullptr;
  int64_t page_table_stride = 0, page_size = 0, num_pages = 0;

  HOPATTN_HOST_DEVICE int64_t group() const { return heads_q / heads_kv; }  // query heads sharing one K/V head
  HOPATTN_HOST_DEVICE bool empty() const { return batch == 0 || seqlen_q == 0 || heads_q == 0; }
  HOPATTN_HOST_DEVICE bool varlen() const { return cu_seqlens_q != nullptr; }
  HOPATTN_HOST_DEVICE bool paged() const { return page_table != nullptr; }
  HOPATTN_HOST_DEVICE bool masked() const { return window_left >= 0 || window_right >= 0; }
};

// The keys [begin, end) that query row i of a sequence with sq queries and sk keys sees, under the
// normalised window (left, right) of AttnProblem: i + sk - sq - left <= j <= i + sk - sq + right,
// within [0, sk). Possibly empty (end <= begin). The references' arithmetic (host and device).
struct KeyRange {
  int64_t begin, end;
};
HOPATTN_HOST_DEVICE inline KeyRange visible_keys(int64_t i, int64_t sq, int64_t sk, int64_t left, int64_t right) {
  // Compared before subtracting/adding, so bounds up to 2^63 - 1 cannot overflow.
  const int64_t diag = i + sk - sq;
  const int64_t begin = left < 0 || left >= diag ? 0 : diag - left;
  const int64_t end = right < 0 || right >= sk - diag - 1 ? sk : diag + right + 1;
  return {begin, end};
}

// The validated backward problem: the forward problem's q, k, v, out, lse (and its causal/scale/GQA
// shape), plus dout like out and dq/dk/dv like q/k/v, each with (batch, seq, head) strides and a
// contiguous head_dim. Gradients are stored in `grad_dtype` (the inputs' dtype through the public
// API; kFP32 where the CPU reference is checked against finite differences).
struct AttnBackwardProblem {
  AttnProblem fwd;  // fwd.out and fwd.lse: read by the GPU path; the CPU reference recomputes both
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  DType grad_dtype = DType::kFP32;
  bool deterministic = false;
  int64_t do_stride[3] = {0, 0, 0};
  int64_t dq_stride[3] = {0, 0, 0};
  int64_t dk_stride[3] = {0, 0, 0};
  int64_t dv_stride[3] = {0, 0, 0};
};

// The validated FP8 forward problem. `base` describes the attention with base.dtype the output's
// (bf16/fp16) and base.q/base.k the e4m3 tensors (base.v unused); the kernel reads V^T from `vt`
// (sm90/fp8/layout.hpp). Descales: element (b, h, blk) at b*s[0] + h*s[1] + blk*s[2], with s[2] = 0
// when there is one per head; a null pointer means 1.
struct Fp8AttnProblem {
  AttnProblem base;
  const void* vt = nullptr;  // (batch, heads_kv, head_dim, vt_padded_seqlen(seqlen_k)) e4m3, contiguous
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t q_descale_stride[3] = {0, 0, 0};
  int64_t k_descale_stride[3] = {0, 0, 0};
  int64_t v_descale_stride[2] = {0, 0};
  // 0: 128-key tiles, K descales per 128 rows (kQuantBlock) or per head. fp8::kWideKeyBlock (head_dim
  // 128, fixed length; attention_fp8, or forward_fp8 with per-head K descales): 224-key tiles, K
  // descales per 224 rows or per head.
  int key_tile = 0;
  // V^T holds V M (M = random_rotation(head_dim, o_rotation_seed)): the kernel writes O M^T.
  bool unrotate_o = false;
  uint32_t o_rotation_seed = 0;
  // e4m3 only for Q K^T: base.v is V in base.dtype (the output's 16-bit type) with its strides, P
  // is rounded to that type, and vt, v_descale and key_tile are unused (null, null, 0). Fixed-length.
  bool pv16 = false;
};

// kSm90Fp8: the FP8 forward (q/k/v e4m3, or 16-bit for attention_fp8; out bf16/fp16).
enum class Backend { kSm90, kCudaReference, kCpu, kSm90Fp8 };

// The softmax scale a call asked for, or the default 1/sqrt(head_dim).
inline float resolve_softmax_scale(const std::optional<float>& asked, int64_t head_dim) {
  return asked ? *asked : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// A tensor the caller left out (an optional argument): no data and no shape (ndim 0, or every size 0).
inline bool tensor_absent(const TensorRef& t) {
  if (t.data != nullptr) return false;
  if (t.ndim == 0) return true;
  for (int i = 0; i < 4; ++i)
    if (t.sizes[i] != 0) return false;
  return true;
}

// The window checks of every entry point that takes one: left and right >= -1, and with causal
// right -1 or 0. On success stores the normalised bounds (-1 or >= 0; causal: right = 0).
Result normalise_window(const Window& w, bool causal, int64_t* left, int64_t* right);

// softcap: finite and >= 0 (0 = off). On sm90 a softcapped problem runs its own (local) kernels:
// ws/fwd_softcap_launch.cuh, bwd/softcap_main.cuh; the FP8 forward has none.
Result check_softcap(float softcap);

// The score of scale * q.k under the problem's softcap (identity when it is 0): the references'.
inline double capped_score(double scaled_dot, double softcap) {
  return softcap > 0 ? softcap * std::tanh(scaled_dot / softcap) : scaled_dot;
}

// Checks every argument; on success fills *problem. Messages name the argument ("q.sizes[3]").
Result validate_forward(const ForwardArgs& args, Backend backend, AttnProblem* problem);

// The same for backward (backend kSm90 or kCpu): q/k/v/out checked as in validate_forward, then
// dout like out, dq/dk/dv like q/k/v, lse required for kSm90 (optional for kCpu).
Result validate_backward(const BackwardArgs& args, Backend backend, AttnBackwardProblem* problem);

// One (batch, seqlen, heads, head_dim) tensor's layout rules as validate_forward applies them
// (4 dims, non-negative sizes and strides, contiguous head_dim, non-null data, and for the GPU
// backends 16-byte aligned base and leading strides). Messages name it `name`.
Result check_tensor_layout(const char* name, const TensorRef& t, Backend backend);

// FP8: the forward checks (Backend::kSm90Fp8), then the descales (shape, fp32, contiguous, aligned).
Result validate_forward_fp8(const Fp8ForwardArgs& args, Fp8AttnProblem* problem);
// attention_fp8: q/k/v/out 16-bit as forward, head_dim a power of two when incoherent.
Result validate_attention_fp8(const Fp8AttentionArgs& args, AttnProblem* problem);
// quantize_fp8: in 16-bit (batch, seqlen, heads, head_dim), out e4m3 of the same sizes, descale fp32
// (batch, heads, nblocks) contiguous.
Result validate_quantize_fp8(const Fp8QuantizeArgs& args);

// The validated varlen forward problem (VarlenForwardArgs): packed (total, heads, head_dim) q/k/v/out
// with (token, head) strides and a contiguous head_dim; lse (heads_q, total_q) contiguous or null;
// the int32 index arrays as raw pointers (host memory for the CPU reference, device memory for the
// kernel to come). Sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1) of q (the first
// seqused_q[b] of them when seqused_q is non-null), keys likewise.
struct VarlenProblem {
  int64_t batch = 0, total_q = 0, total_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  DType dtype = DType::kBF16;
  bool causal = false;
  float scale = 1.f;
  int64_t window_left = -1, window_right = -1;  // normalised as AttnProblem's
  float softcap = 0.f;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // (heads_q, total_q) contiguous, or null

  // Strides of dims (token, head); the head_dim stride is 1.
  int64_t q_stride[2] = {0, 0};
  int64_t k_stride[2] = {0, 0};
  int64_t v_stride[2] = {0, 0};
  int64_t o_stride[2] = {0, 0};

  const int32_t* cu_seqlens_q = nullptr;  // (batch + 1)
  const int32_t* cu_seqlens_k = nullptr;  // (batch + 1)
  const int32_t* seqused_q = nullptr;     // (batch), or null
  const int32_t* seqused_k = nullptr;     // (batch), or null

  HOPATTN_HOST_DEVICE int64_t group() const { return heads_q / heads_kv; }
  HOPATTN_HOST_DEVICE bool empty() const { return batch == 0 || heads_q == 0; }
};

// Checks every varlen argument; on success fills *problem. Shapes, dtypes, strides and the index
// tensors' form are checked for any backend. The values of cu_seqlens/seqused (cu_seqlens[0] == 0,
// non-decreasing, last value <= total tokens, every length <= max_seqlen, seqused[b] in
// [0, length]) are checked only for Backend::kCpu, where they are host memory; on the GPU reading
// them needs a device-to-host copy, so those checks will live in a debug-checks mode there.
// Messages name the argument and index ("cu_seqlens_q[3]=10 is less than cu_seqlens_q[2]=12 ...").
Result validate_forward_varlen(const VarlenForwardArgs& args, Backend backend, VarlenProblem* problem);

// The value checks validate_forward_varlen runs for the CPU backend, on host copies of the index
// arrays (cu_q/cu_k: batch + 1 entries; used_q/used_k: batch entries or null). forward_varlen's
// check_index_values mode copies the device arrays and calls this.
Result check_varlen_index_values(const VarlenProblem& p, const int32_t* cu_q, const int32_t* cu_k,
                                 const int32_t* used_q, const int32_t* used_k);

// The varlen problem as the fixed-length kernels' AttnProblem (the fields documented there).
AttnProblem to_attn_problem(const VarlenProblem& p);

// VarlenBackwardArgs: the forward checks (Backend::kSm90) on q/k/v/out/lse and the index tensors,
// lse required, dout like out and dq/dk/dv like q/k/v; fills the problem with varlen fields set.
Result validate_backward_varlen(const VarlenBackwardArgs& args, VarlenProblem* fwd, AttnBackwardProblem* problem);

}  // namespace hopattn
