#!/usr/bin/env bash
# s56 call 4: on an H200 only, issue 3's forward grid on main (library of 2b843ab = pack .gpu-m56;
# compare.py --direction fwd, every head dim, both masks, peers in the same process). On an H100
# it stops at once (the bars are judged on the H200).
export PACK=.gpu-m56
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) GRID_T=540 GRID_ARGS="--direction fwd --out-dir $O --tag s56" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
          bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
  *) echo "not an H200: nothing run" ;;
esac
