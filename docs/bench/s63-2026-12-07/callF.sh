#!/usr/bin/env bash
# Session 63: d64 causal 1k folded. The balance survey (balance-h100/balance.md) left one point whose
# busiest SM is above the tail's 1.031 (4096 tiles on 132 CTAs: 4 CTAs run a 32nd round): d64 causal
# 1k, 1.068. There 192-row tiles take the sectioned longest-first order with the snake; a model of the
# static round-robin (tile cost = key blocks + 1.5) puts its busiest CTA at 1.042 of the mean, the
# fold at 1.031 (with the row shift nb = 6 and every unit u, 5-u costs 9 blocks), and at 2k (nb = 11,
# odd: a half-cost middle unit per head) the fold at 1.155 against 1.022. Prediction: the fold +1 to
# +3.5% at 1k, -10% or worse at 2k. HOPATTN_WS_FOLD=1 forces it: main's library under a knob.
#  1. the d64 causal forward gtests with the fold forced (gating the rest);
#  2. ab.py attention d64 causal 1k / 2k, 5 rounds: base, fold, zbase (base again);
#  3. ncu's tensor-pipe spread at 1k folded (callB.sh).
# Any card (say which); ~4 min. carry [.gpu-m62].
export PACK=${PACK:-.gpu-m62} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
lib=$PWD/$PACK/lib/libhopattn.so
HOPATTN_WS_FOLD=1 GT_SHARDS=4 GT_T=200 GT_FILTER='Sm90/ForwardVsReference.*_d64_causal*:Sm90Repeat.*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/fold-gt.txt | head -4
if grep -q " 0 failed" $O/fold-gt.txt; then
  PYTHONPATH=$PACK/python python3 $PACK/bench/ab.py --lib base=$lib --lib fold=$lib --lib zbase=$lib \
    --env fold:HOPATTN_WS_FOLD=1 --op attention --points 64:1024:1,64:2048:1 --rounds 5 > $O/ab-fold.log 2>&1
  grep -v '^AB ' $O/ab-fold.log | tail -8
  HOPATTN_WS_FOLD=1 OUT=$O HDIMS=64 CAUSAL=1 SEQLENS=1024 bash docs/bench/s62-2026-12-07/callB.sh 2>&1 | tail -1
else
  echo "fold: gtests failed; no timing"; grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
rm -f $O/*.err
