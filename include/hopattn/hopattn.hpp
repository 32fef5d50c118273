// hopattn public C++ API: exact attention O = softmax(scale * Q K^T) V for NVIDIA Hopper (sm_90a),
// plus a CPU reference backend with the same arguments. Callers own every buffer and the stream;
// nothing here allocates device memory or synchronises the host on the forward path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

typedef struct CUstream_st* cudaStream_t;  // avoids pulling cuda_runtime.h into user code

namespace hopattn {

enum class Status : int {
  kSuccess = 0,
  kInvalidArgument = 1,    // a shape, stride, pointer or value is wrong; the message names it
  kUnsupported = 2,        // valid attention, but not built or not implemented (head dim, dtype)
  kUnsupportedDevice = 3,  // no CUDA device, or not a Hopper (sm_90) one
  kCudaError = 4,          // a CUDA call or launch failed; the message holds cudaGetErrorString
};

enum class DType : int {
  kBF16 = 0,
  kFP16 = 1,
  kFP32 = 2,  // accepted by the CPU reference only (numpy has no bf16)
  kInt32 = 3,  // index tensors only (cu_seqlens, seqused); never a q/k/v/out/lse dtype
  kE4M3 = 4,   // fp8 e4m3fn (OCP "fn": no infinities, max 448): q/k/v of forward_fp8 and quantize_fp8 only
};

const char* dtype_name(DType t);
std::size_t dtype_size(DType t);

// A strided view of up to 4 dimensions. Sizes and strides are in elements; strides may be any
// non-negative values for the leading dims, but the last dim must be contiguous (stride 1).
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  int ndim = 0;
  int64_t sizes[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};
};

