// Tile sizes, pipeline depth, warp-group counts and the optimisation switches of the warp-specialised
// (FlashAttention-3) forward kernel: the one place that decides them per (dtype, head dim, causal).
// Everything else in src/sm90/ws/ derives its shapes and register budgets from FwdWsConfig.
#pragma once

// The N = 80/176/... WGMMA atoms live behind this switch; it must be seen before CuTe's
// mma_sm90.hpp. Kernel code static_asserts that the selected atom really spans kBlockN.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "hopattn/hopattn.hpp"
#include "sm90/ws/key_tile.hpp"

namespace hopattn::sm90::ws {

template <DType kDType>
struct ElementOf;
template <>
struct ElementOf<DType::kBF16> { using type = cutlass::bfloat16_t; };
template <>
struct ElementOf<DType::kFP16> { using type = cutlass::half_t; };
template <>
struct ElementOf<DType::kE4M3> { using type = cutlass::float_e4m3_t; };

// Which of the paper's three steps are on, as bits (C++17 has no class-type template arguments).
// Each is a separate switch so the gain of each step can be measured.
enum StageBits : unsigned {
  kBitPersistent = 1u,      // Stage B: grid = #SMs, static tile scheduler
  kBitIntraWGOverlap = 2u,  // Stage C: QK^T of block j+1 issued before softmax of block j
  kBitPingPong = 4u,        // Stage C: consumer warpgroups take turns issuing GEMMs
  kBitSeparateO = 8u,       // O staged in its own smem buffer (where it fits), so the next tile's
                            // Q load overlaps this tile's epilogue instead of waiting for it
  kBitEarlyQ = 16u,         // with a separate O: release Q after the tile's last S GEMM, so the
                            // next Q load also overlaps the last softmax and P V
  kBitKLead = 32u,          // producer loads K one block ahead of V: the overlapped schedule needs
                            // K_{j+1} (for S) before V_j (for P V)
  kBitSnake = 64u,          // persistent round-robin reverses direction every round, so the CTA
                            // that drew the longest causal tile draws the shortest next
  kBitOInV = 128u,          // where no separate O fits: O staged in V's buffer (drained at the tile's
                            // end) instead of Q's, so the next Q and first K load under the epilogue
  kBitCluster = 256u,       // non-causal fixed-length: CTA pairs (a 2-CTA cluster) run adjacent query
                            // tiles of one head and split each K/V load, TMA-multicast to both
                            // (FwdWsConfig::kClusterM). Not in kStageE: the launch asks for it.
};
inline constexpr unsigned kStageA = 0u;
inline constexpr unsigned kStageB = kBitPersistent;
inline constexpr unsigned kStageC = kBitPersistent | kBitIntraWGOverlap | kBitPingPong;
inline constexpr unsigned kStageD = kStageC | kBitSeparateO;
inline constexpr unsigned kStageE = kStageD | kBitEarlyQ | kBitKLead | kBitSnake | kBitOInV;

// The schedule switches every configuration derives from its kFlags the same way.
template <unsigned kFlags>
struct WsSchedule {
  static constexpr bool kPersistent = (kFlags & kBitPersistent) != 0;
  static constexpr bool kIntraWGOverlap = (kFlags & kBitIntraWGOverlap) != 0;
  // Ping-pong hands the tensor cores from one warpgroup to the next at GEMM-issue points, which
  // only pays when each warpgroup issues its S and PV GEMMs together (the overlapped schedule).
  static constexpr bool kPingPong = (kFlags & kBitPingPong) != 0 && (kFlags & kBitIntraWGOverlap) != 0;
  static constexpr bool kKLead = (kFlags & kBitKLead) != 0 && kIntraWGOverlap;
  static constexpr bool kSnake = (kFlags & kBitSnake) != 0 && kPersistent;
};

// kBlockNOverride (0 = the default below) exists for tile-size searches (bench/fa3_stages.cu).
// kVarlen_: packed variable-length batches (forward_varlen). A separate kernel, because reading the
// sequence bounds per tile and the boundary stores cost the fixed-length kernels 2-5% when they
// were runtime branches (measured on the H200, docs/perf-notes.md).
// kLocal_ (with kCausal): a sliding window with run-time bounds (ws/mask.cuh). Also separate: as run-time
// bounds inside the causal kernel it cost d64 causal 4-12% (41 LDL/STL in its SASS, docs/design-window.md).
// kSoftcap_ (with kLocal_): scores capped as softcap * tanh(score / softcap) before the mask. Only the
// local kernels have it (a problem without a window runs them with unbounded run-time bounds), so a
// softcap costs 2 instantiations per (dtype, head dim) and none of the other kernels change: as a
// run-time branch it cost d64 causal 7-10% and 45 LDL/STL (commit 61f1ab7).
#ifndef HOPATTN_SOFTCAP_RCP_ON_FMA_OF5  // for builds that measure the share (perf-notes, session 47)
#define HOPATTN_SOFTCAP_RCP_ON_FMA_OF5 3
#endif
static_assert(HOPATTN_SOFTCAP_RCP_ON_FMA_OF5 >= 0 && HOPATTN_SOFTCAP_RCP_ON_FMA_OF5 <= 5,
              "HOPATTN_SOFTCAP_RCP_ON_FMA_OF5 counts scores out of every 5: 0 to 5");
#ifndef HOPATTN_SOFTCAP_RECIP_SCORE  // likewise: 0 builds the one_ffma form (kSoftcapRecipScore)
#define HOPATTN_SOFTCAP_RECIP_SCORE 1
#endif
#ifndef HOPATTN_SOFTCAP_FIXED_MAX  // likewise: 0 leaves the fixed-max kernels out (run_fwd_softcap)
#define HOPATTN_SOFTCAP_FIXED_MAX 1
#endif
// kFixedMax_ (with kSoftcap_, bf16, d64/d128): the softcap kernel without a running max
// (kSoftcapFixedMax); run_fwd_softcap launches it for caps up to 54.7 and the running-max kernel above.
template <DType kDType, int kHeadDim_, bool kCausal, unsigned kFlags = kStageE, int kBlockNOverride = 0,
          bool kVarlen_ = false, bool kLocal_ = false, bool kSoftcap_ = false, bool kFixedMax_ = false,
          int kBlockMOverride = 0>
struct FwdWsConfig : WsSchedule<kFlags> {
  static_assert(kHeadDim_ == 64 || kHeadDim_ == 128 || kHeadDim_ == 256, "head_dim must be 64, 128 or 256");
  static_assert(kDType == DType::kBF16 || kDType == DType::kFP16, "16-bit inputs only");
  using Element = typename ElementOf<kDType>::type;
  using OutElement = Element;
  static constexpr bool kFp8 = false;
  static constexpr bool kPv16 = false;
  using ElementV = Element;
  using Schedule = WsSchedule<kFlags>;
  using Schedule::kPersistent;
  using Schedule::kIntraWGOverlap;

