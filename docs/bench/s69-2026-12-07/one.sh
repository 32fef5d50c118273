#!/usr/bin/env bash
# Session 69: s68's one.sh reordered for a short call. Main's whole gtest binary first (the GPU CI
# that b40ecc9's d256 cluster rule and 3da7fd6's FP8 cluster cases still lack), then branch
# fp8-cluster's check and A/B (s67 callP.sh on .gpu-exp/ab/libhopattn-fp8cl2.so) in what is left.
# carry [.gpu-m67, .gpu-exp], any card; BUDGET = the seconds the command may take (timeout_s - 30).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
t0=$(date +%s); export PACK=.gpu-m67 PYTHONUNBUFFERED=1
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - t0) )); }
mkdir -p /tmp/gt2 && OUT=/tmp/gt2 GT_SHARDS=4 GT_T=${MAIN_GT_T:-150} NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
l=$(left); echo "left ${l}s"
# callP: FP8 gtests forced (~40 s), sanitizers (~60 s), forward_fp8 A/B, attention_fp8 A/B if room.
if [ $l -gt 200 ]; then
  ab=$(( l - 130 )); [ $ab -gt 160 ] && ab=160; e2e=$(( l - 130 - ab - 10 ))
  [ $e2e -ge 60 ] && export E2E_POINTS=128:8192:0,128:16384:0 E2E_T=$(( e2e > 90 ? 90 : e2e ))
  FP8CL=fp8cl2 GT_T=60 AB_T=$ab ROUNDS=$(( ab >= 140 ? 3 : 2 )) bash docs/bench/s67-2026-12-07/callP.sh
fi
echo "left $(left)s"
