#!/usr/bin/env bash
# Session 68, when the device budget leaves room for one call (carry [.gpu-m67, .gpu-exp],
# timeout_s 590, any card): callP.sh (branch fp8-cluster: FP8 gtests and sanitizers with the
# cluster forced, the forward_fp8 A/B), the whole gtest binary on main's pack (the GPU CI for the
# d256 cluster rule, b40ecc9), then with the time left: on an H200 compare.py's d256 non-causal
# grid 2k-16k against cuDNN (callC's grid half), elsewhere callS.sh at batch 32 / 64.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
t0=$(date +%s); export PACK=.gpu-m67 PYTHONUNBUFFERED=1; O=${OUT:-/tmp/out}
left() { echo $(( 570 - ($(date +%s) - t0) )); }
AB_T=200 bash docs/bench/s68-2026-12-07/callP.sh
echo "left $(left)s"
mkdir -p /tmp/gt2; OUT=/tmp/gt2 GT_SHARDS=4 GT_T=150 NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
l=$(left); echo "left ${l}s"
case "$gpu" in
  *H200*) if [ $l -gt 90 ]; then mkdir -p $O/grid
    OUT=$O/grid LIB=$PWD/$PACK/lib/libhopattn.so GRID_T=$(( l - 15 )) GRID_ARGS="--direction fwd --hdims 256 --causal 0 --seqlens 2k,4k,8k,16k --out-dir $O/grid --tag h200" \
      NO_BUNDLE=1 bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f1-12 | head -20; fi ;;
  *) [ $l -gt 100 ] && BATCHES=32,64 LENS=1024,8192 timeout $(( l - 10 )) bash docs/bench/s66-2026-12-07/callS.sh ;;
esac
