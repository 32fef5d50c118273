#!/usr/bin/env bash
# Session 54, part 2 (right after callG.sh, on the warm machine): pytest on the final build, then
# issue 3's d128/d256 non-causal grid with the peers in the same process. carry [.gpu-m54]; ~5 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-m54
PY_SHARDS=4 PY_T=200 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
GRID_T=280 GRID_ARGS="--direction fwd --hdims 128,256 --causal 0 --out-dir $OUT --tag s54" \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -20
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
