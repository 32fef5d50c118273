#!/usr/bin/env bash
# Session 51's last call (~400 s of budget after a start). On an H200: issue 5's backward grid
# (s48 callB.sh's first and third phases: compare.py --direction bwd with the peers in the same
# process, then the deterministic mode's bitwise test; its sanitizer phase ran on the H100s).
# Library main47 (main's backward kernels are SASS-identical to it). On an H100: call2.sh, the
# whole suites on main's own build after the merges, then callP.sh (ncu,
# d64 4k causal against non-causal) if time is left. carry [.gpu-m51, .gpu-rs46,
# .gpu-exp/ab/libhopattn-main47.so.xz].
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*)
    export PACK=.gpu-rs46
    xz -T8 -dkf .gpu-exp/ab/libhopattn-main47.so.xz
    export LIB=$PWD/.gpu-exp/ab/libhopattn-main47.so
    GRID_T=300 GRID_ARGS="--direction bwd --out-dir $OUT --tag h200" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
    GT_T=60 GT_FILTER='BackwardDeterminism.*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
    bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
  *)
    bash docs/bench/s51-2026-12-06/call2.sh
    mv $OUT/logs.tgz $OUT/logs-call2.tgz  # each bundle writes logs.tgz afresh
    # What time is left: the d64 causal/non-causal profiles (callP.sh, ~2 min), if they fit.
    if [ $SECONDS -lt 250 ]; then timeout $((380 - SECONDS)) bash docs/bench/s51-2026-12-06/callP.sh; else echo "no time for callP ($SECONDS s)"; fi ;;
esac
