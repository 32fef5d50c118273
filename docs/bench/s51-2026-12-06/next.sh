#!/usr/bin/env bash
# The next session's device calls (s51 plan). Main's kernels: 54ab4f4 (pack .gpu-m51 = its build;
# the backward and FP8 kernels are SASS-identical to main47's, so .gpu-rs46 + main47 still serve
# issue 5's record).
# 1. On an H200, first: issue 5's backward record, s48 callB.sh (~7 min; carry [.gpu-rs46,
#    .gpu-exp/ab/libhopattn-main47.so.xz]). Issue 5 resolves if d256 non-causal 4k reads >= 1.05x
#    cuDNN and the other points hold.
# 2. d64 causal's HBM traffic (perf-notes "Session 51": L2 hit 9.9%, ~5.6x the minimum DRAM
#    bytes at 4k): an L2-sectioned longest-first order is the candidate, not built yet. Time it
#    with compare.py (d64 causal 512-16k, peers in the same process) and ncu's DRAM bytes
#    (callP.sh with the candidate's library).
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "${1:-1}" in
  1) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) echo "callB wants an H200, not $gpu" ;; esac ;;
  p) bash docs/bench/s51-2026-12-06/callP.sh ;;
esac
