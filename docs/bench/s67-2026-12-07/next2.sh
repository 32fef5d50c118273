#!/usr/bin/env bash
# For the next H200 (needs_h200, timeout_s 590), carry [.gpu-m67] (main's pack at f6c8157; rebuild:
# `HOPATTN_JOBS=2 PACK_DIR=.gpu-m67 PACK_SLIM=1 bash scripts/gpu-pack.sh`, minutes with ccache):
#  1. callC.sh: the d256 cluster rule's gtests (forced on every even-count d256 shape) and the d256
#     non-causal forward grid 2k-16k against cuDNN (~2 min);
#  2. the whole gtest binary, 4 shards (~100 s; logs in /tmp: the device returns 8 files);
#  3. the d256 cluster below the rule's 4k on this card: 1k / 2k, base against HOPATTN_FWD_CLUSTER=1
#     (the H100 read -3.0% / -0.8%; ~1 min);
#  4. session 66's leftovers on this pack: issue 6's decode table under both flushes (~2 min) and issue
#     4's FP8 grid, d128 / d256 causal both (the rest of the call).
# Exits 3 on another card.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200"; exit 3 ;; esac
export PACK=.gpu-m67 PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; t0=$(date +%s)
bash docs/bench/s67-2026-12-07/callC.sh
mkdir -p /tmp/gt; OUT=/tmp/gt GT_SHARDS=4 GT_T=150 NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
L=$PWD/$PACK/lib/libhopattn.so
PYTHONPATH=$PWD/$PACK/python LD_LIBRARY_PATH=$PWD/$PACK/lib timeout 90 python3 bench/ab.py --op attention \
  --points 256:1024:0,256:2048:0 --rounds 3 --lib base=$L --lib cl1=$L --env cl1:HOPATTN_FWD_CLUSTER=1 > $O/ab-cl-short.log 2>&1
echo "== cluster below 4k (rc=$?)"; grep -v '^AB ' $O/ab-cl-short.log | tail -5
DEC_T=70 bash docs/bench/s66-2026-12-07/callF.sh | tail -20
left=$(( 570 - ($(date +%s) - t0) )); echo "left ${left}s"
if [ $left -gt 60 ]; then
  mkdir -p $O/fp8
  OUT=$O/fp8 GRID_T=$(( left - 15 )) GRID_ARGS="--direction fp8 --hdims 128,256 --causal both --out-dir $O/fp8 --tag h200" NO_BUNDLE=1 \
    bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
fi
