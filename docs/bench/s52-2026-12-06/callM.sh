#!/usr/bin/env bash
# Session 52: the whole suites on main's own build after the tile-fastdiv merge (the tile
# scheduler's divisions through IntDivider; every forward kernel's TileOrder changed). Pack
# .gpu-m52: the build's gtest binary, library, python/, tests/python and bench/.
# gtest whole binary in 4 shards; the d64 causal forward with sections forced to 3 pairs;
# memcheck and racecheck on d64 causal (sections forced), d128 causal (the fold) and d64
# non-causal; pytest in 4 shards; compare.py d64 (peers in the same process). carry [.gpu-m52]; ~7 min, either card.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m52
GT_SHARDS=4 GT_T=170 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
HOPATTN_WS_SECTION=3 GT_T=100 GT_FILTER='Sm90/ForwardVsReference.*_d64_causal*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
HOPATTN_WS_SECTION=3 SAN_T=120 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d64_causal_b3_h8x2_q127_k255:Sm90/ForwardVsReference.*bf16_d128_causal_b3_h8x2_q127_k255:Sm90/ForwardVsReference.*bf16_d64_full_b3_h8x2_q127_k255' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|hazard" | head -8
PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
GRID_T=150 GRID_ARGS="--direction fwd --hdims 64 --out-dir $OUT --tag m52 --no-plot" \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -16
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