// A contiguous (row-major) view; the usual way to describe a freshly allocated tensor.
TensorRef make_tensor(void* data, DType dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
TensorRef make_tensor(void* data, DType dtype, int64_t d0, int64_t d1, int64_t d2);

// Sliding-window (local) attention, FlashAttention's window_size = (left, right): query row i sees
// key j iff i + sk - sq - left <= j <= i + sk - sq + right (sq, sk: the sequence's lengths, so the
// window is bottom-right aligned like causal). -1 leaves that side unbounded; (-1, -1) is full
// attention. causal is right = 0: with causal set, right must be -1 or 0. A row whose window holds
// no key gets out = 0 and lse = -inf (and zero gradients). Forward and backward, fixed-length and
// varlen, and the KV-cache call (KvCacheArgs::window, sk = the sequence's cache length after the
// append); not the FP8 calls.
struct Window {
  int64_t left = -1, right = -1;
};

struct ForwardArgs {
  TensorRef q;    // (batch, seqlen_q, heads_q, head_dim)
  TensorRef k;    // (batch, seqlen_k, heads_kv, head_dim); heads_q % heads_kv == 0 (GQA/MQA)
  TensorRef v;    // (batch, seqlen_k, heads_kv, head_dim)
  TensorRef out;  // (batch, seqlen_q, heads_q, head_dim), same dtype as q
  // (batch, heads_q, seqlen_q) fp32, contiguous; natural-log sum of exp of scaled scores.
  // Optional: leave lse.data null to skip it. A row that sees no key gets -inf (and zeros in out).
  TensorRef lse;
  bool causal = false;  // bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim); must be finite and > 0
  Window window;                       // default: none
  // Softcapping (Gemma 2, FlashAttention's softcap): scores become softcap * tanh(scale * q.k /
  // softcap) before the softmax; 0 (the default) leaves them alone. Finite and >= 0. Forward and
  // backward, fixed-length and varlen; not the FP8 or KV-cache calls.
  float softcap = 0.f;
};

struct Result {
  Status status = Status::kSuccess;
  std::string message;  // empty on success; otherwise names the offending argument
  bool ok() const { return status == Status::kSuccess; }
};

// Hopper forward pass on device memory, enqueued on `stream`. Returns at once (asynchronous).
Result forward(const ForwardArgs& args, cudaStream_t stream = nullptr);

// The same call with a workspace: forward_workspace_size(args) bytes of device memory (0 means no
// workspace is needed, or invalid args), 256-byte aligned, with any content (the call zeroes what
// it uses, on `stream`), not shared with a call running concurrently on another stream. With it,
// an unmasked fixed-length call whose query tiles do not fill the persistent grid's last round
// evenly cuts that round's tiles along their keys into pieces that fill the idle SMs, and merges
// them (docs/design-tail-split.md); problems of fewer tiles than SMs split all their tiles. The
// output differs from the call without a workspace by rounding only, and is bitwise the same from
// run to run. The size follows the current device's SM count. The Python package
// (hopattn.attention) passes one.
std::size_t forward_workspace_size(const ForwardArgs& args);
Result forward(const ForwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream = nullptr);

// The CPU reference: the same contract on host memory, double accumulation, any shape and dtype.
Result forward_cpu(const ForwardArgs& args);

// The CUDA reference kernel: device memory, fp64 accumulation, one block per query row; slow and
// obviously right. Used by tests as the oracle at sizes the CPU reference is too slow for.
Result forward_reference_cuda(const ForwardArgs& args, cudaStream_t stream = nullptr);

// ---- backward ----------------------------------------------------------------------------------
// Gradients of the forward call that produced `out` and `lse`: dq, dk, dv given dout.
struct BackwardArgs {
  TensorRef q, k, v;  // exactly as passed to forward
  TensorRef out;      // the forward output (batch, seqlen_q, heads_q, head_dim)
  TensorRef dout;     // (batch, seqlen_q, heads_q, head_dim), dtype of q; any strides, contiguous last dim
  TensorRef lse;      // (batch, heads_q, seqlen_q) fp32 contiguous, from forward: required on the GPU
  TensorRef dq;       // like q (dtype of q); written, not accumulated into
  TensorRef dk;       // like k; with GQA, summed over the query heads of each group
  TensorRef dv;       // like v
  bool causal = false;                 // must match the forward call
  std::optional<float> softmax_scale;  // must match the forward call
  Window window;                       // must match the forward call
  float softcap = 0.f;                 // must match the forward call
  // Bitwise-identical gradients run to run. dk/dv always are; dq is summed over key blocks with
  // fp32 atomics, which this flag orders (at a speed cost, see docs/BENCHMARKS.md).
  bool deterministic = false;
};

// Device scratch the backward pass needs, in bytes (fp32 dq accumulator, the softmax statistics,
// ordering semaphores). The caller allocates it (256-byte aligned); its contents need no init.
std::size_t backward_workspace_size(const BackwardArgs& args);

// Hopper backward pass, enqueued on `stream`; asynchronous, no allocation, no host sync.
// `workspace` must hold backward_workspace_size(args) bytes.
Result backward(const BackwardArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream = nullptr);

// The CPU reference of backward on host memory (double accumulation). Reads q, k, v, dout; out and
// lse may be left empty (it recomputes both). Any dtype the CPU forward takes.
Result backward_cpu(const BackwardArgs& args);

// Whether the current CUDA device can run the Hopper kernels (compute capability 9.0).
Result check_device();

// Head dims and dtypes compiled into this build, e.g. "fwd:bf16:64,fwd:bf16:128,...".
const char* build_instantiations();
const char* version();

// ---- variable-length batches (issue 6) ---------------------------------------------------------
// Sequences of different lengths packed along the token dim, as in FlashAttention-3's varlen API.
// Sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1) of q (only the first
// seqused_q[b] of them when seqused_q is given); its keys/values likewise from cu_seqlens_k and
// seqused_k. Causal is bottom-right aligned per sequence: query i of sequence b sees key j iff
// j <= i + len_k(b) - len_q(b). Rows beyond seqused_q, and rows that see no key, get out = 0 and
// lse = -inf; rows of q beyond cu_seqlens_q[batch] are not written. Zero-length sequences are fine.
struct VarlenForwardArgs {
  TensorRef q;    // (total_q, heads_q, head_dim)
  TensorRef k;    // (total_k, heads_kv, head_dim); heads_q % heads_kv == 0 (GQA/MQA)
  TensorRef v;    // (total_k, heads_kv, head_dim)
  TensorRef out;  // (total_q, heads_q, head_dim), same dtype as q
  TensorRef lse;  // (heads_q, total_q) fp32, contiguous; optional (leave lse.data null)
  // int32, 1-dim, (batch + 1) each: prefix sums of the sequence lengths, starting at 0.
  TensorRef cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // upper bounds of the per-sequence lengths
  // Optional int32, 1-dim, (batch): use only the first seqused[b] tokens of sequence b.
  TensorRef seqused_q, seqused_k;
  bool causal = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim); must be finite and > 0
  Window window;                       // per sequence, bottom-right aligned like causal
  float softcap = 0.f;                 // as ForwardArgs
  // GPU only (forward_varlen): copy cu_seqlens/seqused to the host, synchronising `stream`, and
  // check their values as forward_varlen_cpu does. Off by default because it costs a device-to-host
  // copy and a sync per call; also switched on for every call by the environment variable
  // HOPATTN_DEBUG_CHECKS=1. Without it, wrong index values give wrong rows, never out-of-bounds
  // writes outside q.sizes[0] rows of out (the kernel's TMA is bounded by the tensors' extents),
  // but a max_seqlen_q below a real length leaves that sequence's later rows unwritten.
  bool check_index_values = false;
};

