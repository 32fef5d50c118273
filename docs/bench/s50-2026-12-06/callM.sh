#!/usr/bin/env bash
# Session 50: the merge's own build. s50-merge (main + softcap-fm-tcsum) compiled in a CI clone;
# its non-softcap forward kernels are main's up to register names and, in the varlen non-causal
# d128/d256 kernels, instruction order (scheduling), so the suites run on this library rather than
# on fmt2 (main47's objects + the branch's softcap units). Pack .gpu-m50: the clone's gtest
# binary, tests/python, python/ and library. gtest whole binary and pytest, 4 shards each.
# carry [.gpu-m50]; ~4 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m50
GT_SHARDS=4 GT_T=150 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
