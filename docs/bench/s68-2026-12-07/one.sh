#!/usr/bin/env bash
# Session 68, when the device budget leaves room for one call (carry [.gpu-m67, .gpu-exp],
# timeout_s 590, any card): callP.sh (branch fp8-cluster: FP8 gtests and sanitizers with the
# cluster forced, the forward_fp8 A/B), the whole gtest binary on main's pack (the GPU CI for the
# d256 cluster rule, b40ecc9), then with the time left: on an H200 compare.py's d256 non-causal
# grid 2k-16k against cuDNN (callC's grid half), elsewhere callS.sh at batch 32 / 64.
# Needs .gpu-m67 with main's test binary at 3da7fd6 or later (the FP8 cluster cases; the library's
# code is unchanged since f6c8157): `HOPATTN_JOBS=2 PACK_DIR=.gpu-m67 PACK_SLIM=1 bash
# scripts/gpu-pack.sh`; and .gpu-exp/ab/libhopattn-fp8cl2.so.xz (s67 callP.sh's header, named fp8cl2,
# SRC_ROOT a worktree of branch fp8-cluster at 7b82943).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
t0=$(date +%s); export PACK=.gpu-m67 PYTHONUNBUFFERED=1; O=${OUT:-/tmp/out}
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - t0) )); }  # BUDGET: the seconds the call has
FP8CL=fp8cl2 E2E_POINTS=128:8192:0,128:16384:0 AB_T=160 E2E_T=90 bash docs/bench/s67-2026-12-07/callP.sh
echo "left $(left)s"
l=$(left); [ $l -gt 110 ] && mkdir -p /tmp/gt2 && OUT=/tmp/gt2 GT_SHARDS=4 GT_T=$(( l > 160 ? 150 : l - 10 )) NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
l=$(left); echo "left ${l}s"
case "$gpu" in
  *H200*) if [ $l -gt 90 ]; then mkdir -p $O/grid
    OUT=$O/grid LIB=$PWD/$PACK/lib/libhopattn.so GRID_T=$(( l - 15 )) GRID_ARGS="--direction fwd --hdims 256 --causal 0 --seqlens 2k,4k,8k,16k --out-dir $O/grid --tag h200" \
      NO_BUNDLE=1 bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f1-12 | head -20; fi ;;
  *) [ $l -gt 100 ] && BATCHES=32,64 LENS=1024,8192 timeout $(( l - 10 )) bash docs/bench/s66-2026-12-07/callS.sh ;;
esac