// The Hopper varlen forward pass (device memory, the index tensors too), enqueued on `stream`.
// Same kernel as forward(): one launch for the whole batch. A sequence's last key tile ends at its
// last (used) key, so rows past it are not read, except for sequences shorter than one key tile
// (80-176 keys): their tile reads on into the next rows, masked out of the scores; V's must be
// finite there (0 * inf is NaN in P V), as with FlashAttention-3 (which reads past every sequence).
Result forward_varlen(const VarlenForwardArgs& args, cudaStream_t stream = nullptr);

// The same call with a workspace: forward_varlen_workspace_size(args) bytes of device memory (256
// today, for any valid args; 0 means invalid args), 256-byte aligned, with any content (the call
// zeroes what it uses, on `stream`), not shared with a call running concurrently on another stream.
// It holds a tile counter: with it, the head_dim-64 causal kernels hand each persistent CTA its
// next tile as it frees up (a dynamic order) instead of a fixed round-robin, which evens out the
// CTAs' loads on mixed lengths (docs/design-varlen.md). The result is bitwise the same; only the speed differs.
// The Python package (hopattn.varlen_attention) always passes one.
std::size_t forward_varlen_workspace_size(const VarlenForwardArgs& args);
Result forward_varlen(const VarlenForwardArgs& args, void* workspace, std::size_t workspace_bytes,
                      cudaStream_t stream = nullptr);

// Gradients of a forward_varlen call: the same index tensors and options, plus dout like out and
// dq/dk/dv like q/k/v (packed; written for every row of every sequence, rows past seqused get 0,
// rows past cu_seqlens[batch] are not written, except that a call with no query row or no key row
// at all zero-fills the whole dk/dv or dq). lse (heads_q, total_q) from forward_varlen is required.
struct VarlenBackwardArgs {
  TensorRef q, k, v, out, dout, lse;
  TensorRef dq, dk, dv;
  TensorRef cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  TensorRef seqused_q, seqused_k;
  bool causal = false;
  std::optional<float> softmax_scale;
  Window window;                    // must match the forward call
  float softcap = 0.f;              // must match the forward call
  bool deterministic = false;       // as BackwardArgs
  bool check_index_values = false;  // as VarlenForwardArgs
};
std::size_t backward_varlen_workspace_size(const VarlenBackwardArgs& args);
Result backward_varlen(const VarlenBackwardArgs& args, void* workspace, std::size_t workspace_bytes,
                       cudaStream_t stream = nullptr);

// The CPU reference of the varlen forward pass: host memory (the index tensors too), double
// accumulation, any dtype forward_cpu takes. It reads cu_seqlens/seqused and checks their values
// (starts at 0, non-decreasing, within the token counts and max_seqlen, seqused in range); the GPU
// entry point does so only with check_index_values (a device-to-host copy).
Result forward_varlen_cpu(const VarlenForwardArgs& args);

// ---- FP8 (e4m3) forward (issue 4) --------------------------------------------------------------
// FlashAttention-3's FP8 path: Q, K, V in e4m3 with fp32 descale factors, P rounded to e4m3 in
// registers, O and the softmax statistics in fp32, out in bf16/fp16. Descales multiply the stored
// values back: q_true = q_e4m3 * q_descale. Quantisation blocks are kFp8BlockRows (128) rows of one
// (batch, head): the kernel's query and key tiles.
constexpr int64_t kFp8BlockRows = 128;

