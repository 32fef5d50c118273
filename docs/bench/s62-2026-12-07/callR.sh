#!/usr/bin/env bash
# Branch rot: the non-causal d64 round-robin rotated by one slot a round (round_rotation.hpp), so
# that no CTA draws the cheap last query block of 192-row tiles in every round (132 CTAs and
# nb = 3 / 6 / 11 / 22 alias at 512 / 1k / 2k / 4k). Model (tests/cpu/test_round_rotation.cpp):
# busiest CTA 1.160 -> 1.031 of the mean at 512 / 1k (+12.5%), 1.063 -> 1.031 at 2k / 4k (+3%).
# Library .gpu-exp/ab/libhopattn-rot.so.xz = main's objects with fwd_bf16_hdim64 and
# fp8_bf16_hdim64 from the branch (scripts/variant-lib.sh rot "" ...).
#  1. the whole gtest binary on it (4 shards), gating the rest;
#  2. ab.py attention d64 512..4k non-causal (5 rounds), forward_fp8 d64 512 / 1k / 2k (3 rounds),
#     against main (base) and main under a second name (zbase);
#  3. ncu on rot at d64 512 / 1k: the tensor pipe's min / mean / max over SMs (main's: session 62 callC).
# Any card (say which); ~6 min. carry [.gpu-m61, .gpu-exp].
export PACK=${PACK:-.gpu-m61} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so
[ -f .gpu-exp/ab/libhopattn-rot.so ] || xz -T8 -dk .gpu-exp/ab/libhopattn-rot.so.xz
LIB=.gpu-exp/ab/libhopattn-rot.so GT_SHARDS=4 GT_T=240 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/rot-gt.txt | head -4
if grep -q " 0 failed" $O/rot-gt.txt; then
  AB_ONLY="base rot" AB_OP=attention AB_ROUNDS=5 AB_TAG=bf16 AB_POINTS=64:512:0,64:1024:0,64:2048:0,64:4096:0 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -7
  AB_ONLY="base rot" AB_OP=forward_fp8 AB_ROUNDS=3 AB_TAG=fp8 AB_POINTS=64:512:0,64:1024:0,64:2048:0 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -6
  for s in 512 1024; do
    LIB=.gpu-exp/ab/libhopattn-rot.so NCU_TAG=rot-d64-$s NCU_ARGS="--op attention --hdim 64 --seqlen $s" \
      bash scripts/gpu-phases.sh ncu 2>&1 | grep -E "duration|tensor_cycles_active.(avg|min|max)"
  done
else
  echo "rot: gtests failed; no timing"
  grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
