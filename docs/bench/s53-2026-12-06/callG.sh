#!/usr/bin/env bash
# Session 53, the final commit bb7ebe1 (the two short-causal rules through one helper, host code
# only): the whole GPU test binary on the CI clone's build of that commit (pack .gpu-m53f).
# carry [.gpu-m53f]; ~3 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m53f
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
