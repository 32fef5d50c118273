#!/usr/bin/env bash
# For session 71's first device call (any card; say which). carry [.gpu-m71] (main's pack at 0970076:
# `HOPATTN_JOBS=2 PACK_DIR=.gpu-m71 PACK_SLIM=1 bash scripts/gpu-pack.sh`, minutes with ccache);
# BUDGET = the seconds the command may take (timeout_s - 20). In order, each only if BUDGET leaves room:
#  1. GPU CI: the whole gtest binary (eaca11e's decode change ran only the KV-cache / decode gtests);
#  2. the Python GPU tests, 4 shards (last run in session 60);
#  3. the FP8 non-causal grid, d256 and d128, 4k-16k, peers in the same process (issue 4: d256 16k
#     >= 1.15 PFLOP/s, d128 >= 0.95 from 4k; the d256 cluster is on from 4k since bc5d7a6);
#  4. the bf16 d256 non-causal grid 2k-16k against cuDNN (issue 3; b40ecc9's cluster rule from 4k);
#  5. forward_fp8 d128 4k / 8k with HOPATTN_FP8_CLUSTER=1 against the default (the H100 read +0.9%,
#     inside its spread; an H200's verdict decides d128's rule).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
t0=$(date +%s); export PACK=.gpu-m71 PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - t0) )); }
L=$PWD/$PACK/lib/libhopattn.so; [ -f $L ] || xz -T8 -dk $L.xz
mkdir -p /tmp/gt && OUT=/tmp/gt GT_SHARDS=4 GT_T=150 NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -6
echo "left $(left)s"
[ $(left) -gt 150 ] && OUT=/tmp/py LIB=$L PY_SHARDS=4 PY_T=130 NO_BUNDLE=1 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -6
echo "left $(left)s"
grid() {  # grid NAME ARGS...: compare.py into $O/NAME, the table's rows
  local l=$(left); [ $l -gt 50 ] || return 0
  mkdir -p $O/$1; local t=$(( l - 8 )); [ $t -gt $2 ] && t=$2
  OUT=$O/$1 LIB=$L GRID_T=$t GRID_ARGS="${*:3} --out-dir $O/$1" NO_BUNDLE=1 bash scripts/gpu-phases.sh grid 2>&1 \
    | grep -E "^\||rc=" | cut -d'|' -f1-12 | head -12
}
grid fp8 110 --direction fp8 --hdims 256,128 --causal 0 --seqlens 4k,8k,16k
grid bf16 80 --direction fwd --hdims 256 --causal 0 --seqlens 2k,4k,8k,16k
if [ $(left) -gt 60 ]; then
  PYTHONPATH=$PWD/$PACK/python LD_LIBRARY_PATH=$PWD/$PACK/lib timeout $(( $(left) - 5 )) python3 bench/ab.py --op forward_fp8 \
    --points 128:4096:0,128:8192:0 --rounds 3 --lib base=$L --lib cl=$L --lib zbase=$L --env cl:HOPATTN_FP8_CLUSTER=1 \
    > $O/ab-fp8-d128.log 2>&1
  echo "== ab fp8 d128 cluster (rc=$?)"; grep -v '^AB ' $O/ab-fp8-d128.log | tail -4
fi
echo "left $(left)s"
