#!/usr/bin/env bash
# The GPU suites on branch idle-wg's whole build (pack .gpu-idle, 9717918: 17 d64 forward kernels
# differ from main's 3c195a4 library, the other 237 functions are SASS-identical): the whole gtest
# binary in 4 shards, then pytest in 4 shards. Any card; ~4 min. carry [.gpu-idle].
export PACK=.gpu-idle PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
GT_SHARDS=4 GT_T=240 PY_SHARDS=4 PY_T=240 NO_BUNDLE=1 bash scripts/gpu-phases.sh gt py 2>&1 | grep -v "^===" | grep -E "gtest:|passed|failed|rc=|FAIL" | head -20
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
