// The KV-cache decoding entry points: validate once, optionally check the index values on a host
// copy, plan the split-KV launch, then enqueue the append and the decode kernels; and the CPU
// reference entry point.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/device.hpp"
#include "api/index_checks.hpp"
#include "api/instantiations.hpp"
#include "api/kvcache_problem.hpp"
#include "api/kvcache_route.hpp"
#include "api/messages.hpp"
#include "reference/kvcache_reference.hpp"
#include "sm90/decode/append.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/decode/plan.hpp"
#include "sm90/launch_util.hpp"

namespace hopattn {
namespace {

using detail::cat;
namespace dec = sm90::decode;

// check_index_values: copy cache_seqlens and the page table to the host (in stream order, then
// wait) and check them as the CPU backend does.
Result check_index_values_on_device(const KvCacheProblem& p, cudaStream_t stream) {
  const auto batch = static_cast<std::size_t>(p.batch);
  std::vector<int32_t> seqlens(batch), pages(p.paged ? batch * static_cast<std::size_t>(p.max_pages) : 0);
  cudaError_t e = cudaMemcpyAsync(seqlens.data(), p.cache_seqlens, batch * sizeof(int32_t), cudaMemcpyDefault, stream);
  if (e != cudaSuccess) return cuda_error("check_index_values: copying cache_seqlens", e);
  if (!pages.empty()) {  // dense rows on the host; the device rows may be strided (or overlap)
    const std::size_t row = static_cast<std::size_t>(p.max_pages) * sizeof(int32_t);
    const std::size_t pitch = static_cast<std::size_t>(p.page_table_stride) * sizeof(int32_t);
    if (pitch >= row) {
      e = cudaMemcpy2DAsync(pages.data(), row, p.page_table, pitch, row, batch, cudaMemcpyDefault, stream);
    } else {
      for (std::size_t b = 0; b < batch && e == cudaSuccess; ++b)
        e = cudaMemcpyAsync(&pages[b * static_cast<std::size_t>(p.max_pages)],
                            p.page_table + static_cast<int64_t>(b) * p.page_table_stride, row, cudaMemcpyDefault, stream);
    }
    if (e != cudaSuccess) return cuda_error("check_index_values: copying page_table", e);
  }
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) return cuda_error("check_index_values: cudaStreamSynchronize", e);
  return check_kvcache_index_values(p, seqlens.data(), pages.data(), p.max_pages);
}

using DecodeLauncher = cudaError_t (*)(const dec::DecodeParams&, int64_t, cudaStream_t);

DecodeLauncher find_decode_launcher(DType dtype, int64_t head_dim) {
  const bool bf16 = dtype == DType::kBF16;
  switch (head_dim) {
    case 64: return bf16 ? &dec::run_decode<DType::kBF16, 64> : &dec::run_decode<DType::kFP16, 64>;
    case 128: return bf16 ? &dec::run_decode<DType::kBF16, 128> : &dec::run_decode<DType::kFP16, 128>;
    case 256: return bf16 ? &dec::run_decode<DType::kBF16, 256> : &dec::run_decode<DType::kFP16, 256>;
  }
  return nullptr;  // unreachable: validate_kvcache admits 64/128/256 only for the GPU
}

// Launch limits the validation cannot see without the plan.
Result check_plan(const KvCacheProblem& p, const dec::DecodePlan& plan) {
  if (plan.blocks > dec::kMaxBlocks)
    return Result{Status::kUnsupported, cat("batch * heads_kv * row blocks * splits = ", plan.blocks,
                                            " thread blocks exceeds the grid limit 2^31-1")};
  if (p.capacity > (int64_t{1} << 30))
    return Result{Status::kUnsupported, cat("cache capacity ", p.capacity, " tokens per sequence exceeds the decode "
                                            "kernels' limit of 2^30")};
  if (p.rows_per_kv_head() > (int64_t{1} << 30))
    return Result{Status::kUnsupported, cat("seqlen_q * heads_q / heads_kv = ", p.rows_per_kv_head(),
                                            " exceeds the decode kernels' limit of 2^30 rows")};
  return {};
}

KvKernel kv_kernel(const KvCacheProblem& p) { return choose_kv_kernel(p, std::getenv("HOPATTN_KV_KERNEL")); }

// The forward route's workspace: the per-sequence key counts after an append (without one, the
// kernel reads cache_seqlens itself).
std::size_t key_counts_bytes(const KvCacheProblem& p) {
  return p.seqlen_new > 0 ? (static_cast<std::size_t>(p.batch) * sizeof(int32_t) + 255) / 256 * 256 : 0;
}

// The cache as a fixed-length batch of `capacity` keys per sequence, of which the first
// key_counts[b] take part (seqused_k): the forward kernel's varlen instantiation keeps the batched
// views and aligns causal and window bottom-right at each sequence's key count, the KV call's rule.
// A paged cache keeps its page table: the kernel finds each key tile's page.
AttnProblem forward_problem(const KvCacheProblem& p, const int32_t* key_counts) {
  AttnProblem a;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.capacity;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.head_dim = p.head_dim;
  a.dtype = p.dtype;
  a.causal = p.causal;
  a.scale = p.scale;
  a.window_left = p.window_left;
  a.window_right = p.window_right;
  a.softcap = p.softcap;
  a.q = p.q;
  a.k = p.k_cache;
  a.v = p.v_cache;
  a.out = p.out;
  a.lse = p.lse;  // (batch, heads_q, seqlen_q) contiguous in both calls
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = p.q_stride[i];
    a.k_stride[i] = p.k_stride[i];
    a.v_stride[i] = p.v_stride[i];
    a.o_stride[i] = p.o_stride[i];
  }
  a.seqused_k = key_counts;
  if (p.paged) {  // the views become (page_size, .., num_pages); seqlen_k stays the capacity
    a.page_table = p.page_table;
    a.page_table_stride = p.page_table_stride;
    a.page_size = p.page_size;
    a.num_pages = p.num_pages;
  }
  return a;
}