  static constexpr int kHeadDim = kHeadDim_;
  // Query rows per CTA. Each consumer warpgroup owns 64 rows (the WGMMA M). d64 uses three
  // consumer warpgroups (192 rows) by default: its S/O fragments are small, so 160 registers per
  // consumer thread suffice and the third warpgroup amortises each K/V tile over more rows.
  // kBlockMOverride: 128 rows for short d64 fixed-length causal calls, which pad and mask less
  // (heuristics::d64_causal_query_tile picks them).
  static constexpr int kBlockM = kBlockMOverride != 0 ? kBlockMOverride : default_query_tile(kHeadDim);
  static_assert(kBlockM == 128 || kBlockM == 192, "two or three consumer warpgroups");
  // Keys per pipeline stage: default_key_tile (key_tile.hpp) says why each. d128 non-causal
  // launches also pick 128 or 160 by seqlen_k (d128_key_tile, fwd_ws_launch.cuh).
  static constexpr int kBlockN = kBlockNOverride != 0 ? kBlockNOverride : default_key_tile(kHeadDim, kCausal);
  static constexpr int kStages = 2;  // double-buffered K and V: one tile in use, one in flight

  static constexpr int kNumConsumerWG = kBlockM / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWG * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;  // + one producer warpgroup
  // setmaxnreg budgets: the producer only issues TMA, so it gives its registers to the consumers.
  // Totals: 128*24 + 256*240 = 64512 and 128*32 + 384*160 = 65536 <= 64K registers per SM.
  static constexpr int kProducerRegs = kNumConsumerWG == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kNumConsumerWG == 2 ? 240 : 160;

