// The validated, normalised form of KvCacheArgs that the CPU reference and the sm90 decode kernels
// consume (validate_kvcache.cpp builds it once; backends trust it), and the value checks of the
// index tensors shared by the CPU path and the GPU's check_index_values mode.
#pragma once

#include <cstdint>

#include "api/problem.hpp"
#include "hopattn/hopattn.hpp"

namespace hopattn {

// Sequence b's key j lives in row j of k_cache[b] (contiguous) or in row j % page_size of page
// page_table[b][j / page_size] (paged). Strides are in elements, 64-bit; head_dim is contiguous.
struct KvCacheProblem {
  int64_t batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t seqlen_new = 0;  // rows of k_new/v_new per sequence; 0 without them
  // Keys one sequence can hold: max_seqlen_k (contiguous) or max_pages * page_size (paged).
  int64_t capacity = 0;
  bool paged = false;
  int64_t page_size = 0, num_pages = 0, max_pages = 0;  // paged only
  DType dtype = DType::kBF16;
  bool causal = false;
  float scale = 1.f;
  // The window, normalised as AttnProblem's (normalise_window): -1 (unbounded) or >= 0 on each
  // side, causal sets window_right = 0. Row i of sequence b sees keys visible_keys(i, seqlen_q,
  // len_k(b), window_left, window_right).
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;  // > 0: scores are softcap * tanh(scale * q.k / softcap); 0: off
  int num_splits = 0;  // as asked (0: heuristic)

  const void* q = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // (batch, heads_q, seqlen_q) contiguous, or null
  void* k_cache = nullptr;  // written by the append
  void* v_cache = nullptr;
  const void* k_new = nullptr;  // or null
  const void* v_new = nullptr;
  const int32_t* cache_seqlens = nullptr;  // (batch)
  const int32_t* page_table = nullptr;     // (batch, max_pages) with row stride page_table_stride, or null

  // Strides of dims 0..2: (batch, seq, head) for q/out/k_new/v_new and a contiguous cache,
  // (page, row in page, head) for a paged cache.
  int64_t q_stride[3] = {0, 0, 0};
  int64_t o_stride[3] = {0, 0, 0};
  int64_t k_stride[3] = {0, 0, 0};
  int64_t v_stride[3] = {0, 0, 0};
  int64_t kn_stride[3] = {0, 0, 0};
  int64_t vn_stride[3] = {0, 0, 0};
  int64_t page_table_stride = 0;

  HOPATTN_HOST_DEVICE int64_t group() const { return heads_q / heads_kv; }
  // Query rows attended per (batch, kv head): the GQA group's heads times seqlen_q.
  HOPATTN_HOST_DEVICE int64_t rows_per_kv_head() const { return heads_kv == 0 ? 0 : seqlen_q * group(); }
  HOPATTN_HOST_DEVICE bool no_queries() const { return batch == 0 || seqlen_q == 0 || heads_q == 0; }
  // The most keys any row of one sequence can see together (the union of its rows' windows): the
  // capacity, or with a left bound the seqlen_q + left keys [len_k - seqlen_q - left, len_k), as
  // the last row's window always ends at len_k. What the decode kernels split.
  int64_t max_window_keys() const {
    return window_left >= 0 && window_left < capacity - seqlen_q ? seqlen_q + window_left : capacity;
  }
};

// Checks every argument (shapes, dtypes, strides, alignment for the GPU, the index tensors' form);
// on success fills *problem. For Backend::kCpu it also reads the index values (host memory) with
// check_kvcache_index_values. backend: kSm90 or kCpu.
Result validate_kvcache(const KvCacheArgs& args, Backend backend, KvCacheProblem* problem);

// The value checks on host copies: seqlens (batch entries) and, when p.paged, page_table (row b at
// page_table + b * page_table_stride). cache_seqlens[b] >= 0, cache_seqlens[b] + seqlen_new <=
// capacity, and the page_table entries covering the first cache_seqlens[b] + seqlen_new tokens in
// [0, num_pages). Messages name the entry ("page_table[2][5]=-1 is outside [0, num_pages=40) ...").
Result check_kvcache_index_values(const KvCacheProblem& p, const int32_t* seqlens, const int32_t* page_table,
                                  int64_t page_table_stride);

}  // namespace hopattn
