#!/usr/bin/env bash
# The next session's device calls (s56 plan). Packs do not survive a new checkout: build main and
# pack it (`PACK_DIR=.gpu-m57 PACK_SLIM=1 bash scripts/gpu-pack.sh`), then carry [.gpu-m57].
#  bwd   an H200 only: issue 5's backward record (compare.py --direction bwd, peers in the same
#        process); ~5 min.
#  grid  an H200 only: issue 3's forward grid (every head dim, both masks); ~8 min.
#  trace either card: where a short d128 non-causal call's time goes (call5.sh: needs a trace
#        library in .gpu-exp/ab/libhopattn-trace.so.xz, main's objects with fwd_bf16_hdim128 built
#        with -DHOPATTN_FWD_TRACE=1; carry .gpu-exp too); ~2 min.
export PACK=${PACK:-.gpu-m57}
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "${1:-grid}" in
  bwd|grid) case "$gpu" in
      *H200*) GRID_T=540 GRID_ARGS="--direction ${1/grid/fwd} --out-dir $O --tag h200" bash scripts/gpu-phases.sh grid 2>&1 \
                | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;;
      *) echo "$1 wants an H200, not $gpu" ;;
    esac ;;
  trace) bash docs/bench/s56-2026-12-06/call5.sh ;;
esac
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
