#!/usr/bin/env bash
# s56 call 5: where a short d128 non-causal call's time goes (issue 3: 512 / 1k at 0.93x cuDNN on
# the H200, FA3 0.10-0.16 ahead there). Library trace = main 2b843ab's objects with fwd_bf16_hdim128
# built with -DHOPATTN_FWD_TRACE=1. Run 1: the key tile forced to 128, no cluster, no tail split,
# at 512 / 1k / 2k / 4k, so that tile time against key blocks fits a per-tile cost (intercept) and
# a per-block one (slope). Run 2: the default choices at 1k and 16k. carry [.gpu-m56, .gpu-exp].
nvidia-smi --query-gpu=name --format=csv,noheader
ab=$PWD/.gpu-exp/ab
O=${OUT:-/tmp/out}
mkdir -p $O
[ -f $ab/libhopattn-trace.so ] || xz -T8 -dk $ab/libhopattn-trace.so.xz
d=/tmp/l-trace && mkdir -p $d && ln -sf $ab/libhopattn-trace.so $d/libhopattn.so
run() { LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$ab/libhopattn-trace.so HOPATTN_BWD_TRACE=1 PYTHONPATH=$PWD/${PACK:-.gpu-m56}/python \
  PYTHONUNBUFFERED=1 timeout 150 "$@"; }
run env HOPATTN_D128_KEY_TILE=128 HOPATTN_FWD_CLUSTER=0 HOPATTN_FWD_TAIL_SPLIT=0 python3 bench/fwd_trace.py \
  --points 128:512:0,128:1024:0,128:2048:0,128:4096:0 --dump $O 2>&1 | grep -v "^warning" | tee $O/trace-n128.txt
echo "n128 rc=${PIPESTATUS[0]}"
run python3 bench/fwd_trace.py --points 128:1024:0,128:16384:0 2>&1 | grep -v "^warning" | tee $O/trace-default.txt
echo "default rc=${PIPESTATUS[0]}"
(cd $O && tar czf logs.tgz --remove-files *.csv *.txt)
