#!/usr/bin/env bash
# Issue 5's backward record on an H200 alone (compare.py --direction bwd, peers in the same process),
# with what device time session 61 had left. Pack .gpu-m60 (3c195a4): the backward kernels are
# SASS-identical to main's at 9717918 (idle-wg changed d64 forward kernels only). carry [.gpu-m60].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) GRID_T=${GRID_T:-220} GRID_ARGS="--direction bwd --out-dir $O --tag h200" NO_BUNDLE=1 \
            bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -30 ;;
  *) echo "wants an H200, not $gpu" ;;
esac
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