  static constexpr bool kCausalMask = kCausal;
  static constexpr bool kVarlen = kVarlen_;
  static constexpr bool kLocal = kCausal && kLocal_;
  static constexpr bool kSoftcap = kSoftcap_;
  static_assert(!kSoftcap || kLocal, "softcapping lives in the local (run-time window) kernels only");
  // The cap's arithmetic (ws/softmax.cuh, Softcap), d64/d128: of every 5 capped scores this many
  // take their reciprocal on the FMA pipe (on_fma), the rest on MUFU, with the cap's multiply folded
  // into one FFMA (one_ffma). Measured on an H100 against operator() everywhere (session 47,
  // perf-notes "The softcap forward"): d64 +5.6-6.9%, d128 +1.1-3.5%. 3 of 5 came from a model that
  // took these kernels for MUFU-bound; they are issue-bound, so the share is worth re-measuring
  // (HOPATTN_SOFTCAP_RCP_ON_FMA_OF5 overrides it for such builds). The d256 forward keeps
  // operator(): one_ffma read 1.2% slower there.
  static constexpr int kSoftcapRcpOnFmaOf5 = kHeadDim_ <= 128 ? HOPATTN_SOFTCAP_RCP_ON_FMA_OF5 : 0;
  static constexpr bool kSoftcapOneFfma = kHeadDim_ <= 128;
  // The softmax on -1 / (1 + e^(2y)) with scale 2 softcap and lse + softcap (Softcap::neg_recip):
  // one FFMA per score fewer than one_ffma (key loops d64 1514 -> 1446 instructions, d128 1531 -> 1466).
  static constexpr bool kSoftcapRecipScore = kSoftcap_ && kHeadDim_ <= 128 && HOPATTN_SOFTCAP_RECIP_SCORE;
  // No running max (OnlineSoftmax's kFixedMax, ws/fixed_max.hpp): the recip scores are bounded above,
  // so the row max, its shuffles and O's rescale go (key loops d64 1446 -> 1335, d128 1466 -> 1304).
  // bf16 only: its P has fp32's exponent range, where fp16's would overflow at 2^16.
  static constexpr bool kSoftcapFixedMax = kFixedMax_;
  static_assert(!kFixedMax_ || (kSoftcapRecipScore && kDType == DType::kBF16),
                "the fixed-max softmax needs the recip-score form's bounded scores and bf16's P");

