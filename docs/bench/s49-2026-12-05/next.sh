#!/usr/bin/env bash
# The next session's first device call, for whichever card comes: on an H200, issue 5's backward
# record (s48 callB.sh, ~7 min); on an H100, the softcap normaliser (callS.sh, ~6 min). Then, on
# the warm machine, the other one where it applies (callS on either card; callB only on an H200).
# carry [.gpu-rs46, .gpu-fmt, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-rs.so.xz,
#        .gpu-exp/ab/libhopattn-fmb.so.xz, .gpu-exp/ab/libhopattn-fmt2.so.xz] (~55 MB with the tree)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
  *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
  *) bash docs/bench/s49-2026-12-05/callS.sh ;;
esac
