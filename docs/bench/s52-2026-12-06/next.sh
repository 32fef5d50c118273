#!/usr/bin/env bash
# The next session's device calls (s52 plan). Main's forward kernels changed in session 52 (the
# L2-sectioned d64 causal order, c8c1123; the scheduler's IntDivider, e0ceb0c); pack .gpu-m52 is
# main's whole build. The backward kernels: the IntDivider change reaches them only through
# ws/mainloop.cuh's headers (their own unit mapping still divides), so s48 callB.sh with .gpu-rs46 +
# main47 still measures them only if their SASS is unchanged: check with /tmp/cmpmap.py first, or
# run callB on pack .gpu-m52's library instead (LIB=.gpu-m52/lib/libhopattn.so).
# 1. On an H200, first: issue 5's backward record (s48 callB.sh, ~7 min) and issue 3's forward
#    grid (compare.py --direction fwd, ~6 min) on main's build.
# 2. On either card: IntDivider for the rest of the per-tile divisions (the varlen scheduler's
#    lookup, the tail split's pieces, the backward's unit mapping, launch_order.hpp), each A/B'd.
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "${1:-1}" in
  1) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;; *) echo "callB wants an H200, not $gpu" ;; esac ;;
  try) case "$gpu" in *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
         *) export PACK=.gpu-m52; echo "not an H200 ($gpu): compare.py d128 on main's build"
            GRID_T=200 GRID_ARGS="--direction fwd --hdims 128 --out-dir $O --tag m52-d128 --no-plot" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -16
            bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;; esac ;;
  grid) export PACK=.gpu-m52
        GRID_T=500 GRID_ARGS="--direction fwd --out-dir $O --tag m52" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;;
esac
