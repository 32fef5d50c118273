#!/usr/bin/env bash
# Session 61's first call. On an H200: issue 3's forward grid, then issue 5's backward grid
# (bench/compare.py, the peers in the same process; main's library, pack .gpu-m60 = 3c195a4's src).
# (PACK from the caller: next.sh sets .gpu-m61.) On any other card: branch xtile's check and A/B (s60 callX.sh; ran so in session 61). carry [.gpu-m60, .gpu-exp].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*)
    for d in fwd bwd; do
      t=$([ $d = fwd ] && echo 320 || echo 230)
      mkdir -p $O/$d
      OUT=$O/$d GRID_T=$t GRID_ARGS="--direction $d --out-dir $O/$d --tag h200" NO_BUNDLE=1 \
        bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=|done" | cut -d'|' -f2-11 | head -60
    done ;;
  *) NO_BUNDLE=1 bash docs/bench/s60-2026-12-07/callX.sh ;;
esac
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
