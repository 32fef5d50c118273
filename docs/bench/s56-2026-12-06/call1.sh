#!/usr/bin/env bash
# s56 call 1: on an H200, issue 5's backward record (compare.py --direction bwd, peers in the same
# process; s54 next.sh bwd's first phase); on an H100, the GPU suites on main's HEAD (2b843ab), which
# session 55 did not run at its final commit.
export PACK=.gpu-m56
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) GRID_T=420 GRID_ARGS="--direction bwd --out-dir $O --tag h200" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;;
  *) GT_SHARDS=4 GT_T=200 PY_SHARDS=4 PY_T=200 bash scripts/gpu-phases.sh gt py 2>&1 | grep -E "rc=|gtest:|passed|failed|FAIL" | head -20 ;;
esac
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
