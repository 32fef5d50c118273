#!/usr/bin/env bash
# Session 58, call C (the budget's last ~350 s): main's whole gtest binary in 4 shards on main
# 6a00e7c's code (8344705's one-lambda release had not run alone). carry [.gpu-m57].
export PACK=.gpu-m57
nvidia-smi --query-gpu=name --format=csv,noheader
GT_SHARDS=4 GT_T=150 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL|passed|failed" | head -16
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
# Then, a second command on the same warm machine (logs in suite-h100/ with these):
#   export PACK=.gpu-m57; PY_SHARDS=4 PY_T=160 bash scripts/gpu-phases.sh py; bash scripts/gpu-phases.sh bundle
# gtest: 3373 passed, 0 failed, 1 skipped; pytest: 507 + 507 + 505 + 507 = 2026 passed, 12 skipped.