// The one-call path: bf16/fp16 q, k, v in, out in the same dtype. Inside, one fused kernel per
// tensor rotates Q and K by M = diag(random signs) * Hadamard / sqrt(head_dim) (incoherent
// processing; Q M (K M)^T = Q K^T, so the softmax is unchanged while outlier features spread over
// all coordinates) and quantises them with one scale per 128-row block (block_quant) or per
// (batch, head). V is quantised per (batch, kv head); with incoherent and rotate_v it is rotated by
// the same M first and the kernel multiplies O by M^T before writing it (P (V M) M^T = P V). Off by
// default: on the paper's outlier inputs it left the error unchanged (docs/perf-notes.md) and costs
// a pass over V. `seed` picks the signs: the same seed gives the same M
// (hopattn.fp8_reference.rotation_signs is its definition).
struct Fp8AttentionArgs {
  TensorRef q, k, v;  // bf16 or fp16, as ForwardArgs (head_dim 64, 128 or 256)
  TensorRef out;      // like q (same dtype)
  TensorRef lse;      // optional, as ForwardArgs
  bool causal = false;
  std::optional<float> softmax_scale;
  bool incoherent = true;   // rotate Q and K before quantising
  bool block_quant = true;  // one scale per 128-row block of Q and K; false: per (batch, head)
  bool rotate_v = false;    // with incoherent: rotate V as well (O is rotated back in the kernel)
  uint32_t seed = 0;
  // false: only Q K^T runs in e4m3. V stays in the inputs' 16-bit type and P is rounded to it, so
  // P V runs at the 16-bit rate and V needs no pre-pass. On the paper's outlier inputs this removes
  // V's e4m3 rounding, ~40% of the remaining squared error (docs/perf-notes.md). Not with rotate_v.
  bool quantize_v = true;
};

// Device scratch attention_fp8 needs (the e4m3 copies of q, k and v and their descales).
std::size_t attention_fp8_workspace_size(const Fp8AttentionArgs& args);
Result attention_fp8(const Fp8AttentionArgs& args, void* workspace, std::size_t workspace_bytes,
                     cudaStream_t stream = nullptr);

// The lower-level call for callers who quantise elsewhere: e4m3 q, k, v and their descales.
// Descale tensors are fp32 and contiguous; a null one means 1.
//   q_descale: (batch, heads_q, nq), nq = 1 (one per head) or ceil(seqlen_q / 128) (per block)
//   k_descale: (batch, heads_kv, nk), nk = 1 or ceil(seqlen_k / 128)
//   v_descale: (batch, heads_kv)
// FP8 WGMMA reads both operands K-major, so V is re-laid out (transposed) into the workspace by a
// small pre-pass before the attention kernel; forward_fp8_workspace_size says how much.
// v may instead be bf16/fp16 in out's dtype, with no v_descale: then only Q K^T runs in e4m3, V is
// read in place, P is rounded to that dtype (attention_fp8's quantize_v = false) and no workspace
// is needed.
struct Fp8ForwardArgs {
  TensorRef q;  // (batch, seqlen_q, heads_q, head_dim) e4m3
  TensorRef k;  // (batch, seqlen_k, heads_kv, head_dim) e4m3
  TensorRef v;  // (batch, seqlen_k, heads_kv, head_dim) e4m3
  TensorRef q_descale, k_descale, v_descale;
  TensorRef out;  // (batch, seqlen_q, heads_q, head_dim), bf16 or fp16
  TensorRef lse;  // optional, as ForwardArgs
  bool causal = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim), applied to the true (descaled) q.k
};
std::size_t forward_fp8_workspace_size(const Fp8ForwardArgs& args);
Result forward_fp8(const Fp8ForwardArgs& args, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream = nullptr);

// The rotate-and-quantise kernel on its own: in (batch, seqlen, heads, head_dim) bf16/fp16 ->
// out e4m3 of the same shape, descale fp32 (batch, heads, nblocks) contiguous with nblocks =
// ceil(seqlen / 128) when block_quant, else 1. With rotate, rows are multiplied by M(seed) first
// (head_dim a power of two). Each block's |max| maps to 448. Reads `in` once (twice without
// block_quant: the per-head maximum is needed before the first value is written).
struct Fp8QuantizeArgs {
  TensorRef in, out, descale;
  bool rotate = true;
  bool block_quant = true;
  uint32_t seed = 0;
};
Result quantize_fp8(const Fp8QuantizeArgs& args, cudaStream_t stream = nullptr);

