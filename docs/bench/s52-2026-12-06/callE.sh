#!/usr/bin/env bash
# Session 52, last: effective_section (a forced HOPATTN_WS_SECTION of the pair count or more means no
# sections) on the final commit's CI build (pack .gpu-m52e: build-ci's gtest binary and library).
# The d64 causal forward gtests under the rule, with 3 pairs forced, and with 2^30 pairs forced
# (before the fix, section * nb overflowed into a wrong order). carry [.gpu-m52e]; ~1 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m52e
for g in rule 3 1073741824; do
  echo "== HOPATTN_WS_SECTION=$g"
  ( [ $g = rule ] || export HOPATTN_WS_SECTION=$g
    GT_T=100 GT_FILTER='Sm90/ForwardVsReference.*_d64_causal*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4 )
done
GT_SHARDS=2 GT_T=150 GT_FILTER='Sm90/ForwardVsReference.*:*Fp8*Forward*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
