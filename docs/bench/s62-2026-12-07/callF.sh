#!/usr/bin/env bash
# Branch fin-early: the softmax's row-end arithmetic (quad sums, 1/sum, logf) issued between the
# tile's last P V and its wait (Softmax::end_rows), so it runs under that GEMM; finalize only scales
# O. Same operations in the same order per row, so outputs should be bitwise main's.
# Library .gpu-exp/ab/libhopattn-fin.so.xz = main's objects with fwd_bf16_hdim128, fwd_bf16_hdim64
# and fp8_bf16_hdim128 from the branch (scripts/variant-lib.sh fin "" ...).
#  1. the whole gtest binary on it (4 shards), gating the rest;
#  2. ab.py attention d128 512 / 1k / 4k, causal 1k, d64 512 / 1k (5 rounds) and forward_fp8 d128
#     512 / 1k / 4k (3 rounds), against main (base) and main under a second name (zbase).
# Any card (say which); ~5 min. carry [.gpu-m61, .gpu-exp].
export PACK=${PACK:-.gpu-m61} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so
[ -f .gpu-exp/ab/libhopattn-fin.so ] || xz -T8 -dk .gpu-exp/ab/libhopattn-fin.so.xz
LIB=.gpu-exp/ab/libhopattn-fin.so GT_SHARDS=4 GT_T=240 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/fin-gt.txt | head -8
if grep -q " 0 failed" $O/fin-gt.txt; then
  AB_ONLY="base fin" AB_OP=attention AB_ROUNDS=5 AB_TAG=bf16 \
    AB_POINTS=128:512:0,128:1024:0,128:4096:0,128:1024:1,64:512:0,64:1024:0 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -9
  AB_ONLY="base fin" AB_OP=forward_fp8 AB_ROUNDS=3 AB_TAG=fp8 AB_POINTS=128:512:0,128:1024:0,128:4096:0 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -6
else
  echo "fin: gtests failed; no timing"
  grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
