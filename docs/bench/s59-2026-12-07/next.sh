#!/usr/bin/env bash
# The next session's device calls (s59 plan). Packs and .gpu-exp do not survive a new checkout: build
# main and pack it (`PACK_DIR=.gpu-m60 PACK_SLIM=1 bash scripts/gpu-pack.sh`), and for `trace` build
# the trace library of main (`scripts/variant-lib.sh traceo "-DHOPATTN_FWD_TRACE=1" fwd_bf16_hdim128`).
#  trace  any card, ~30 s: call4.sh with PACK=.gpu-m60 (main's O layout is now rows-first, so only
#         its `traceo` half is main; its `trace` half wants a library of e1c1a59 and can be dropped):
#         the O store's issue with 2 TMA boxes, against call 3's 0.93-0.99 us with 16.
#  ncu    any card, ~3 min: callT.sh (hopattn and cuDNN under ncu at d128 512 / 1k / 4k).
#  delay  any card, ~90 s: callD.sh (is a tile's end on the SM's critical path? main against main with
#         a 0.5 / 1 us spin at every tile's end). Needs .gpu-exp/ab/libhopattn-d500.so.xz and -d1000,
#         built from main + end-delay.patch (callD.sh's header says how).
#  fp8    any card, ~60 s: callF.sh (the FP8 forward before and after the O layout change; carry
#         .gpu-m59 too).
#  short  trace, delay, fp8 and ncu in one call (~5 min; the first machine that comes should do them all;
#         the last of them bundles every log; carry [.gpu-m60, .gpu-m59, .gpu-exp], ~40 MiB).
#  grid   an H200 only: issue 3's forward grid (s56 next.sh grid, PACK=.gpu-m60); ~8 min.
#  bwd    an H200 only: issue 5's backward record (s56 next.sh bwd); ~5 min.
export PACK=${PACK:-.gpu-m60}
case "${1:-trace}" in
  trace) bash docs/bench/s59-2026-12-07/call4.sh ;;
  ncu) bash docs/bench/s59-2026-12-07/callT.sh ;;
  delay) bash docs/bench/s59-2026-12-07/callD.sh ;;
  fp8) bash docs/bench/s59-2026-12-07/callF.sh ;;
  short) NO_BUNDLE=1 bash docs/bench/s59-2026-12-07/callT.sh
         NO_BUNDLE=1 bash docs/bench/s59-2026-12-07/callD.sh
         NO_BUNDLE=1 bash docs/bench/s59-2026-12-07/callF.sh
         bash docs/bench/s59-2026-12-07/call4.sh ;;
  grid|bwd) bash docs/bench/s56-2026-12-06/next.sh "$1" ;;
esac
