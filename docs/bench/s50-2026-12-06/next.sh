#!/usr/bin/env bash
# The next session's first device call, for whichever card comes (~10 min on an H100, ~17 on an
# H200; split it across calls if the per-call limit is 600 s: callM + callW, then callB):
# 1. callM.sh (~4 min): the whole gtest binary and pytest on the merge's own build (branch
#    s50-merge = main + softcap-fm-tcsum; pack .gpu-m50). Merge s50-merge into main if both pass.
# 2. callW.sh (~6 min): softcap-fm-wgsum (library wgs), the softcap suites and an A/B against
#    main47 / fmb / fmt2. If it passes and beats fmt2, it replaces tcsum's normaliser on main.
# 3. On an H200 only, as its own call: issue 5's backward record (s48 callB.sh, ~7 min).
# carry [.gpu-m50, .gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-fmb.so.xz,
#        .gpu-exp/ab/libhopattn-fmt2.so.xz, .gpu-exp/ab/libhopattn-wgs.so.xz] (~53 MB with the tree)
bash docs/bench/s50-2026-12-06/callM.sh
mv ${OUT:-/tmp/out}/logs.tgz ${OUT:-/tmp/out}/logs-callM.tgz  # each bundle writes logs.tgz afresh
bash docs/bench/s50-2026-12-06/callW.sh
