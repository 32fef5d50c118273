#!/usr/bin/env bash
# The next session's first call, whatever card comes (device starts failed for most of sessions
# 56-64, so one start should do as much as it can). carry [.gpu-m63] (main's library since be01086;
# rebuild and pack it on a fresh checkout: `PACK_DIR=.gpu-m63 PACK_SLIM=1 bash scripts/gpu-pack.sh`).
#  H200: issue 5's last bar (callB.sh, ~70 s: the backward's d256 non-causal 4k-16k with the peers),
#        then issue 3's forward record (s63 next.sh fwd, 320 s at most). timeout_s 600.
#  H100: callP.sh (issue 6's batch-64 1k contiguous reading: run order, cache placement or the
#        shape; ~2.5 min). timeout_s 300.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s64-2026-12-07/callB.sh; bash docs/bench/s63-2026-12-07/next.sh fwd ;;
  *) bash docs/bench/s64-2026-12-07/callP.sh ;;
esac
