#!/usr/bin/env bash
# For the next H200 (needs_h200, timeout_s 560), carry [.gpu-m63]: what session 66's H200 calls left.
#  1. callF.sh: issue 6's decode table with the peers on the H200, under both L2 flushes (~2 min).
#  2. issue 4's FP8 speed grid (compare.py --direction fp8, d128 and d256, causal both; 240 s at most;
#     bars: d256 non-causal 16k >= 1.15 PFLOP/s, d128 >= 4k >= 0.95; last H200 reading session 43).
#  3. the gtest binary on the H200 (4 shards, ~90 s; its logs stay in /tmp: the device returns 8 files).
# Exits 3 on another card.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200"; exit 3 ;; esac
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
DEC_T=140 bash docs/bench/s66-2026-12-07/callF.sh | tail -20
mkdir -p $O/fp8
OUT=$O/fp8 GRID_T=240 GRID_ARGS="--direction fp8 --hdims 128,256 --causal both --out-dir $O/fp8 --tag h200" NO_BUNDLE=1 \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=|done" | cut -d'|' -f2-11 | head -40
mkdir -p /tmp/gt; OUT=/tmp/gt GT_SHARDS=4 GT_T=120 NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
