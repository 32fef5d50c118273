// Reads HOPATTN_FWD_KERNEL once ("ws", the default, or "mma"); see sm90/kernel_choice.hpp.
#include "sm90/kernel_choice.hpp"

#include <cstdlib>
#include <cstring>

namespace hopattn::sm90 {

FwdKernelFamily forward_kernel_family() {
  static const FwdKernelFamily family = [] {
    const char* v = std::getenv("HOPATTN_FWD_KERNEL");
    return v != nullptr && std::strcmp(v, "mma") == 0 ? FwdKernelFamily::kMmaSync : FwdKernelFamily::kWarpSpecialized;
  }();
  return family;
}

}  // namespace hopattn::sm90
