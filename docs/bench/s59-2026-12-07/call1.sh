#!/usr/bin/env bash
# Session 59, call 1 (any card): the d128 trace with the tile's end split (s56 call5.sh on the trace
# library = main 9ba122b's objects with fwd_bf16_hdim128 built -DHOPATTN_FWD_TRACE=1), then on an
# H200 issue 3's d128 forward rows and issue 5's d256 backward at 4k / 16k (s58 callA.sh without its
# H100 gtest run: main's suites already passed on this code in s58). $1 = seconds the call may take.
# carry [.gpu-m59, .gpu-exp].
export PACK=${PACK:-.gpu-m59}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
  *H200*) bash docs/bench/s58-2026-12-06/callA.sh "${1:-560}" ;;
  *) echo "$gpu"; TRACE_T=60 bash docs/bench/s56-2026-12-06/call5.sh 2>&1 | grep -v "^#" | head -90
     bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
