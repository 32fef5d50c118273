#!/usr/bin/env bash
# Session 52: the next tile worked out ahead (branch tile-ahead: the static scheduler's tile
# coordinates computed while the current tile's first S GEMM runs, instead of between the O store
# and the next S). Library `ahead` = main's objects + the branch's fwd_bf16_hdim{64,128,256};
# `c52` = main's library. Why: perf-notes "Session 52" (the setup's division chain in SASS).
# 1. bf16 forward gtests on `ahead` (pack .gpu-sec's binary: main's tests);
# 2. A/B, 3 alternating rounds, short and long, causal and not, d64/d128/d256.
# carry [.gpu-sec, .gpu-exp/ab/libhopattn-c52.so.xz, .gpu-exp/ab/libhopattn-ahead.so.xz]; ~6 min.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-sec
ab=$PWD/.gpu-exp/ab
xz -T8 -dkf $ab/libhopattn-ahead.so.xz
LIB=$ab/libhopattn-ahead.so GT_SHARDS=2 GT_T=150 GT_FILTER='Sm90/ForwardVsReference.*bf16*:*Window*:*Gqa*:*Strided*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
AB_ONLY='c52 ahead' AB_OP=attention AB_ROUNDS=3 AB_TAG=ahead AB_EXTRA="--warm 0.7" \
  AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:512:0,64:1024:0,64:4096:0,128:512:1,128:1024:1,128:4096:1,128:512:0,128:4096:0,256:1024:1,256:4096:0 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -20
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
