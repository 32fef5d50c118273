#!/usr/bin/env bash
# Session 53: the whole suites on branch d64-rows128's own build (pack .gpu-r128: d64 causal calls
# of up to 1k rows take 128-row tiles where the 192-row tiling computes >= 1.17x their score pairs,
# heuristics::d64_causal_query_tile). gtest whole binary in 4 shards; the d64 causal forward with
# 128 rows forced (HOPATTN_D64_QUERY_TILE=128) and with 192 forced; memcheck and racecheck on two
# shapes the rule sends to 128 rows; pytest in 4 shards; compare.py d64 (peers in the same
# process); ab.py main (m52) against the branch at d64 causal 512-2k. carry [.gpu-r128, .gpu-m52]; ~8 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-r128
GT_SHARDS=4 GT_T=170 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
for rows in 128 192; do
  HOPATTN_D64_QUERY_TILE=$rows GT_T=100 GT_FILTER='Sm90/ForwardVsReference.*_d64_causal*:Sm90Repeat.*' \
    bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
done
SAN_T=120 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d64_causal_b3_h8x2_q127_k255:Sm90/ForwardVsReference.*fp16_d64_causal_b3_h8x2_q640_k640' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|hazard" | head -8
PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
GRID_T=150 GRID_ARGS="--direction fwd --hdims 64 --out-dir $OUT --tag r128 --no-plot" \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -16
AB_OP=attention AB_ROUNDS=2 AB_POINTS=64:512:1,64:1024:1,64:2048:1 \
  AB_EXTRA="--lib main=$PWD/.gpu-m52/lib/libhopattn.so --lib r128=$PWD/.gpu-r128/lib/libhopattn.so" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
