#!/usr/bin/env bash
# Session 63: does the forward's tail split still pay at d64 non-causal? Session 40 measured it there
# (+3% at d64 4k, nothing at 1k) before the d64 kernel idled its padding warpgroups (s61) and rotated
# its rounds (s62); the balance survey (balance-h100/) now reads the tensor pipe's busiest SM at 1.031
# of the mean at d64 2k and 4k, where a model of rotated rounds puts it at 1.010 / 1.021 with the
# split's 3 pieces and 1.031 without, so either the split is not engaged or it no longer balances.
# ab.py attention non-causal d64 2k / 4k / 8k and d128 8k (the control, which splits), 4 rounds:
# base (the model's split), nosplit (HOPATTN_FWD_TAIL_SPLIT=0), zbase (base again); then ncu's spread
# at d64 4k without the split. Any card (say which); ~3 min. carry [.gpu-m62].
export PACK=${PACK:-.gpu-m62} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
lib=$PWD/$PACK/lib/libhopattn.so
PYTHONPATH=$PACK/python python3 $PACK/bench/ab.py --lib base=$lib --lib nosplit=$lib --lib zbase=$lib \
  --env nosplit:HOPATTN_FWD_TAIL_SPLIT=0 --op attention --points 64:2048:0,64:4096:0,64:8192:0,128:8192:0 \
  --rounds 4 > $O/ab-split.log 2>&1
grep -v '^AB ' $O/ab-split.log | tail -8
HOPATTN_FWD_TAIL_SPLIT=0 OUT=$O HDIMS=64 CAUSAL=0 SEQLENS="2048 4096" bash docs/bench/s62-2026-12-07/callB.sh 2>&1 | tail -2
rm -f $O/*.err
