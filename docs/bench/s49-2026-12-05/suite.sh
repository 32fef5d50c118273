#!/usr/bin/env bash
# Session 49: the correctness half for the combined candidate s49-all = main + softcap-fm +
# ws-edge-turns (edge turns off by default, FA3's placement) + decode-narrow. Pack .gpu-all (its
# gtest binary, Python tests and library). Phases: the whole gtest binary in 4 shards; memcheck and
# racecheck on one case per changed kernel family (d64 causal tile walk; a fixed-max softcap kernel
# and a running-max one at cap 80; two narrow decode kernels); then bundle.
# carry [.gpu-all]; ~6-8 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-all
GT_SHARDS=4 GT_T=330 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL|passed|failed" | head -12
SAN_T=200 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d64_causal_b3_h8x2_q1000_k1000:Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap80:Sm90/KvCacheVsReference.*/bf16_d128_contig_g4_q1_full:Sm90/KvCacheVsReference.*/bf16_d128_paged64_g8_q1_causal_append' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|hazard" | head -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
