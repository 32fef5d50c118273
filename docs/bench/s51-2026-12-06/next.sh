#!/usr/bin/env bash
# The next session's device calls (s51 plan). Main's kernels: 54ab4f4 (pack .gpu-m51 = its build;
# the backward and FP8 kernels are SASS-identical to main47's, so .gpu-rs46 + main47 still serve
# issue 5's record).
# 1. On an H200, first: issue 5's backward record, s48 callB.sh (~7 min; carry [.gpu-rs46,
#    .gpu-exp/ab/libhopattn-main47.so.xz]). Issue 5 resolves if d256 non-causal 4k reads >= 1.05x
#    cuDNN and the other points hold.
# 2. The L2-sectioned d64 causal order measured +3-12% at 512-4k on an H100 (perf-notes
#    "Session 51"): callX.sh 1 (its merge check: forced-section gtests, the whole suites on the
#    branch's whole build, pack .gpu-sec)
#    and callX.sh 2 (compare.py d64 causal, main against sec2, peers in the same process). Merge
#    branch d64-l2-section if both pass.
# 3. (Superseded by 2, kept for its ncu part) d64 causal's HBM traffic (perf-notes "Session 51": L2 hit 9.9%, ~5.6x the minimum DRAM
#    bytes at 4k): callS.sh times the L2-sectioned order (branch d64-l2-section, library sec)
#    against main, checks it with forced sections, and reads ncu's DRAM bytes (~6 min; carry
#    [.gpu-m51, .gpu-exp/ab/libhopattn-m51.so.xz, .gpu-exp/ab/libhopattn-sec.so.xz]). If it gains,
#    compare.py's d64 causal rows on the H200 decide the rule (and whether 8k/16k keep it off).
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "${1:-1}" in
  1) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) echo "callB wants an H200, not $gpu" ;; esac ;;
  auto) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) bash docs/bench/s51-2026-12-06/callX.sh 1 ;; esac ;;
  h200only) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) echo "not an H200: $gpu" ;; esac ;;
  h200) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
          *) export PACK=.gpu-sec; echo "not an H200: main c8c1123's forward grid (pack .gpu-sec, SASS-identical)"
             GRID_T=420 GRID_ARGS="--direction fwd --out-dir $O --tag c8c1123 --no-plot" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;; esac ;;
  x1) bash docs/bench/s51-2026-12-06/callX.sh 1 ;;
  x2) bash docs/bench/s51-2026-12-06/callX.sh 2 ;;
  s) bash docs/bench/s51-2026-12-06/callS.sh ;;
  p) bash docs/bench/s51-2026-12-06/callP.sh ;;
esac
