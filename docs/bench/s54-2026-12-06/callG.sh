#!/usr/bin/env bash
# Session 54, part 1 of 2 on main's final build (pack .gpu-m54 = the CI clone's build of d944fb2,
# the fwd-cluster merges): the whole gtest binary, the sanitizers on clustered shapes, and an A/B of
# the clustered kernels with and without the tail split against main's single-CTA kernels (one
# library, HOPATTN_FWD_CLUSTER / HOPATTN_FWD_TAIL_SPLIT). carry [.gpu-m54]; ~8 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-m54
GT_SHARDS=4 GT_T=300 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
# memcheck and racecheck on shapes the default rule clusters: d128 8 query blocks x 4001 keys (GQA,
# one round of pairs), d128 2560 x 2100 (960 tiles: 7-8 rounds), d256 2 x 8200 keys.
SAN_T=200 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b2_h8x2_q1000_k4001:Sm90/ForwardVsReference.*bf16_d128_full_b3_h16x4_q2560_k2100:Sm90/ForwardVsReference.*bf16_d256_full_b1_h8x2_q256_k8200' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|Invalid|Race|hazard" | head -8
L=$PWD/.gpu-m54/lib/libhopattn.so
AB_OP=attention AB_ROUNDS=3 AB_ONLY=none AB_POINTS=128:2048:0,128:4096:0,128:8192:0,128:16384:0,256:8192:0,256:16384:0 \
  AB_EXTRA="--lib off=$L --env off:HOPATTN_FWD_CLUSTER=0 --lib cl=$L --lib clns=$L --env clns:HOPATTN_FWD_TAIL_SPLIT=0" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -10
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
