#!/usr/bin/env bash
# The next session's device calls (s61 plan). Packs do not survive a new checkout: build main and
# pack it (`PACK_DIR=.gpu-m61 PACK_SLIM=1 bash scripts/gpu-pack.sh`), then carry [.gpu-m61].
# Main's code changed in session 61 (idle-wg: 17 d64 forward kernels), so the forward grid must run
# on the new pack; the backward kernels are unchanged since 3c195a4.
#  grid  an H200 only (needs_h200): issue 3's forward grid, then issue 5's backward grid, one call
#        (call1.sh's H200 branch: fwd 320 s + bwd 230 s at most; on an H100 the two took ~150 s each).
#  fp8   any card: compare.py --direction fp8 over d64 / d128 / d256 (issue 4's grid on main with the
#        idle padding warpgroups; FP8 d64 512 was +6.5% in an A/B).
export PACK=${PACK:-.gpu-m61} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
case "${1:-grid}" in
  grid) bash docs/bench/s61-2026-12-07/call1.sh ;;
  fp8) nvidia-smi --query-gpu=name --format=csv,noheader
       GRID_T=400 GRID_ARGS="--direction fp8 --out-dir $O" bash scripts/gpu-phases.sh grid 2>&1 \
         | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;;
esac
