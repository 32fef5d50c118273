// Building the validation results: one failed Result and the message concatenation every
// validate_*.cpp uses, so each message names its argument the same way.
#pragma once

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

}  // namespace hopattn::detail
