#!/usr/bin/env bash
# Session 58, call B: (1) d128 non-causal at 512-4k keys with the 176-key tile (O in V's buffer,
# FlashAttention-3's 128 x 176 shape) against main's choice by length (N = 128 up to 1k, 160 up to
# 4k: chosen in session ~5, when N = 176 still staged O through Q's buffer). One library (main
# 6a00e7c's code, .gpu-exp/ab/libhopattn-base.so.xz) under three names: base, n176
# (HOPATTN_D128_KEY_TILE=176), zbase (base again, after n176, so each round brackets it).
# (2) the d128 trace (s56 call5.sh). (3) On an H200, issue 3's d128 forward rows with the peers.
# carry [.gpu-m57, .gpu-exp]. Argument: the seconds the whole call may take.
export PACK=.gpu-m57 PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; t0=$(date +%s); T=${1:-560}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
b=$PWD/.gpu-exp/ab/libhopattn-base.so
AB_ONLY=base AB_OP=attention AB_ROUNDS=3 AB_POINTS=128:512:0,128:1024:0,128:2048:0,128:4096:0 \
  AB_EXTRA="--lib n176=$b --env n176:HOPATTN_D128_KEY_TILE=176 --lib zbase=$b" \
  timeout $(( T * 3 / 5 )) bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^==="
echo "--- ab done at $(( $(date +%s) - t0 )) s"
left=$(( T - ($(date +%s) - t0) ))
[ $left -gt 90 ] && TRACE_T=40 timeout $(( left > 200 ? 100 : left - 60 )) bash docs/bench/s56-2026-12-06/call5.sh 2>&1 | grep -v "^#" | head -70
echo "--- trace done at $(( $(date +%s) - t0 )) s"
left=$(( T - 20 - ($(date +%s) - t0) ))
case "$gpu" in
  *H200*) [ $left -gt 120 ] && { GRID_T=$left GRID_ARGS="--direction fwd --hdims 128 --causal 0 --out-dir $O --tag h200-d128" \
      bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -12; } ;;
esac
echo "--- all done at $(( $(date +%s) - t0 )) s"
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
