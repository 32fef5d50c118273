#!/usr/bin/env bash
# Session 59, call 3 (any card; a call 2 with the same plan never got a machine). (1) The d128 trace
# (s56 call5.sh) on a trace library whose end record stops before the trace's own slot atomic
# (main e1c1a59's objects + this session's trace.cuh, fwd_bf16_hdim128 -DHOPATTN_FWD_TRACE=1): call
# 1 read "the O store's issue 1.28 us", which included that atomic. (2) O staged rows-first (pack
# .gpu-m59o: main + SmemLayoutOWarpGroup in default order, so a warpgroup's O store is head_dim/64
# TMA boxes, d128 2 instead of 16) as `new` against main (base = .gpu-m59's library, zbase = the
# same again), ab.py at the defaults. (3) main's gtest binary on new, 4 shards; (4) pytest on new
# with what time is left. carry [.gpu-m59, .gpu-m59o, .gpu-exp]. $1 = seconds the call may take.
export PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; t0=$(date +%s); T=${1:-420}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
PACK=.gpu-m59 TRACE_T=60 timeout 120 bash docs/bench/s56-2026-12-06/call5.sh 2>&1 | grep -v "^#" | grep -E "^==|end|fit|rc=" | head -40
echo "--- trace done at $(( $(date +%s) - t0 )) s"
xz -dkf .gpu-m59o/lib/libhopattn.so.xz
new=$PWD/.gpu-m59o/lib/libhopattn.so
PACK=.gpu-m59 AB_ONLY=base AB_OP=attention AB_ROUNDS=3 \
  AB_POINTS=128:512:0,128:1024:0,128:4096:0,128:16384:0,128:2048:1,64:1024:0,256:1024:0 \
  AB_EXTRA="--lib new=$new --lib zbase=$PWD/.gpu-m59/lib/libhopattn.so" \
  timeout 220 bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^==="
echo "--- ab done at $(( $(date +%s) - t0 )) s"
PACK=.gpu-m59o GT_SHARDS=4 GT_T=110 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest|passed|failed|FAIL" | head -12
echo "--- gt done at $(( $(date +%s) - t0 )) s"
left=$(( T - 15 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && PACK=.gpu-m59o PY_SHARDS=4 PY_T=$left bash scripts/gpu-phases.sh py 2>&1 | tail -6
echo "--- all done at $(( $(date +%s) - t0 )) s"
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
