// Argument validation of the KV-cache decoding call: KvCacheArgs into a KvCacheProblem, or a Result
// whose message names the offending argument (and index). Pure host code, so the CPU tests exercise
// every rule without a GPU.
//
// Two kinds of checks, as for varlen. Shapes, dtypes, strides and the form of the int32 index
// tensors are checked for every backend. The index values (cache lengths within the capacity, page
// numbers within the pool) are read only for Backend::kCpu, whose index tensors are host memory; the
// GPU entry point runs the same check_kvcache_index_values on a host copy when asked to.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "api/kvcache_problem.hpp"
#include "api/messages.hpp"
#include "api/tensor_layout.hpp"

namespace hopattn {
namespace {

using detail::cat;

Result fail(const std::string& msg) { return detail::fail(Status::kInvalidArgument, msg); }

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

bool data_dtype_allowed(DType t, Backend backend) {
  switch (t) {
    case DType::kBF16:
    case DType::kFP16: return true;
    case DType::kFP32: return backend == Backend::kCpu;
    case DType::kInt32:
    case DType::kE4M3: return false;
  }
  return false;
}

// An int32 index tensor of `ndim` (1 or 2) dims whose first dim is `rows`; the last dim contiguous.
Result check_index(const char* name, const TensorRef& t, int ndim, int64_t rows, const char* layout) {
  if (t.dtype != DType::kInt32) return fail(cat(name, ": dtype must be int32, got ", dtype_name(t.dtype)));
  if (t.ndim != ndim) return fail(cat(name, ": expected ", ndim, ndim == 1 ? " dim " : " dims ", layout, ", got ndim=", t.ndim));
  for (int i = 0; i < ndim; ++i) {
    if (t.sizes[i] < 0) return fail(cat(name, ".sizes[", i, "] is negative (", t.sizes[i], ")"));
    if (t.strides[i] < 0) return fail(cat(name, ".strides[", i, "] is negative (", t.strides[i], ")"));
    if (t.sizes[i] > kInt32Max) return fail(cat(name, ".sizes[", i, "] = ", t.sizes[i], " exceeds 2^31-1"));
  }
  if (t.sizes[0] != rows) return fail(cat(name, ".sizes[0]=", t.sizes[0], " but q has batch ", rows));
  if (t.sizes[ndim - 1] > 1 && t.strides[ndim - 1] != 1)
    return fail(cat(name, ": last dim must be contiguous, got ", name, ".strides[", ndim - 1, "]=", t.strides[ndim - 1]));
  const int64_t numel = ndim == 1 ? t.sizes[0] : t.sizes[0] * t.sizes[1];
  if (numel > 0 && t.data == nullptr) return fail(cat(name, ".data is null"));
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) return fail(cat(name, ".data is not 4-byte aligned"));
  return {};
}

Result check_lse(const TensorRef& lse, int64_t b, int64_t h, int64_t s) {
  if (lse.data == nullptr) return {};
  if (lse.dtype != DType::kFP32) return fail(cat("lse: dtype must be fp32, got ", dtype_name(lse.dtype)));
  if (lse.ndim != 3) return fail(cat("lse: expected 3 dims (batch, heads_q, seqlen_q), got ndim=", lse.ndim));
  const int64_t want[3] = {b, h, s};
  for (int i = 0; i < 3; ++i)
    if (lse.sizes[i] != want[i])
      return fail(cat("lse.sizes[", i, "]=", lse.sizes[i], " but expected ", want[i], " (batch, heads_q, seqlen_q)"));
  const int64_t want_stride[3] = {h * s, s, 1};
  for (int i = 0; i < 3; ++i)
    if (lse.sizes[i] > 1 && lse.strides[i] != want_stride[i])
      return fail(cat("lse must be contiguous: strides[", i, "]=", lse.strides[i], ", expected ", want_stride[i]));
  if (reinterpret_cast<uintptr_t>(lse.data) % 4 != 0) return fail("lse.data is not 4-byte aligned");
  return {};
}

// `t` (named `name`) has size want[i] in every dim where want[i] >= 0; `what` names the dims.
Result check_sizes(const char* name, const TensorRef& t, const int64_t want[4], const char* const what[4],
                   const char* source) {
  for (int i = 0; i < 4; ++i)
    if (want[i] >= 0 && t.sizes[i] != want[i])
      return fail(cat(name, ".sizes[", i, "] (", what[i], ")=", t.sizes[i], " but ", source, " has ", what[i], " ",
                      want[i]));
  return {};
}

}  // namespace

