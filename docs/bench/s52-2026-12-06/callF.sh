#!/usr/bin/env bash
# Session 52: the tile scheduler's divisions through precomputed multipliers (branch tile-fastdiv,
# IntDivider). Library `fdiv` = main's objects + the branch's fwd_bf16_hdim{64,128,256}; `c52` =
# main's library. Why: perf-notes "Session 52" (the setup's division chain; moving it under the
# first S GEMM did not pay).
# 1. bf16 forward gtests on `fdiv` (pack .gpu-sec's binary), then the d64 causal ones with sections
#    forced to 5 pairs (the sectioned path's dividers);
# 2. A/B, 3 alternating rounds, the same points as callA.sh.
# carry [.gpu-sec, .gpu-exp/ab/libhopattn-c52.so.xz, .gpu-exp/ab/libhopattn-fdiv.so.xz]; ~5 min.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-sec
ab=$PWD/.gpu-exp/ab
xz -T8 -dkf $ab/libhopattn-fdiv.so.xz
LIB=$ab/libhopattn-fdiv.so GT_SHARDS=2 GT_T=150 GT_FILTER='Sm90/ForwardVsReference.*bf16*:*Window*:*Gqa*:*Strided*:*TailSplit*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
HOPATTN_WS_SECTION=5 LIB=$ab/libhopattn-fdiv.so GT_T=100 GT_FILTER='Sm90/ForwardVsReference.*bf16_d64_causal*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
AB_ONLY='c52 fdiv' AB_OP=attention AB_ROUNDS=3 AB_TAG=fdiv AB_EXTRA="--warm 0.7" \
  AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:512:0,64:1024:0,64:4096:0,128:512:1,128:1024:1,128:4096:1,128:512:0,128:4096:0,256:1024:1,256:4096:0 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -20
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
