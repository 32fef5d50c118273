#!/usr/bin/env bash
# For an H200 (needs_h200), carry [.gpu-m63]: issue 5's record in one call, the whole backward grid
# (s63 next.sh bwd, 230 s at most; its last bar d256 non-causal 4k >= 1.05x cuDNN read 1.040x on the
# H200 in session 36, 1.11x on an H100 in session 60), then the GPU suite's gtest binary on the same
# library (4 shards, ~90 s). ~330 s. Exits 3 on another card.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200"; exit 3 ;; esac
bash docs/bench/s63-2026-12-07/next.sh bwd
export PACK=${PACK:-.gpu-m63}
GT_SHARDS=4 GT_T=200 NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
