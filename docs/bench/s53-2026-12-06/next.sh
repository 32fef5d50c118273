#!/usr/bin/env bash
# The next session's device calls (s53 plan). Main's forward kernels changed in session 53 only by
# two new kernels per 16-bit dtype (d64 causal 128-row tiles, d256 causal 64-key tiles, each for
# short sequences by a pair-count rule); every other function is SASS-identical to .gpu-m52's, and
# the backward kernels to main47's. Pack .gpu-m53 is main's whole build (c383fc3).
# 1. On an H200, first: issue 5's backward record (s48 callB.sh, ~7 min; carry .gpu-rs46 and
#    libhopattn-main47.so.xz), then issue 3's forward grid on .gpu-m53 (`grid`, ~8 min).
# 2. On either card: the other short-sequence points below cuDNN (d64 non-causal 512-1k, d128
#    non-causal 512-4k, d256 non-causal 512), where the per-tile fixed costs dominate (session
#    51's trace): a trace without the per-tile atomic, then a cross-tile overlap.
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "${1:-1}" in
  1) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) echo "callB wants an H200, not $gpu" ;; esac ;;
  grid) export PACK=.gpu-m53
        GRID_T=560 GRID_ARGS="--direction fwd --out-dir $O --tag m53" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
        bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
