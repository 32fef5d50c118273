// Building the validation results: one failed Result and the message concatenation every
// validate_*.cpp uses, so each message names its argument the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "hopattn/hopattn.hpp"

namespace hopattn::detail {

inline Result fail(Status s, const std::string& msg) { return Result{s, msg}; }

template <typename... Ts>
std::string cat(const Ts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// Every workspace the API takes is 256-byte aligned: TMA and the bulk copies need 128 bytes, and
// the same rule for every call is easier to follow.
inline constexpr std::size_t kWorkspaceAlign = 256;

// The caller's workspace against the `needed` bytes that `size_fn` reports (nothing to check when
// needed is 0): null, too small and misaligned each get a message naming the workspace.
inline Result check_workspace(const void* workspace, std::size_t bytes, std::size_t needed, const char* size_fn) {
  if (needed == 0) return {};
  if (workspace == nullptr)
    return Result{Status::kInvalidArgument,
                  "workspace is null but " + std::to_string(needed) + " bytes are needed (" + size_fn + ")"};
  if (bytes < needed)
    return Result{Status::kInvalidArgument, "workspace_bytes=" + std::to_string(bytes) + " but " +
                                                std::to_string(needed) + " bytes are needed (" + size_fn + ")"};
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign != 0)
    return Result{Status::kInvalidArgument, "workspace is not " + std::to_string(kWorkspaceAlign) + "-byte aligned"};
  return {};
}

}  // namespace hopattn::detail
