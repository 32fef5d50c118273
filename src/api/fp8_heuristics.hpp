// Host-side schedule switches of the FP8 forward kernels. Apart from heuristics.hpp so that
// retuning one recompiles the FP8 launchers only, not every 16-bit forward and backward one.
#pragma once

#include <cstdint>

namespace hopattn::heuristics {

// Overrides for A/B runs; a negative field means "use the default". Initialised once from the
// environment.
struct Fp8Tuning {
  int cluster = -1;  // HOPATTN_FP8_CLUSTER=0/1
};
Fp8Tuning& fp8_tuning();

// Whether the fixed-length non-causal FP8 kernels (e4m3 V) run as 2-CTA clusters sharing each K
// and V^T load (sm90::ws kBitCluster), given the 128-row query blocks per head (only an even count
// pairs up) and the keys. On for d256 from 4k keys; forced on it also reaches d128's 128- and
// 224-key tiles.
bool fp8_cluster(int64_t head_dim, int64_t query_blocks, int64_t seqlen_k);

}  // namespace hopattn::heuristics
