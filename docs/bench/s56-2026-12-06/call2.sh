#!/usr/bin/env bash
# s56 call 2: on an H200, issue 3's forward grid (s54 next.sh grid) on main 2b843ab; on an H100,
# v3 of the clustered release (session 55: both arrivals from warp 0 lanes 0/8) at d128 against
# main's CUTLASS release, both orders (base/zmain = main's library, v3 = f5550de + v3 d128 units).
export PACK=.gpu-m56
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) bash docs/bench/s54-2026-12-06/next.sh grid ;;
  *) export AB_OP=attention AB_POINTS=128:4096:0,128:8192:0,128:16384:0
     AB_ONLY="base v3" AB_ROUNDS=3 AB_TAG=main-first bash scripts/gpu-phases.sh ab 2>&1 | tail -8
     AB_ONLY="v3 zmain" AB_ROUNDS=3 AB_TAG=v3-first bash scripts/gpu-phases.sh ab 2>&1 | tail -8
     bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
