#!/usr/bin/env bash
# Session 51: the whole suites on main's own build after both merges (s50-merge, then
# softcap-fm-wgsum, with the unused OnlineSoftmax::add_norm removed). Pack .gpu-m51: the build's
# gtest binary, library, python/, tests/python and bench/. gtest whole binary in 4 shards,
# memcheck/racecheck on a fixed-max (d64 cap 30) and a running-max (d128 cap 80) softcap kernel,
# pytest in 4 shards. carry [.gpu-m51]; ~5 min, either card.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m51
GT_SHARDS=4 GT_T=170 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
SAN_T=80 SAN_FILTER='Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap80' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|hazard" | head -8
PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
