#!/usr/bin/env bash
# Session 54: after the rule moved (313d242: d128 from 4k keys, d256 from 16k), the d128/d256
# non-causal forward tests and the tail-split tests on main's build of it (pack .gpu-m54b; kernels
# unchanged from d944fb2, whose whole suites passed in callG/callG2). carry [.gpu-m54b]; ~2 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-m54b
GT_SHARDS=4 GT_T=150 GT_FILTER='*ForwardVsReference*_d128_full*:*ForwardVsReference*_d256_full*:*TailSplit*:*Repeat*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
