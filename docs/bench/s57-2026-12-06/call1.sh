#!/usr/bin/env bash
# Did not run in session 57 (no machine came for it); the grid is still to run on an H200.
# Session 57, call 1: main 6de8e97 (code 8344705) packed in .gpu-m57. On an H200: issue 3's forward
# grid (next.sh grid). On any other card: main's GPU suites (8344705's release lambda not yet run).
export PACK=.gpu-m57
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s56-2026-12-06/next.sh grid ;;
  *) GT_SHARDS=4 GT_T=150 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
     PY_SHARDS=4 PY_T=200 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
     bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
