#!/usr/bin/env bash
# Did not run in session 58 (no H200 came; callB replaced it on the H100 that did; before it, two
# starts for s57 call1.sh failed). On an H200 it is the one-call version of s56 next.sh grid + bwd
# restricted to d128 forward and d256 backward (s58 next.sh d128).
# Session 58, call A (after two starts failed, so one call carries the most): the d128 trace (s56
# call5.sh; library trace = main 6a00e7c's objects with fwd_bf16_hdim128 built with
# -DHOPATTN_FWD_TRACE=1) on any card; then on an H200 issue 3's d128 forward rows (both masks) and
# issue 5's d256 non-causal backward at 4k / 16k, peers in the same process; elsewhere main's gtest
# binary. carry [.gpu-m57, .gpu-exp].
export PACK=${PACK:-.gpu-m57} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; t0=$(date +%s); T=${1:-560}  # seconds the whole call may take (the device budget left)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
TRACE_T=60 timeout $(( T / 4 )) bash docs/bench/s56-2026-12-06/call5.sh 2>&1 | grep -v "^#" | head -70
echo "--- trace done at $(( $(date +%s) - t0 )) s"
case "$gpu" in
  *H200*)
    GRID_T=$(( T * 2 / 5 )) GRID_ARGS="--direction fwd --hdims 128 --out-dir $O --tag h200-d128" bash scripts/gpu-phases.sh grid 2>&1 \
      | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -20
    mv $O/grid.log $O/grid-fwd-d128.log
    echo "--- fwd grid done at $(( $(date +%s) - t0 )) s"
    GRID_T=$(( T - ($(date +%s) - t0) )) GRID_ARGS="--direction bwd --hdims 256 --seqlens 4k,16k --causal 0 --out-dir $O --tag h200-d256" \
      bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -12
    mv $O/grid.log $O/grid-bwd-d256.log ;;
  *) GT_SHARDS=4 GT_T=150 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12 ;;
esac
echo "--- all done at $(( $(date +%s) - t0 )) s"
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
