#!/usr/bin/env bash
# The next session's device calls (s60 plan). Packs and .gpu-exp do not survive a new checkout: build
# main and pack it (`PACK_DIR=.gpu-m60 PACK_SLIM=1 bash scripts/gpu-pack.sh`), and build the xtile
# library from branch xtile (callX.sh's header says how).
#  xtile  any card, ~5 min: callX.sh (branch xtile, docs/design-cross-tile.md: the next tile's first
#         S under this tile's end, at d128 N = 128 and d64). Session 56 measured the same chaining
#         at d128 (-2.3% at 512) with the old 16-box O store; this run is for d64 (untried) and for
#         what the halved store changes at d128. Gtests, then compute-sanitizer, then
#         ab.py at d128 / d64 512 and 1k against main. carry [.gpu-m60, .gpu-exp]. If it fails,
#         the gtest logs are in the bundle; if it gains, merge (the branch is off by default: check
#         that the default build's SASS is unchanged, then turn kBitCrossTile on in kStageE) and
#         run the whole suites on the merged library.
#  grid   an H200 only: issue 3's forward grid (s56 next.sh grid, PACK=.gpu-m60); ~8 min. On an
#         H100 the same grid took 150 s (session 60, BENCHMARKS).
#  bwd    an H200 only: issue 5's backward record (s56 next.sh bwd); ~5 min (H100: 157 s).
export PACK=${PACK:-.gpu-m60}
case "${1:-xtile}" in
  xtile) bash docs/bench/s60-2026-12-07/callX.sh ;;
  grid|bwd) bash docs/bench/s56-2026-12-06/next.sh "$1" ;;
esac
