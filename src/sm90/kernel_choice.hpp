// Which forward kernel family dispatch uses. The FlashAttention-3 kernel (src/sm90/ws/) is the
// default; HOPATTN_FWD_KERNEL=mma selects the first-path mma.sync kernel, for A/B checks and as a
// fallback. Read once per process: getenv is not free and the choice must not change mid-run.
#pragma once

namespace hopattn::sm90 {

enum class FwdKernelFamily { kWarpSpecialized, kMmaSync };

FwdKernelFamily forward_kernel_family();

}  // namespace hopattn::sm90
