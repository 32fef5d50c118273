#!/usr/bin/env bash
# The d256 cluster rule from 4k keys (session 67's knob survey on the H200: +2.8% / +4.2% at 4k /
# 8k), on main's pack .gpu-m67 (f6c8157: the rule and the GPU grid's d256 1000 x 4500 cluster case;
# rebuild with `HOPATTN_JOBS=2 PACK_DIR=.gpu-m67 PACK_SLIM=1 bash scripts/gpu-pack.sh`).
# 1. the d256 non-causal forward gtests with the cluster forced on every even-count shape,
# 2. compare.py's d256 non-causal forward grid, 2k-16k (peers in the same process; the rule changes
#    nothing below 4k, 2k is the control). carry [.gpu-m67]. ~2 min.
export PACK=${PACK:-.gpu-m67} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O/grid
nvidia-smi --query-gpu=name --format=csv,noheader
L=$PWD/$PACK/lib/libhopattn.so; [ -f $L ] || xz -T8 -dk $L.xz
mkdir -p /tmp/gt; HOPATTN_FWD_CLUSTER=1 OUT=/tmp/gt LIB=$L GT_SHARDS=2 GT_T=${GT_T:-40} GT_FILTER='*ForwardVsReference*_d256_full*' \
  NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -6
OUT=$O/grid LIB=$L GRID_T=${GRID_T:-90} GRID_ARGS="--direction fwd --hdims 256 --causal 0 --seqlens 2k,4k,8k,16k --out-dir $O/grid --tag h200" \
  NO_BUNDLE=1 bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f1-12 | head -20
