#!/usr/bin/env bash
# The next session's device calls (s58 plan). Packs and .gpu-exp do not survive a new checkout: build
# main and pack it (`PACK_DIR=.gpu-m58 PACK_SLIM=1 bash scripts/gpu-pack.sh`: the pack carries
# bench/fwd_trace.py, which must be session 58's to print the end split), and build the trace
# library (`scripts/variant-lib.sh trace "-DHOPATTN_FWD_TRACE=1" fwd_bf16_hdim128`, into
# .gpu-exp/ab/libhopattn-trace.so.xz). carry [.gpu-m58, .gpu-exp].
#  trace  any card: the d128 trace with the tile's end split (walk, last P V, finalize, O store) at
#         512-4k (key tile 128, no cluster, no tail split) and at the defaults for 1k / 16k; ~1.5 min.
#  grid   an H200 only: issue 3's forward grid (s56 next.sh grid); ~8 min.
#  bwd    an H200 only: issue 5's backward record (s56 next.sh bwd); ~5 min.
#  d128   an H200 only, when a whole grid does not fit: callA.sh (the trace, d128 forward rows, d256
#         backward at 4k / 16k) in the seconds given as $2.
export PACK=${PACK:-.gpu-m58}
case "${1:-trace}" in
  trace) nvidia-smi --query-gpu=name --format=csv,noheader
         TRACE_T=60 bash docs/bench/s56-2026-12-06/call5.sh
         bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
  grid|bwd) bash docs/bench/s56-2026-12-06/next.sh "$1" ;;
  d128) bash docs/bench/s58-2026-12-06/callA.sh "${2:-560}" ;;
esac
