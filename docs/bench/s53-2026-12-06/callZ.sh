#!/usr/bin/env bash
# Session 53's last call. On an H200: issue 5's record (s48 callB.sh; the backward kernels are
# SASS-identical to main47's). Otherwise, on main's final build (pack .gpu-m53 = c383fc3, both
# merges): pytest in 4 shards, and compare.py d256 causal (peers in the same process).
# carry [.gpu-m53, .gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
  *) export PACK=.gpu-m53
     PY_SHARDS=4 PY_T=170 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
     GRID_T=150 GRID_ARGS="--direction fwd --hdims 256 --causal 1 --out-dir $OUT --tag m53-d256c --no-plot" \
       bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -10
     bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