Result run_forward_route(const KvCacheProblem& p, void* workspace, cudaStream_t stream) {
  const int32_t* key_counts = p.cache_seqlens;
  if (p.seqlen_new > 0) {
    auto* counts = static_cast<int32_t*>(workspace);
    if (const cudaError_t e = dec::launch_key_counts(p, counts, stream); e != cudaSuccess)
      return cuda_error("KV key-count launch", e);
    key_counts = counts;
  }
  const FwdKernelEntry* kernel = find_forward_kernel(p.dtype, static_cast<int>(p.head_dim));
  if (kernel == nullptr)
    return Result{Status::kUnsupported, cat("no forward kernel was built for head_dim ", p.head_dim)};
  const cudaError_t e = kernel->launch(forward_problem(p, key_counts), stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 forward launch (KV cache, chunked prefill)", e);
}

std::size_t workspace_bytes_for(const KvCacheProblem& p) {
  return kv_kernel(p) == KvKernel::kForward ? key_counts_bytes(p) : dec::plan_decode(p, split_planning_sm_count()).workspace;
}

Result check_workspace(void* workspace, std::size_t workspace_bytes, std::size_t need) {
  if (workspace_bytes < need || (need > 0 && workspace == nullptr))
    return Result{Status::kInvalidArgument,
                  cat(workspace == nullptr ? "workspace is null" : cat("workspace_bytes=", workspace_bytes), " but ",
                      need, " bytes are needed (attention_with_kvcache_workspace_size)")};
  if (need > 0 && reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return Result{Status::kInvalidArgument, "workspace is not 256-byte aligned"};
  return {};
}

}  // namespace

std::size_t attention_with_kvcache_workspace_size(const KvCacheArgs& args) {
  KvCacheProblem p;
  if (!validate_kvcache(args, Backend::kSm90, &p).ok()) return 0;
  return workspace_bytes_for(p);
}

Result attention_with_kvcache(const KvCacheArgs& args, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  KvCacheProblem p;
  if (Result r = validate_kvcache(args, Backend::kSm90, &p); !r.ok()) return r;
  // Chunked prefill runs the forward kernel (kvcache_route.hpp), decoding the split-KV plan. Both
  // append first, in stream order, so the kernels see the new keys. The route, the plan's limits
  // and the workspace are host facts, checked before the device like the rest of the arguments.
  const bool forward = kv_kernel(p) == KvKernel::kForward;
  dec::DecodePlan plan{};
  if (!forward) {
    plan = dec::plan_decode(p, split_planning_sm_count());
    if (Result r = check_plan(p, plan); !r.ok()) return r;
  }
  if (Result r = check_workspace(workspace, workspace_bytes, forward ? key_counts_bytes(p) : plan.workspace); !r.ok())
    return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (p.batch > 0 && detail::check_index_values_requested(args.check_index_values))
    if (Result r = check_index_values_on_device(p, stream); !r.ok()) return r;

  if (p.seqlen_new > 0 && p.batch > 0 && p.heads_kv > 0)
    if (const cudaError_t e = dec::launch_append(p, stream); e != cudaSuccess) return cuda_error("KV append launch", e);
  if (forward) return run_forward_route(p, workspace, stream);
  if (plan.blocks == 0) return {};  // no query rows: the append was the whole call

  dec::DecodeParams params;
  params.p = p;
  params.num_splits = plan.num_splits;
  params.rows_per_block = 16 * plan.row_tiles;
  params.row_blocks = static_cast<int>(plan.row_blocks);
  if (plan.num_splits > 1) {
    const std::size_t o_bytes = dec::partial_o_bytes(p.batch * p.heads_q * p.seqlen_q, p.head_dim, plan.num_splits);
    params.partial_o = static_cast<float*>(workspace);
    params.partial_lse = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + o_bytes);
  }
  const cudaError_t e = find_decode_launcher(p.dtype, p.head_dim)(params, plan.blocks, stream);
  return e == cudaSuccess ? Result{} : cuda_error("sm90 decode launch", e);
}

Result attention_with_kvcache_cpu(const KvCacheArgs& args) {
  KvCacheProblem p;
  if (Result r = validate_kvcache(args, Backend::kCpu, &p); !r.ok()) return r;
  reference::attention_with_kvcache_cpu(p);
  return {};
}

}  // namespace hopattn
