#!/usr/bin/env bash
# s56 call 5: where a short d128 non-causal call's time goes (issue 3: 512 / 1k at 0.93x cuDNN on
# the H200, FA3 0.10-0.16 ahead there). Library trace = main 2b843ab's objects with fwd_bf16_hdim128
# built with -DHOPATTN_FWD_TRACE=1. Run 1: the key tile forced to 128, no cluster, no tail split,
# at 512 / 1k / 2k / 4k, so that tile time against key blocks fits a per-tile cost (intercept) and
# a per-block one (slope). Run 2: the default choices at 1k and 16k. carry [.gpu-m56, .gpu-exp]
# (PACK names the pack; gpu-phases.sh unpacks the trace library; next.sh bundles the logs).
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=${PACK:-.gpu-m56} LIB=.gpu-exp/ab/libhopattn-trace.so
HOPATTN_D128_KEY_TILE=128 HOPATTN_FWD_CLUSTER=0 HOPATTN_FWD_TAIL_SPLIT=0 TRACE_TAG=n128 \
  TRACE_ARGS="--points 128:512:0,128:1024:0,128:2048:0,128:4096:0 --dump ${OUT:-/tmp/out}" \
  bash scripts/gpu-phases.sh trace 2>&1 | grep -v "^==="
TRACE_TAG=default TRACE_ARGS="--points 128:1024:0,128:16384:0" bash scripts/gpu-phases.sh trace 2>&1 | grep -v "^==="