Result validate_kvcache(const KvCacheArgs& a, Backend backend, KvCacheProblem* p) {
  if (backend != Backend::kCpu && backend != Backend::kSm90)
    return Result{Status::kUnsupported, "attention_with_kvcache: only the CPU reference and the sm90 kernels exist"};
  const bool has_k_new = !tensor_absent(a.k_new), has_v_new = !tensor_absent(a.v_new);
  if (has_k_new != has_v_new)
    return fail(cat("k_new and v_new must be given together, but only ", has_k_new ? "k_new" : "v_new", " is"));
  const bool has_new = has_k_new;

  struct Named { const char* name; const TensorRef* t; };
  Named tensors[6] = {{"q", &a.q}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"out", &a.out},
                      {"k_new", &a.k_new}, {"v_new", &a.v_new}};
  const int count = has_new ? 6 : 4;
  for (int i = 0; i < count; ++i) {
    const auto& [name, t] = tensors[i];
    if (!data_dtype_allowed(t->dtype, backend))
      return Result{backend == Backend::kCpu || t->dtype == DType::kInt32 || t->dtype == DType::kE4M3
                        ? Status::kInvalidArgument
                        : Status::kUnsupported,
                    cat(name, ": dtype ", dtype_name(t->dtype), " is not supported by this backend (",
                        backend == Backend::kCpu ? "bf16, fp16, fp32" : "bf16, fp16", ")")};
  }
  for (int i = 0; i < count; ++i)
    if (tensors[i].t->dtype != a.q.dtype)
      return fail(cat(tensors[i].name, ": dtype ", dtype_name(tensors[i].t->dtype), " differs from q's ",
                      dtype_name(a.q.dtype)));
  for (int i = 0; i < count; ++i)
    if (Result r = check_tensor_layout(tensors[i].name, *tensors[i].t, backend); !r.ok()) return r;

  const int64_t batch = a.q.sizes[0], sq = a.q.sizes[1], hq = a.q.sizes[2], d = a.q.sizes[3];
  const int64_t hkv = a.k_cache.sizes[2];
  for (int i = 0; i < 4; ++i)
    if (a.out.sizes[i] != a.q.sizes[i])
      return fail(cat("out.sizes[", i, "]=", a.out.sizes[i], " but q.sizes[", i, "]=", a.q.sizes[i]));
  if (a.k_cache.sizes[3] != d)
    return fail(cat("k_cache.sizes[3] (head_dim)=", a.k_cache.sizes[3], " but q has head_dim ", d));
  if (a.v_cache.sizes[3] != d)
    return Result{Status::kUnsupported, cat("v_cache.sizes[3] (head_dim)=", a.v_cache.sizes[3], " but q has head_dim ",
                                            d, "; head_dim_v != head_dim_qk is not supported")};
  for (int i = 0; i < 3; ++i)
    if (a.v_cache.sizes[i] != a.k_cache.sizes[i])
      return fail(cat("v_cache.sizes[", i, "]=", a.v_cache.sizes[i], " but k_cache.sizes[", i, "]=", a.k_cache.sizes[i]));
  if (hq > 0 && hkv == 0) return fail("k_cache.sizes[2] (heads_kv) is 0 but q has heads");
  if (hkv > 0 && hq % hkv != 0) return fail(cat("heads_q=", hq, " is not a multiple of heads_kv=", hkv, " (GQA/MQA)"));
  if (d == 0) return fail("q.sizes[3] (head_dim) is 0");

  if (Result r = check_index("cache_seqlens", a.cache_seqlens, 1, batch, "(batch)"); !r.ok()) return r;

  // The cache: paged when a page table is given, else one max_seqlen_k slab per sequence.
  const bool paged = !tensor_absent(a.page_table);
  int64_t capacity = 0, page_size = 0, num_pages = 0, max_pages = 0;
  if (paged) {
    if (Result r = check_index("page_table", a.page_table, 2, batch, "(batch, max_pages)"); !r.ok()) return r;
    num_pages = a.k_cache.sizes[0];
    page_size = a.k_cache.sizes[1];
    max_pages = a.page_table.sizes[1];
    if (page_size == 0) return fail("k_cache.sizes[1] (page_size) is 0; a paged cache needs pages of >= 1 token");
    if (num_pages == 0 && batch > 0 && max_pages > 0)
      return fail("k_cache.sizes[0] (num_pages) is 0 but page_table names pages");
    capacity = max_pages * page_size;  // both < 2^31: no overflow in int64
    if (capacity > kInt32Max)
      return fail(cat("page_table.sizes[1] (max_pages)=", max_pages, " times page_size=", page_size,
                      " exceeds 2^31-1 tokens per sequence"));
  } else {
    if (a.k_cache.sizes[0] != batch)
      return fail(cat("k_cache.sizes[0] (batch)=", a.k_cache.sizes[0], " but q has batch ", batch,
                      " (a contiguous cache has one max_seqlen_k slab per sequence; pass page_table for a paged one)"));
    capacity = a.k_cache.sizes[1];
  }

  int64_t seqlen_new = 0;
  if (has_new) {
    static const char* const kWhat[4] = {"batch", "seqlen_new", "heads_kv", "head_dim"};
    const int64_t want_k[4] = {batch, -1, hkv, d};
    if (Result r = check_sizes("k_new", a.k_new, want_k, kWhat, "the cache/q"); !r.ok()) return r;
    const int64_t want_v[4] = {a.k_new.sizes[0], a.k_new.sizes[1], a.k_new.sizes[2], a.k_new.sizes[3]};
    if (Result r = check_sizes("v_new", a.v_new, want_v, kWhat, "k_new"); !r.ok()) return r;
    seqlen_new = a.k_new.sizes[1];
    if (seqlen_new > capacity)
      return fail(cat("k_new.sizes[1] (seqlen_new)=", seqlen_new, " exceeds the cache capacity ", capacity, " (",
                      paged ? "max_pages * page_size" : "max_seqlen_k = k_cache.sizes[1]", ")"));
  }
  if (Result r = check_lse(a.lse, batch, hq, sq); !r.ok()) return r;
  if (a.softmax_scale && !(std::isfinite(*a.softmax_scale) && *a.softmax_scale > 0.f))
    return fail(cat("softmax_scale must be finite and > 0, got ", *a.softmax_scale));
  int64_t window_left = -1, window_right = -1;
  if (Result r = normalise_window(a.window, a.causal, &window_left, &window_right); !r.ok()) return r;
  if (Result r = check_softcap(a.softcap); !r.ok()) return r;
  if (a.num_splits < 0) return fail(cat("num_splits=", a.num_splits, " is negative (0 picks it, >= 1 forces it)"));
  if (backend == Backend::kSm90 && d != 64 && d != 128 && d != 256)
    return Result{Status::kUnsupported,
                  cat("head_dim ", d, " has no sm90 KV-cache kernel (64, 128 and 256 are built)")};
  // Last, so that shape and support come first. The call writes out, and the cache when appending.
  if (static_cast<__int128>(batch) * hq * sq > kInt32Max)
    return fail(cat("q: batch x heads_q x seqlen_q = ", batch, " x ", hq, " x ", sq, " query rows, more than 2^31-1"));
  if (Result r = check_output_layout("out", a.out); !r.ok()) return r;
  if (has_new) {
    if (Result r = check_output_layout("k_cache", a.k_cache); !r.ok()) return r;
    if (Result r = check_output_layout("v_cache", a.v_cache); !r.ok()) return r;
  }

  p->batch = batch; p->seqlen_q = sq; p->heads_q = hq; p->heads_kv = hkv; p->head_dim = d;
  p->seqlen_new = seqlen_new;
  p->capacity = capacity;
  p->paged = paged;
  p->page_size = page_size; p->num_pages = num_pages; p->max_pages = max_pages;
  p->dtype = a.q.dtype;
  p->causal = a.causal;
  p->scale = resolve_softmax_scale(a.softmax_scale, d);
  p->window_left = window_left;
  p->window_right = window_right;
  p->softcap = a.softcap;
  p->num_splits = a.num_splits;
  p->q = a.q.data; p->out = a.out.data;
  p->lse = static_cast<float*>(a.lse.data);
  p->k_cache = a.k_cache.data; p->v_cache = a.v_cache.data;
  p->k_new = has_new ? a.k_new.data : nullptr;
  p->v_new = has_new ? a.v_new.data : nullptr;
  p->cache_seqlens = static_cast<const int32_t*>(a.cache_seqlens.data);
  p->page_table = paged ? static_cast<const int32_t*>(a.page_table.data) : nullptr;
  for (int i = 0; i < 3; ++i) {
    p->q_stride[i] = a.q.strides[i];
    p->o_stride[i] = a.out.strides[i];
    p->k_stride[i] = a.k_cache.strides[i];
    p->v_stride[i] = a.v_cache.strides[i];
    p->kn_stride[i] = has_new ? a.k_new.strides[i] : 0;
    p->vn_stride[i] = has_new ? a.v_new.strides[i] : 0;
  }
  p->page_table_stride = paged ? a.page_table.strides[0] : 0;

  if (backend == Backend::kCpu)  // host memory: the values can be read here
    return check_kvcache_index_values(*p, p->cache_seqlens, p->page_table, p->page_table_stride);
  return {};
}

