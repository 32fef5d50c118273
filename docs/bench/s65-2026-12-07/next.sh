#!/usr/bin/env bash
# Session 65's first call, whatever card comes; carry [.gpu-m63] (main's library, be01086's code).
#  H200: issue 5's last bar (s64 callB.sh, ~70 s), then issue 3's forward record (s63 next.sh fwd,
#        320 s at most). timeout_s 600.
#  other: s64 callP.sh (batch 64 1k contiguous: run order, placement or shape; ~2.5 min), then
#        callD.sh here (the decode table with the peers, warmed and not; ~3 min).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s64-2026-12-07/callB.sh; bash docs/bench/s63-2026-12-07/next.sh fwd ;;
  *) bash docs/bench/s64-2026-12-07/callP.sh; DEC_T=170 bash docs/bench/s65-2026-12-07/callD.sh ;;
esac
