#!/usr/bin/env bash
# The next session's device calls (s54 plan). Packs do not survive a new checkout: build main first
# and pack it, `PACK_DIR=.gpu-m55 PACK_SLIM=1 bash scripts/gpu-pack.sh` (or from a clean clone's CI
# build, HOPATTN_BUILD_DIR=<clone>/build-ci), then carry [.gpu-m55].
#  v     on either card: the d128/d256 non-causal forward tests with session 54's final rule (its four
#        new shapes have not run on a GPU), the tail-split and repeat tests; ~2 min.
#  bwd   on an H200 only: issue 5's backward record (compare.py --direction bwd, peers in the same
#        process), the backward sanitizers and the determinism test (s48 callB.sh's phases on
#        main's own library); ~7 min.
#  grid  on an H200: issue 3's forward grid (both masks, every head dim); ~8 min.
O=${OUT:-/tmp/out}
export PACK=${PACK:-.gpu-m55}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "${1:-v}" in
  v) GT_SHARDS=4 GT_T=150 GT_FILTER='*ForwardVsReference*_d128_full*:*ForwardVsReference*_d256_full*:*TailSplit*:*Repeat*' \
       bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12 ;;
  bwd) case "$gpu" in
         *H200*) GRID_T=300 GRID_ARGS="--direction bwd --out-dir $O --tag h200" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
                 SAN_T=180 bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=" | head -6
                 GT_T=120 GT_FILTER='BackwardDeterminism.*:Sm90/BackwardVsReference.*bf16_d*_b1_h8x2_q127_k255' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4 ;;
         *) echo "bwd wants an H200, not $gpu" ;;
       esac ;;
  grid) GRID_T=560 GRID_ARGS="--direction fwd --out-dir $O --tag s55" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40 ;;
esac
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
