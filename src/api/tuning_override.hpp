// A/B overrides of the host heuristics, read once from the environment (heuristics.cpp,
// bwd_heuristics.cpp): -1 when the variable is unset means "use the heuristic", 0 forces off, any
// other value forces on.
#pragma once

#include <cstdlib>

namespace hopattn::heuristics {

inline int env_override(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : -1;
}

inline bool forced_or(int forced, bool heuristic) { return forced < 0 ? heuristic : forced != 0; }

}  // namespace hopattn::heuristics
