#!/usr/bin/env bash
# Session 70, one call (any card; say which), BUDGET = seconds the command may take (timeout_s - 20):
#  1. GPU CI for bc5d7a6 (FP8 CTA pairs on by default for d256 non-causal from 4k keys): main's whole
#     gtest binary on pack .gpu-m70 (`HOPATTN_JOBS=2 PACK_DIR=.gpu-m70 PACK_SLIM=1 bash scripts/gpu-pack.sh`);
#  2. branch paged-pow2 (decode's page index and row as a shift and a mask for power-of-two page sizes,
#     not an integer division; .gpu-exp/ab/libhopattn-pow2.so.xz = main's objects with the decode units
#     from the branch): the KV-cache / decode gtests on it, then decode.py base / pow2 alternating,
#     hopattn alone, contiguous and paged64, and decode_ab.py's table (issue 6: paged trails 1-2.5%);
#  3. what is left: the FP8 non-causal grid against the peers (d256, and d128 on an H200; issue 4).
# carry [.gpu-m70, .gpu-exp].
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
t0=$(date +%s); export PACK=.gpu-m70 PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - t0) )); }
L=$PWD/$PACK/lib/libhopattn.so; [ -f $L ] || xz -T8 -dk $L.xz
mkdir -p /tmp/gt && OUT=/tmp/gt GT_SHARDS=4 GT_T=${MAIN_GT_T:-150} NO_BUNDLE=1 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -6
echo "left $(left)s"
ab=$PWD/.gpu-exp/ab
if [ -f $ab/libhopattn-pow2.so.xz ] && [ $(left) -gt 200 ]; then
  [ -f $ab/libhopattn-pow2.so ] || xz -T8 -dk $ab/libhopattn-pow2.so.xz
  ln -sf $L $ab/libhopattn-base.so
  mkdir -p /tmp/gtp && OUT=/tmp/gtp LIB=$ab/libhopattn-pow2.so GT_SHARDS=4 GT_T=60 GT_FILTER='*KvCache*:*Decode*:*Paged*' NO_BUNDLE=1 \
    bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee /tmp/pow2-gt.txt | head -3
  if grep -q " 0 failed" /tmp/pow2-gt.txt; then
    withlib() {
      local d=/tmp/l-$(basename $1 .so)
      mkdir -p $d && ln -sf $(readlink -f $1) $d/libhopattn.so
      LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$(readlink -f $1) PYTHONPATH=$PWD/$PACK/python "${@:2}"
    }
    mkdir -p $O/dec
    for r in 1 2; do
      for n in base pow2; do
        [ $(left) -gt 110 ] || break 2
        withlib $ab/libhopattn-$n.so timeout 60 python3 $PACK/bench/decode.py --no-peers --batches 1,8,32 \
          --cache-lens 8192,32768,131072 --json $O/dec/dec-$n-r$r.json > /tmp/dec-$n-r$r.log 2>&1
        echo "decode.py $n round $r rc=$?"
      done
    done | grep -v "rc=0"
    python3 bench/decode_ab.py $O/dec base pow2 | tee $O/dec-ab.md
  else
    echo "pow2: gtests failed; no timing"; grep -h "FAILED\|Failure" /tmp/gtp/gt-*.log | head -20
  fi
fi
l=$(left); echo "left ${l}s"
case "$gpu" in *H200*) fp8h=256,128; tag=h200 ;; *) fp8h=256; tag=other ;; esac
if [ $l -gt 50 ]; then
  mkdir -p $O/fp8
  OUT=$O/fp8 LIB=$L GRID_T=$(( l - 8 )) \
    GRID_ARGS="--direction fp8 --hdims $fp8h --causal 0 --seqlens 4k,8k,16k --out-dir $O/fp8 --tag $tag" NO_BUNDLE=1 \
    bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f1-12 | head -12
fi
echo "left $(left)s"
