// The KV-cache decoding entry points: validate once, optionally check the index values on a host
// copy, plan the split-KV launch, then enqueue the append and the decode kernels; and the CPU
// reference entry point.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "api/device.hpp"
#include "api/index_checks.hpp"
#include "api/kvcache_problem.hpp"
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

// SMs of the current device for the split heuristic (132 on an H100/H200 SXM when none is found,
// which only matters for a workspace size asked without a device).
int current_sm_count() {
  int sms = 0;
  if (sm90::current_device_sm_count(&sms) != cudaSuccess || sms <= 0) {
    cudaGetLastError();
    return 132;
  }
  return sms;
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

}  // namespace

std::size_t attention_with_kvcache_workspace_size(const KvCacheArgs& args) {
  KvCacheProblem p;
  if (!validate_kvcache(args, Backend::kSm90, &p).ok()) return 0;
  return dec::plan_decode(p, current_sm_count()).workspace;
}

Result attention_with_kvcache(const KvCacheArgs& args, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  KvCacheProblem p;
  if (Result r = validate_kvcache(args, Backend::kSm90, &p); !r.ok()) return r;
  if (Result r = check_hopper_device(); !r.ok()) return r;
  if (p.batch > 0 && detail::check_index_values_requested(args.check_index_values))
    if (Result r = check_index_values_on_device(p, stream); !r.ok()) return r;
  const dec::DecodePlan plan = dec::plan_decode(p, current_sm_count());
  if (Result r = check_plan(p, plan); !r.ok()) return r;
  if (workspace_bytes < plan.workspace || (plan.workspace > 0 && workspace == nullptr))
    return Result{Status::kInvalidArgument,
                  cat(workspace == nullptr ? "workspace is null" : cat("workspace_bytes=", workspace_bytes), " but ",
                      plan.workspace, " bytes are needed (attention_with_kvcache_workspace_size)")};
  if (plan.workspace > 0 && reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return Result{Status::kInvalidArgument, "workspace is not 256-byte aligned"};

  if (p.seqlen_new > 0 && p.batch > 0 && p.heads_kv > 0)
    if (const cudaError_t e = dec::launch_append(p, stream); e != cudaSuccess) return cuda_error("KV append launch", e);
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
