#!/usr/bin/env bash
# Session 54: d128/d256 non-causal forward as 2-CTA clusters sharing each K/V load by TMA multicast
# (branch fwd-cluster, kBitCluster). Pack .gpu-cl: the branch's gtest binary; library `cl` = the CI
# clone's build of main 982fad5 with the branch's fwd_bf16_hdim128/256 units and heuristics.cpp, so
# HOPATTN_FWD_CLUSTER=1 runs the clustered bf16 kernels and =0 main's kernels (same library).
# carry [.gpu-cl]; ~8 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-cl
# 1. The bf16 d128/d256 forward tests with the cluster forced (every even query-block count takes it).
HOPATTN_FWD_CLUSTER=1 GT_SHARDS=4 GT_T=200 GT_FILTER='*ForwardVsReference*bf16_d128_full*:*ForwardVsReference*bf16_d256_full*:*Repeat*:*TailSplit*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|passed|failed|FAIL" | head -12
# 2. memcheck and racecheck on clustered shapes: 8 query blocks (one round), and 960 tiles (7 rounds a cluster).
HOPATTN_FWD_CLUSTER=1 SAN_T=240 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b1_h8x2_q1000_k1000:Sm90/ForwardVsReference.*bf16_d256_full_b1_h8x2_q1000_k1000:Sm90/ForwardVsReference.*bf16_d128_full_b3_h16x4_q2560_k100:Sm90/ForwardVsReference.*bf16_d256_full_b2_h8x2_q1000_k4001' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|Invalid|Race|hazard" | head -12
# 3. A/B, one library, the cluster off and on, 3 alternating rounds.
export LIB=$PWD/.gpu-cl/lib/libhopattn.so
AB_OP=attention AB_ROUNDS=3 AB_ONLY=none \
  AB_POINTS=128:1024:0,128:2048:0,128:4096:0,128:8192:0,128:16384:0,256:1024:0,256:2048:0,256:4096:0,256:16384:0 \
  AB_EXTRA="--lib off=$LIB --env off:HOPATTN_FWD_CLUSTER=0 --lib cl=$LIB --env cl:HOPATTN_FWD_CLUSTER=1" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -14
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
