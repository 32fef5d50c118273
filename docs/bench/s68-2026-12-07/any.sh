#!/usr/bin/env bash
# Session 68's first call, whichever card comes (carry [.gpu-m67, .gpu-exp], timeout_s 590):
# on an H200, s67's next2.sh (the d256 cluster rule's gtests and grid against cuDNN, the whole gtest
# binary on main, the cluster at 1k / 2k, the decode table under both flushes, the FP8 grid);
# elsewhere, the A/Bs that need no H200: s67's callP.sh (branch fp8-cluster: gtests and sanitizers
# with the cluster forced, forward_fp8 A/B) and s66's callS.sh at batch 32 / 64 (forced decode
# split counts where the heuristic never splits), then the whole gtest binary if time is left.
# REST=1 runs that second half on an H200 too (a second call on the same machine).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
t0=$(date +%s)
case "$gpu" in
  *H200*) [ -n "$REST" ] || exec bash docs/bench/s67-2026-12-07/next2.sh ;;
esac
export PACK=.gpu-m67
FP8CL=fp8cl2 E2E_POINTS=128:8192:0,128:16384:0 AB_T=240 E2E_T=120 bash docs/bench/s67-2026-12-07/callP.sh
BATCHES=32,64 LENS=1024,8192 bash docs/bench/s66-2026-12-07/callS.sh
left=$(( 560 - ($(date +%s) - t0) )); echo "left ${left}s"
if [ $left -gt 120 ]; then
  mkdir -p /tmp/gt2; OUT=/tmp/gt2 GT_SHARDS=4 GT_T=$(( left - 20 )) NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
fi
