#!/usr/bin/env bash
# Session 66's first call, whatever card comes; carry [.gpu-m63] (main's library, be01086's code).
#  H200 (timeout_s 600): s65 next2.sh (issue 5's record: the backward grid and the gtest binary, ~330 s),
#        then callF.sh here (~2 min).
#  other (timeout_s 330): callF.sh (the L2 flush protocol, ~2 min), then callS.sh (~1.5 min).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s65-2026-12-07/next2.sh; bash docs/bench/s66-2026-12-07/callF.sh ;;
  *) bash docs/bench/s66-2026-12-07/callF.sh; bash docs/bench/s66-2026-12-07/callS.sh ;;
esac
