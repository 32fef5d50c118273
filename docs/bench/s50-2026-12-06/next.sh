#!/usr/bin/env bash
# The next session's device calls, in three parts of up to ~7 min each (the per-call limit is 600 s):
# 1. callM.sh (~4 min): the whole gtest binary and pytest on the merge's own build (branch
#    s50-merge = main + softcap-fm-tcsum; pack .gpu-m50). Merge s50-merge into main if both pass.
# 2. callW.sh (~6 min): softcap-fm-wgsum (library wgs), the softcap suites and an A/B against
#    main47 / fmb / fmt2. If it passes and beats fmt2, it replaces tcsum's normaliser on main.
# 3. callT2.sh (~2 min, either card): the d64 forward trace with each tile's start split.
# 4. On an H200 only, as its own call: issue 5's backward record (s48 callB.sh, ~7 min).
# carry [.gpu-m50, .gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-fmb.so.xz,
#        .gpu-exp/ab/libhopattn-fmt2.so.xz, .gpu-exp/ab/libhopattn-wgs.so.xz,
#        .gpu-exp/ab/libhopattn-trace2.so.xz] (~58 MB with the tree)
# `next.sh 1`: callM, then callT2 (~6 min). `next.sh 2`: callW (~6 min). `next.sh 3`: callB, on
# an H200 only (~7 min). Each within one call's 600 s. If an H200 comes, run part 3 on it first:
# issue 5 needs only that, and H200s have been the scarce card (none since session 43).
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "${1:-1}" in
  1)
    bash docs/bench/s50-2026-12-06/callM.sh
    mv $O/logs.tgz $O/logs-callM.tgz  # each bundle writes logs.tgz afresh
    bash docs/bench/s50-2026-12-06/callT2.sh ;;
  2) bash docs/bench/s50-2026-12-06/callW.sh ;;
  3) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) echo "callB wants an H200, not $gpu" ;; esac ;;
esac