Result check_kvcache_index_values(const KvCacheProblem& p, const int32_t* seqlens, const int32_t* page_table,
                                  int64_t page_table_stride) {
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t cached = seqlens[b];
    if (cached < 0) return fail(cat("cache_seqlens[", b, "]=", cached, " is negative"));
    const int64_t len_k = cached + p.seqlen_new;
    if (len_k > p.capacity)
      return fail(cat("cache_seqlens[", b, "]=", cached, " plus seqlen_new=", p.seqlen_new, " exceeds the cache capacity ",
                      p.capacity, " (", p.paged ? "max_pages * page_size" : "max_seqlen_k = k_cache.sizes[1]", ")"));
    if (!p.paged) continue;
    const int64_t pages_read = (len_k + p.page_size - 1) / p.page_size;
    for (int64_t j = 0; j < pages_read; ++j) {
      const int64_t page = page_table[b * page_table_stride + j];
      if (page < 0 || page >= p.num_pages)
        return fail(cat("page_table[", b, "][", j, "]=", page, " is outside [0, num_pages=", p.num_pages,
                        ") (k_cache.sizes[0]); it holds tokens ", j * p.page_size, "..",
                        std::min(len_k, (j + 1) * p.page_size) - 1, " of sequence ", b));
    }
  }
  return {};
}

}  // namespace hopattn
