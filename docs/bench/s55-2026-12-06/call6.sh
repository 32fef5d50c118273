#!/usr/bin/env bash
# Session 55: call5 cut to what ~240 s of device time holds: v2 against main at d128 16k and d256
# 16k (3 rounds, v2 first), v2's forced-cluster bf16 d128/d256 tests and racecheck on one shape.
# carry [.gpu-cr, .gpu-m55, .gpu-exp]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[ -f .gpu-m55/lib/libhopattn.so ] || xz -T8 -dk .gpu-m55/lib/libhopattn.so.xz
export PACK=.gpu-cr
ab=$PWD/.gpu-exp/ab
rm -f $ab/libhopattn-v3.so.xz
AB_OP=attention AB_ROUNDS=3 AB_ONLY=none AB_POINTS=128:16384:0,256:16384:0 \
  AB_EXTRA="--lib v2=$ab/libhopattn-v2.so.xz --lib main=$PWD/.gpu-m55/lib/libhopattn.so" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -4
export LIB=$ab/libhopattn-v2.so
HOPATTN_FWD_CLUSTER=1 GT_SHARDS=4 GT_T=90 GT_FILTER='*ForwardVsReference*bf16_d128_full*:*ForwardVsReference*bf16_d256_full*:*TailSplit*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
HOPATTN_FWD_CLUSTER=1 SAN_T=60 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b1_h8x2_q1000_k1000' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|PASSED" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