  // Separate O buffer only where Q + 2 stages of K and V + O fit in 227 KB (minus ~1 KB for the
  // barriers): d64 and d128 causal do; d128 at N=176 and d256 do not, and reuse Q's buffer for O.
  static constexpr int kElementBytes = 2;
  static constexpr int kSmemWithSeparateO =
      (2 * kBlockM * kHeadDim + 2 * kStages * kBlockN * kHeadDim) * kElementBytes + 1024;
  static constexpr bool kSeparateO = (kFlags & kBitSeparateO) != 0 && kPersistent && kSmemWithSeparateO <= 227 * 1024;
  // kBitCluster: two CTAs of a cluster take query blocks 2u and 2u+1 of one (batch, head), whose
  // key blocks are the same (no mask), and each issues half of every K/V tile, multicast into both
  // CTAs' stages: the L2-to-SM traffic of K and V halves (FlashAttention-3's ClusterM = 2 for
  // 16-bit d >= 128 non-causal). The CTAs then move in lockstep, a stage being free only once both
  // have released it (PipelineTmaAsync's cluster arrivals). Fixed-length, unmasked, persistent.
  static constexpr int kClusterM =
      (kFlags & kBitCluster) != 0 && !kCausal && !kVarlen_ && !kLocal_ && WsSchedule<kFlags>::kPersistent ? 2 : 1;
  static_assert((kFlags & kBitCluster) == 0 || kClusterM == 2, "kBitCluster: fixed-length, unmasked, persistent");
  // Where no separate O fits, O goes through V's buffer (as FlashAttention-3's does) rather than
  // Q's: V is dead once both warpgroups' last P V has completed, so the producer can load the next
  // tile's Q and first K while O drains, and the next tile's first S GEMM runs under this epilogue
  // (Q's buffer made every tile wait for the last warpgroup's store and then a whole Q load).
  // Fixed-length, unwindowed, two warpgroups: the configurations measured. Causal at d256 only
  // (d64 and d128 causal have a separate O): the handshake's 3 LDL/STL in its key loop (session 43)
  // went with the uniform turn index, and its causal tiles are short, so the boundary weighs more.
  // With a cluster the other CTA's producer writes this CTA's V buffer too: the kernel then waits
  // for both CTAs' O stores (FwdWsKernel::kClusterOInV).
  static constexpr bool kOInV = (kFlags & kBitOInV) != 0 && kPersistent && !kSeparateO &&
                                (!kCausal || kHeadDim == 256) && !kVarlen_ && !kLocal_ && kBlockM == 128 &&
                                kBlockM * kHeadDim <= kStages * kBlockN * kHeadDim;
  // Q's buffer holds only Q: it can be released before the epilogue.
  static constexpr bool kOOutsideQ = kSeparateO || kOInV;
  static constexpr bool kEarlyQ = (kFlags & kBitEarlyQ) != 0 && kOOutsideQ;
  // Hold P's registers until the P V wait (mainloop.cuh, hold_p_registers), so that the softmax
  // overlaps the warpgroup's own P V. Measured (perf-notes, "P's registers held until the wait"):
  // +1-3% at d256 from 4k keys; level or up to 2% slower at d64 and d128. Only the fixed-length
  // d256 kernels that were measured: held, the local d256 kernels spill 17 LDL/STL in the key loop
  // (5-7 without), and the packed (varlen) ones were not timed.
  static constexpr bool kHoldP = kHeadDim == 256 && !kVarlen_ && !kLocal_;
  // The last round's tiles split along their keys (tail_split.hpp): fixed-length, unmasked,
  // persistent. Only there are all tiles equal, so that the round-robin's last round is the one
  // partial wave a static split can fill. Not d256: there the merge's code took the kernel from 32
  // to 532 bytes of spills (its 64x256 O is 128 of the 240 registers), and the paper grid's d256
  // calls never split (api/fwd_tail_split.cpp).
  // With a cluster too: piece p of split tile s is work index first + p * tiles + s, so when first
  // and tiles are even (launch_ws_config checks) a cluster's two indices are the same piece of the
  // two tiles of one pair, with the same key blocks.
  static constexpr bool kTailSplit = !kCausal && !kVarlen_ && WsSchedule<kFlags>::kPersistent && kHeadDim != 256;
  // Causal 192-row tiles (d64) aligned to the sequence's end (FwdMainloop::row_shift): the
  // padding rows of a seqlen that is no multiple of 192 go to the first tile, which sees the
  // fewest keys, instead of the last, which sees them all. Packed batches too (per sequence); not
  // with a run-time window.
  static constexpr bool kRowShift = kCausal && !kLocal_ && kBlockM % 128 != 0;
};

// The FP8 forward: e4m3 Q, K and V^T (sm90/fp8/layout.hpp), fp32 accumulation, kOutDType output.
// Key tiles are 128: one quantisation block (fp8::kQuantBlock) of K, so each key block reads one
// k descale. Query tiles are 128 rows (two consumer warpgroups), or 192 at d64 (three): there the
// GEMMs are small and the per-block overheads dominate, and a third warpgroup amortises each K/V
// tile over more rows (measured: +36-45%, docs/perf-notes.md). Each warpgroup's 64 rows lie in
// one 128-row block of Q, so it reads one q descale. Registers at d256 (the tightest): O 64x256
// fp32 = 128 per thread, S 64x128 = 64, P in e4m3 = 16, within the 240 of two consumer
// warpgroups. Shared memory at d256: Q 128*d + 2 stages of K and V^T (128*d bytes each) + O in 16
// bits (2*128*d) = 224 KB, under 227 KB.
// kVarlen_: packed batches, as FwdWsConfig's; V^T then has the packed layout of fp8::vt_varlen_start.
// kPv16_: e4m3 only for S = Q K^T; V stays in the output's 16-bit type (the caller's V, ordinary
// layout, MN-major as in the 16-bit kernels) and P is rounded to that type, so O = P V runs at the
// 16-bit rate. What it buys is accuracy: on the paper's outlier inputs the e4m3 mantissa of V is
// ~40% of the squared error once Q and K are rotated (docs/perf-notes.md), and no scale can
// shorten it. Fixed-length batches only. d256 takes 64-key tiles: two 16-bit V stages of 128 keys
// would not fit beside Q, K and O (32 + 64 + 128 + 64 KB).
template <DType kOutDType, int kHeadDim_, bool kCausal, unsigned kFlags = kStageE, int kBlockNOverride = 0,
          int kBlockMOverride = 0, bool kVarlen_ = false, bool kPv16_ = false>
struct Fp8FwdConfig : WsSchedule<kFlags> {
  static_assert(kHeadDim_ == 64 || kHeadDim_ == 128 || kHeadDim_ == 256, "head_dim must be 64, 128 or 256");
  static_assert(kOutDType == DType::kBF16 || kOutDType == DType::kFP16, "FP8 output is bf16 or fp16");
  static_assert(!(kPv16_ && kVarlen_), "16-bit P V: fixed-length batches only");
  using Element = cutlass::float_e4m3_t;  // Q and K
  using OutElement = typename ElementOf<kOutDType>::type;
  static constexpr bool kPv16 = kPv16_;
  using ElementV = std::conditional_t<kPv16, OutElement, Element>;  // V and P
  static constexpr bool kFp8 = true;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockMOverride != 0 ? kBlockMOverride : kHeadDim == 64 ? 192 : 128;
  static constexpr int kBlockN = kBlockNOverride != 0 ? kBlockNOverride : kPv16 && kHeadDim == 256 ? 64 : 128;
  static_assert(kBlockM == 128 || kBlockM == 192, "two or three consumer warpgroups");
  static_assert(kBlockN % 32 == 0 && (128 % kBlockN == 0 || kBlockN == 224),
                "a key tile lies inside one descale block: 128 keys, or the wide tile's own 224");
  // Rows of K per descale: the key tile when it is the wide one (fp8::kWideKeyBlock), else 128.
  static constexpr int kKeyQuantBlock = kBlockN > 128 ? kBlockN : 128;
  static constexpr int kStages = 2;
  static constexpr int kNumConsumerWG = kBlockM / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWG * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  static constexpr int kProducerRegs = kNumConsumerWG == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kNumConsumerWG == 2 ? 240 : 160;
  static constexpr bool kCausalMask = kCausal;
  static constexpr bool kVarlen = kVarlen_;
  static constexpr bool kLocal = false;
  static constexpr bool kSoftcap = false;
  static constexpr bool kSoftcapRecipScore = false;
  static constexpr bool kSoftcapFixedMax = false;
  static constexpr int kElementBytes = 1;
  // O is 16-bit and Q 8-bit: O never fits Q's buffer, so it always has its own.
  static constexpr bool kSeparateO = true;
  static constexpr bool kOInV = false;
  // kBitCluster (FwdWsConfig's): CTA pairs share each K and V^T load by multicast. Fixed-length,
  // unmasked, e4m3 V, persistent.
  static constexpr int kClusterM =
      (kFlags & kBitCluster) != 0 && !kCausal && !kVarlen_ && !kPv16_ && WsSchedule<kFlags>::kPersistent ? 2 : 1;
  static_assert((kFlags & kBitCluster) == 0 || kClusterM == 2, "kBitCluster: fixed-length, unmasked, e4m3 V, persistent");
  static constexpr bool kOOutsideQ = true;
  static constexpr bool kEarlyQ = (kFlags & kBitEarlyQ) != 0;
  // FwdWsConfig::kHoldP's overlap measured 3-18% slower here (d64 the most): off.
  static constexpr bool kHoldP = false;
  static constexpr bool kTailSplit = false;  // FwdWsConfig's; not built for FP8
  static constexpr bool kRowShift = kCausal && !kVarlen_ && kBlockM % 128 != 0;  // FwdWsConfig's
};

}  // namespace hopattn::sm90::ws