// ---- FP8 on packed variable-length batches (issue 6) ---------------------------------------------
// attention_fp8 and forward_fp8 for the packed layout of VarlenForwardArgs: q/k/v/out (total,
// heads, head_dim), lse (heads_q, total_q), cu_seqlens/seqused/max_seqlen and check_index_values as
// there. "batch" below is the number of sequences. Quantisation blocks are 128 rows of one
// (sequence, head), counted from the sequence's first token (block j = its rows [128 j, 128 j + 128)),
// so a block never mixes sequences; without block_quant one scale per (sequence, head). The kernel
// reads no value of another sequence: unlike the 16-bit forward_varlen, V rows outside the
// sequences need not be finite. No sliding window or softcap (the FP8 kernel has neither).
// The workspace (the *_workspace_size calls) holds the e4m3 copies, V^T and the descales, and a
// 256-byte tile counter for the dynamic tile order of forward_varlen's workspace form; like there,
// its content on entry does not matter, and two calls running at once need two workspaces.
struct Fp8VarlenAttentionArgs {
  TensorRef q, k, v;  // bf16 or fp16, packed (head_dim 64, 128 or 256)
  TensorRef out;      // like q
  TensorRef lse;      // optional, (heads_q, total_q) fp32
  TensorRef cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  TensorRef seqused_q, seqused_k;
  bool causal = false;
  std::optional<float> softmax_scale;
  bool incoherent = true;   // as Fp8AttentionArgs
  bool block_quant = true;  // as Fp8AttentionArgs, per sequence
  bool rotate_v = false;    // as Fp8AttentionArgs
  uint32_t seed = 0;
  bool check_index_values = false;  // as VarlenForwardArgs
};
std::size_t attention_fp8_varlen_workspace_size(const Fp8VarlenAttentionArgs& args);
Result attention_fp8_varlen(const Fp8VarlenAttentionArgs& args, void* workspace, std::size_t workspace_bytes,
                            cudaStream_t stream = nullptr);

// The lower-level packed call: e4m3 q, k, v and their descales (fp32, contiguous; null means 1):
//   q_descale: (batch, heads_q, nq), nq = 1 or ceil(max_seqlen_q / 128), block j of sequence b
//   k_descale: (batch, heads_kv, nk), nk = 1 or ceil(max_seqlen_k / 128)
//   v_descale: (batch, heads_kv)
struct Fp8VarlenForwardArgs {
  TensorRef q, k, v;  // e4m3, packed
  TensorRef q_descale, k_descale, v_descale;
  TensorRef out;  // (total_q, heads_q, head_dim) bf16 or fp16
  TensorRef lse;  // optional, (heads_q, total_q) fp32
  TensorRef cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  TensorRef seqused_q, seqused_k;
  bool causal = false;
  std::optional<float> softmax_scale;
  bool check_index_values = false;
};
std::size_t forward_fp8_varlen_workspace_size(const Fp8VarlenForwardArgs& args);
Result forward_fp8_varlen(const Fp8VarlenForwardArgs& args, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream = nullptr);

