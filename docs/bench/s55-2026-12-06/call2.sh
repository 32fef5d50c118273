#!/usr/bin/env bash
# Session 55: branch cluster-release (the clustered forward's stage releases without per-thread
# state, release_stage_in_pair). Pack .gpu-cr = the branch's build; .gpu-m55 = main 5b9e47a's.
# Part 1 (~5 min): the branch's whole gtest binary, the clustered tests with the cluster forced,
# memcheck and racecheck on clustered shapes. carry [.gpu-cr, .gpu-m55]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-cr
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|passed|failed|FAIL" | head -12
HOPATTN_FWD_CLUSTER=1 GT_SHARDS=4 GT_T=150 GT_FILTER='*ForwardVsReference*_d128_full*:*ForwardVsReference*_d256_full*:*Repeat*:*TailSplit*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|passed|failed|FAIL" | head -12
HOPATTN_FWD_CLUSTER=1 SAN_T=200 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b1_h8x2_q1000_k1000:Sm90/ForwardVsReference.*bf16_d256_full_b1_h8x2_q1000_k1000:Sm90/ForwardVsReference.*bf16_d128_full_b3_h16x4_q2560_k100:Sm90/ForwardVsReference.*bf16_d256_full_b2_h8x2_q1000_k4001' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|Invalid|Race|hazard" | head -12
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
