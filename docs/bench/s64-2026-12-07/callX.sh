#!/usr/bin/env bash
# Branch decode-cluster-combine (prepared in session 63, not yet run on a GPU): the decode split
# kernel's splits of one (sequence, kv head) launched as one thread-block cluster (2..16 splits, one
# row block), merging through distributed shared memory, with no combine kernel and no workspace
# round trip (kernel.cuh kCluster, launch.cuh launch_split_clustered; HOPATTN_DECODE_CLUSTER=0 takes
# the combine kernel's path). Why: on an H100 (session 63) hopattn trails cuDNN at 1k caches, batch 1
# 13.7 against 11.7 us (16 splits + the combine; cuDNN runs one kernel) and batch 8 0.95x (2 splits).
# Prediction: batch 1-8 small caches gain the combine's ~2-3 us (batch 1 1k ~11 us), long caches
# level to +1% (the combine is ~2% of a 128k call), batch 32-64 unchanged (no split there).
# SASS: the non-cluster kernels identical to main's; the cluster ones 0 spills, their step loop 716
# static instructions against 680 (+36 integer address ops).
# Library .gpu-exp/ab/libhopattn-dcc.so.xz = main's objects with both decode units from the branch:
#   SRC_ROOT=/work/wt-dcc JOBS=2 scripts/variant-lib.sh dcc "" src/sm90/decode/instantiate_bf16 src/sm90/decode/instantiate_fp16
#  1. the decode / KV-cache gtests on it (clusters on: every forced split count <= 16 of one row
#     block takes them), and the same with HOPATTN_DECODE_CLUSTER=0, gating the rest;
#  2. compute-sanitizer memcheck on a few clustered decode gtests;
#  3. bench/decode.py, base / dcc / dcc0 (dcc with HOPATTN_DECODE_CLUSTER=0) alternating, 3 rounds,
#     batch 1 / 8 / 32 at 1k..128k, then decode_ab.py's tables; decode.py with the peers once on dcc.
# Any card (say which); ~5 min. carry [PACK (main's build, e.g. .gpu-m63), .gpu-exp/ab/libhopattn-dcc.so.xz].
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ab=$PWD/.gpu-exp/ab
[ -f $ab/libhopattn-dcc.so ] || xz -T8 -dk $ab/libhopattn-dcc.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so $ab/libhopattn-base.so
LIB=$ab/libhopattn-dcc.so GT_SHARDS=4 GT_T=200 GT_FILTER='*KvCache*:*Decode*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/dcc-gt.txt | head -3
HOPATTN_DECODE_CLUSTER=0 LIB=$ab/libhopattn-dcc.so GT_SHARDS=4 GT_T=200 GT_FILTER='*KvCache*:*Decode*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/dcc0-gt.txt | head -2
if grep -q " 0 failed" $O/dcc-gt.txt && grep -q " 0 failed" $O/dcc0-gt.txt; then
  mkdir -p /tmp/l-dcc && ln -sf $ab/libhopattn-dcc.so /tmp/l-dcc/libhopattn.so
  LIBDIR=/tmp/l-dcc SAN_KERNELS=ws timeout 200 bash scripts/gpu-sanitize.sh \
    'Sm90KvCache.SplitCountsAgree:Sm90KvCache.Softcap:Sm90KvCache.RepeatRunsAreBitwiseIdentical' 2>&1 | tail -4
  withlib() {
    local d=/tmp/l-$(basename $1 .so)
    mkdir -p $d && ln -sf $(readlink -f $1) $d/libhopattn.so
    LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$(readlink -f $1) PYTHONPATH=$PWD/$PACK/python "${@:2}"
  }
  for r in 1 2 3; do
    for n in base dcc dcc0; do
      lib=$ab/libhopattn-${n%0}.so
      env $([ $n = dcc0 ] && echo HOPATTN_DECODE_CLUSTER=0) bash -c "$(declare -f withlib); withlib $lib timeout 90 \
        python3 bench/decode.py --no-peers --batches 1,8,32 --cache-lens 1024,8192,32768,131072 --json $O/dec-$n-r$r.json" \
        > $O/dec-$n-r$r.log 2>&1 || echo "decode.py $n round $r failed"
    done
  done
  python3 bench/decode_ab.py "$O" base dcc
  python3 bench/decode_ab.py "$O" base dcc0 | tail -n +3 | head -4
  withlib $ab/libhopattn-dcc.so timeout 100 python3 bench/decode.py --batches 1,8,32,64 --cache-lens 1024,8192,32768,131072 \
    --json $O/dec-peers.json 2>&1 | tail -18
else
  echo "dcc: gtests failed; no timing"; grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
