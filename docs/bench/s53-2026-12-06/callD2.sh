#!/usr/bin/env bash
# Session 53: branch d256-n64's rule (d256 causal calls of up to 1k query rows take 64-key tiles
# where 80-key tiles compute >= 1.05x their pairs). Library d256r = main's objects (2b1a125, the
# .gpu-r128 build) + the branch's fwd_{bf16,fp16}_hdim256 and heuristics.cpp: every other unit's
# code is main's. gtest whole binary (4 shards) on it; the d256 causal forward with 64 forced and
# with 80 forced; memcheck and racecheck on two shapes the rule sends to 64-key tiles; ab.py
# main (r128) against it. carry [.gpu-r128, .gpu-exp/ab/libhopattn-d256r.so.xz]; ~5 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-r128
ab=$PWD/.gpu-exp/ab
xz -T8 -dkf $ab/libhopattn-d256r.so.xz
export LIB=$ab/libhopattn-d256r.so
GT_SHARDS=4 GT_T=170 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
for keys in 64 80; do
  HOPATTN_D256_KEY_TILE=$keys GT_T=100 GT_SHARDS=2 GT_FILTER='Sm90/ForwardVsReference.*_d256_causal*:Sm90Repeat.*' \
    bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
done
SAN_T=150 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d256_causal_b3_h8x2_q127_k255:Sm90/ForwardVsReference.*fp16_d256_causal_b3_h8x2_q1000_k1000' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|hazard" | head -8
unset LIB
AB_OP=attention AB_ROUNDS=${ROUNDS:-3} AB_POINTS=256:512:1,256:1024:1,256:2048:1 \
  AB_EXTRA="--lib main=$PWD/.gpu-r128/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | tail -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
