#!/usr/bin/env bash
# The next session's device calls (s62 plan). Packs do not survive a new checkout: build main and
# pack it (`PACK_DIR=.gpu-m62 PACK_SLIM=1 bash scripts/gpu-pack.sh`), then carry [.gpu-m62].
# Main's forward changed in session 62 (rotated rounds for the d64 non-causal kernels: +7-8% at
# 512 / 1k on an H100), so issue 3's forward grid must run on the new pack; the backward kernels are
# unchanged since 3c195a4.
#  grid  an H200 only (needs_h200): issue 3's forward grid, then issue 5's backward grid, one call
#        (fwd 320 s + bwd 230 s at most; on an H100 the two took ~150 s each). ~9-10 min with the start.
#  fp8   any card: compare.py --direction fp8 (issue 4's grid on main: idle padding warpgroups and
#        rotated rounds at d64).
#  balance  any card: callB.sh, the tensor pipe's spread over SMs at every forward grid point (~4 min):
#        finds any other round-robin that aliases as d64's did.
export PACK=${PACK:-.gpu-m62} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
case "${1:-grid}" in
  grid) gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
        case "$gpu" in *H200*) ;; *) echo "not an H200: the record grid runs on the H200 only"; exit 3 ;; esac
        for d in fwd bwd; do
          t=$([ $d = fwd ] && echo 320 || echo 230)
          mkdir -p $O/$d
          OUT=$O/$d GRID_T=$t GRID_ARGS="--direction $d --out-dir $O/$d --tag h200" NO_BUNDLE=1 \
            bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=|done" | cut -d'|' -f2-11 | head -60
        done
        bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
  balance) bash docs/bench/s62-2026-12-07/callB.sh ;;
  fp8) nvidia-smi --query-gpu=name --format=csv,noheader
       GRID_T=400 GRID_ARGS="--direction fp8 --out-dir $O" bash scripts/gpu-phases.sh grid 2>&1 \
         | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;;
esac
