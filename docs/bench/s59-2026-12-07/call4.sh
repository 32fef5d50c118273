#!/usr/bin/env bash
# Session 59, call 4 (any card, ~30 s): the d128 trace (key tile 128, no cluster, no tail split,
# 512-4k) on two trace libraries, main's O layout (trace: e1c1a59's objects) and the rows-first one
# (traceo: this session's working tree), both with the end record stopped before the trace's own
# atomic; the pack's fwd_trace.py (.gpu-m59o, or PACK) prints that atomic too. carry [PACK, .gpu-exp].
export PACK=${PACK:-.gpu-m59o} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
for lib in trace traceo; do
  LIB=.gpu-exp/ab/libhopattn-$lib.so HOPATTN_D128_KEY_TILE=128 HOPATTN_FWD_CLUSTER=0 HOPATTN_FWD_TAIL_SPLIT=0 \
    TRACE_TAG=$lib TRACE_T=40 TRACE_ARGS="--points 128:512:0,128:1024:0,128:2048:0,128:4096:0" \
    bash scripts/gpu-phases.sh trace 2>&1 | grep -E "^==|end|fit|rc="
done
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=  # NO_BUNDLE: a later script bundles
