#!/usr/bin/env bash
# Session 50 (prepared, not yet run): the forward trace with each tile's start split (main 82e43a3,
# branch fwd-trace-split; library trace2 = main's objects with fwd_bf16_hdim64/128 built with
# -DHOPATTN_FWD_TRACE=1; key loops 618 / 663 at d64, main's 617 / 663). Session 50's trace put a
# median 0.51 us between an SM's d64 tiles and a causal key block at 17% over a non-causal one;
# the start line says how much of a tile's start is setup after the scheduler, the wait for Q and
# its first K, and the first S GEMM with its ping-pong turn (main's bench/fwd_trace.py from 82e43a3
# reads the start records); ~2 min.
# carry [.gpu-rs46, .gpu-exp/ab/libhopattn-trace2.so.xz]
nvidia-smi --query-gpu=name --format=csv,noheader
ab=$PWD/.gpu-exp/ab
O=${OUT:-/tmp/out}
mkdir -p $O
[ -f $ab/libhopattn-trace2.so ] || xz -T8 -dk $ab/libhopattn-trace2.so.xz
d=/tmp/l-trace2 && mkdir -p $d && ln -sf $ab/libhopattn-trace2.so $d/libhopattn.so
LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$ab/libhopattn-trace2.so HOPATTN_BWD_TRACE=1 PYTHONPATH=$PWD/.gpu-rs46/python \
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/fwd_trace.py \
  --points 64:512:1,64:1024:1,64:4096:1,64:1024:0,64:4096:0,128:4096:0,128:4096:1 2>&1 | tee $O/fwd-trace2.txt
echo "fwd_trace rc=${PIPESTATUS[0]}"
