#!/usr/bin/env bash
# Session 55, first call: main 5b9e47a's GPU suites (session 54's final host code and its four new
# test shapes had not run on a GPU). On an H200, issue 5's backward record first.
export PACK=${PACK:-.gpu-m55}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s54-2026-12-06/next.sh bwd ;;
esac
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL|passed|failed" | head -12
PY_SHARDS=4 PY_T=240 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