// ---- KV-cache decoding (issue 6) ---------------------------------------------------------------
// Attention of a few new query tokens per sequence against a key/value cache, FlashAttention-3's
// flash_attn_with_kvcache (forward only). The cache is contiguous (one max_seqlen_k slab per
// sequence) or paged (fixed-size pages named by a page table). Optionally the call first appends
// k_new/v_new to the cache in place. Sequence b attends to its first len_k(b) = cache_seqlens[b] +
// seqlen_new cached keys (the appended ones included). Causal is bottom-right aligned per sequence:
// query i of b sees key j iff j <= i + len_k(b) - seqlen_q; a sliding window (`window`) is
// bottom-right aligned the same way, with sk = len_k(b). A row that sees no key gets out = 0 and
// lse = -inf. The keys of each (batch, kv head) are split over num_splits thread blocks (split-KV,
// "flash-decoding") whose partial results a second kernel merges; the workspace holds them.
struct KvCacheArgs {
  TensorRef q;  // (batch, seqlen_q, heads_q, head_dim), bf16/fp16 (CPU: fp32 too)
  // Contiguous: (batch, max_seqlen_k, heads_kv, head_dim). Paged (page_table given):
  // (num_pages, page_size, heads_kv, head_dim), any page_size >= 1. Same dtype as q;
  // heads_q % heads_kv == 0 (GQA/MQA). Any strides with a contiguous head_dim.
  TensorRef k_cache;
  TensorRef v_cache;  // like k_cache (same sizes)
  TensorRef cache_seqlens;  // int32 (batch), contiguous: tokens already in sequence b's cache
  // Optional int32 (batch, max_pages), contiguous rows: entry [b][p] is the page of k_cache/v_cache
  // holding tokens p*page_size .. (p+1)*page_size - 1 of sequence b. Only the entries covering the
  // first len_k(b) tokens are read; the others may hold anything (e.g. -1).
  TensorRef page_table;
  // Optional, both or neither: (batch, seqlen_new, heads_kv, head_dim), dtype of q. Written into the
  // cache at positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 of sequence b (IN PLACE:
  // the call modifies k_cache and v_cache), then attended to with the rest of the cache.
  // cache_seqlens itself is not updated.
  TensorRef k_new, v_new;
  TensorRef out;  // like q
  TensorRef lse;  // optional fp32 (batch, heads_q, seqlen_q), contiguous
  bool causal = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim); must be finite and > 0
  // Sliding window as ForwardArgs::window, per sequence with sk = len_k(b): query i of b sees key j
  // iff i + len_k(b) - seqlen_q - left <= j <= i + len_k(b) - seqlen_q + right (-1: that side
  // unbounded; with causal, right must be -1 or 0). The GPU kernel reads only the keys some row's
  // window reaches: a 4k window over a 128k cache costs about 4k keys, not 128k.
  Window window;  // default: none
  // Softcapping as ForwardArgs::softcap (scores become softcap * tanh(scale * q.k / softcap)); 0,
  // the default, is off. Finite and >= 0.
  float softcap = 0.f;
  // Key splits per (batch, kv head): 0 picks them from the batch, heads, head_dim and cache
  // capacity so the thread blocks fill whole waves of the GPU (sm90/decode/plan.hpp); >= 1 forces
  // that many (clamped to the 64-key blocks of the keys one sequence can have in its window, at most
  // the cache capacity, and to 128). Any value gives the same result up to fp32 rounding, and a
  // given value gives bitwise identical results run to run.
  int num_splits = 0;
  // GPU only: copy cache_seqlens and the page table to the host (synchronising `stream`) and check
  // the values as attention_with_kvcache_cpu always does: cache_seqlens[b] >= 0,
  // cache_seqlens[b] + seqlen_new <= capacity (max_seqlen_k, or max_pages * page_size), and every
  // page_table entry the call reads in [0, num_pages). Also on for every call with the environment
  // variable HOPATTN_DEBUG_CHECKS=1. Without the check, bad values give wrong results but never
  // reads or writes outside the tensors: lengths are clamped to [0, capacity], a page outside
  // [0, num_pages) is clamped or read as zeros, and rows appended past the capacity are dropped.
  bool check_index_values = false;
};

// Bytes of device workspace attention_with_kvcache needs for `args` on the current device: the
// splits' partial outputs and lse (fp32), or the prefill route's key counts; else 0 (and if invalid).
std::size_t attention_with_kvcache_workspace_size(const KvCacheArgs& args);

// The KV-cache kernels (device memory, cache_seqlens and page_table too), enqueued on `stream`: the
// append (if k_new/v_new), then split-KV decoding (attention, merge), or for chunked prefill (32+
// rows; contiguous, or pages of whole key tiles: api/kvcache_route.hpp) the forward kernel. `workspace`:
// attention_with_kvcache_workspace_size(args) bytes, 256-byte aligned (null if 0). Async unless checks.
Result attention_with_kvcache(const KvCacheArgs& args, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream = nullptr);

// The CPU reference on host memory (double accumulation): the same semantics, the in-place append
// included; always checks the index values. num_splits is accepted and ignored.
Result attention_with_kvcache_cpu(const KvCacheArgs& args);

}  // namespace hopattn
