#!/usr/bin/env bash
# Session 63: the decode kernel skipping the softmax of 8 rows that are all padding (kernel.cuh,
# HOPATTN_DECODE_SKIP_PAD_HALF=1; a GQA group of <= 8 heads at seqlen_q 1 fills rows 0..7 of the
# 16-row MMA tile, so rows 8..15's max, exponentials, sums and O rescale are dead work). SASS (d128,
# one row tile): innermost step loop 694 -> 680 static instructions, the half's ~65 (5 MUFU, 2 SHFL,
# 32 FMUL of the O rescale, the mask) now behind a warp-uniform branch; registers 218 -> 248.
# Prediction: issue-light at large batches (the loop issues ~40% of the cycles a warp's bytes take),
# so at most +1-2% at batch 32-64, level at batch 1-8.
# Library .gpu-exp/ab/libhopattn-decskip.so.xz = main's objects with both decode units (bf16, fp16) rebuilt.
#  1. the decode / KV-cache gtests on it (bf16 and fp16), gating the rest;
#  2. bench/decode.py, base and decskip in alternating processes, 3 rounds, no peers
#     (contiguous and paged64), then decode_ab.py's table;
#  3. tests/python/test_kvcache.py on it.
# Any card (say which); ~4 min. carry [.gpu-m62, .gpu-exp/ab/libhopattn-decskip.so.xz].
export PACK=${PACK:-.gpu-m62} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ab=$PWD/.gpu-exp/ab
[ -f $ab/libhopattn-decskip.so ] || xz -T8 -dk $ab/libhopattn-decskip.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so $ab/libhopattn-base.so
LIB=$ab/libhopattn-decskip.so GT_SHARDS=4 GT_T=200 GT_FILTER='*KvCache*:*Decode*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/decskip-gt.txt | head -4
if grep -q " 0 failed" $O/decskip-gt.txt; then
  withlib() {
    local d=/tmp/l-$(basename $1 .so)
    mkdir -p $d && ln -sf $(readlink -f $1) $d/libhopattn.so
    LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$(readlink -f $1) PYTHONPATH=$PWD/$PACK/python "${@:2}"
  }
  for r in 1 2 3; do
    for n in base decskip; do
      withlib $ab/libhopattn-$n.so timeout 90 python3 $PACK/bench/decode.py --no-peers --batches 1,8,32,64 \
        --cache-lens 1024,8192,32768 --json $O/dec-$n-r$r.json > $O/dec-$n-r$r.log 2>&1
      echo "decode.py $n round $r rc=$?"
    done
  done | grep -v "rc=0"
  python3 bench/decode_ab.py "$O" base decskip
  LIB=$ab/libhopattn-decskip.so PY_SHARDS=2 PY_T=150 PY_ARGS=tests/python/test_kvcache.py \
    bash scripts/gpu-phases.sh py 2>&1 | grep -E "passed|failed|rc=" | head -4
else
  echo "decskip: gtests failed; no timing"; grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
