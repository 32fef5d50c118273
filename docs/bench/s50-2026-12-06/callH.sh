#!/usr/bin/env bash
# Session 50: on an H200, issue 5's backward record (s48 callB.sh, main47's library, ~7 min). On an
# H100, the whole correctness suites on softcap-fm-tcsum's pack (.gpu-fmt, lib fmt2), the merge's
# condition: gtest whole binary in 4 shards, pytest in 4 shards, memcheck/racecheck on two softcap
# cases (fixed max at d64 cap 30, running max at d128 cap 80). ~6-8 min.
# carry [.gpu-rs46, .gpu-fmt, .gpu-exp/ab/libhopattn-main47.so.xz]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
  *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
  *)
    echo "$gpu"
    export PACK=.gpu-fmt
    GT_SHARDS=4 GT_T=330 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
    SAN_T=150 SAN_FILTER='Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap80' \
      bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|hazard" | head -8
    PY_SHARDS=4 PY_T=240 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
    bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
