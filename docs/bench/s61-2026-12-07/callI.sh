#!/usr/bin/env bash
# Branch idle-wg: a consumer warpgroup whose 64 rows of a 192-row tile are all padding (d64 at
# 512 keys: 576 rows computed, at 1k 1152) takes the tile's turns and releases without computing
# (Mainloop::idle_tile). Library .gpu-exp/ab/libhopattn-idle.so.xz = main's objects with
# fwd_bf16_hdim64 and fp8_bf16_hdim64 from the branch (scripts/variant-lib.sh idle "" ...).
#  1. the whole gtest binary on it (4 shards), gating the rest;
#  2. compute-sanitizer memcheck/racecheck on d64 shapes with idle warpgroups;
#  3. ab.py attention d64 512..4k (non-causal and causal) and forward_fp8 d64 512 / 1k / 4k,
#     against main (base) and main under a second name (zbase), 5 / 3 rounds.
# Any card (say which); ~6 min. carry [.gpu-m60, .gpu-exp].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so
[ -f .gpu-exp/ab/libhopattn-idle.so ] || xz -T8 -dk .gpu-exp/ab/libhopattn-idle.so.xz
LIB=.gpu-exp/ab/libhopattn-idle.so GT_SHARDS=4 GT_T=240 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/idle-gt.txt | head -8
if grep -q " 0 failed" $O/idle-gt.txt; then
  mkdir -p /tmp/ilib && ln -sf $PWD/.gpu-exp/ab/libhopattn-idle.so /tmp/ilib/libhopattn.so
  LIBDIR=/tmp/ilib SAN_KERNELS=ws timeout 200 bash scripts/gpu-sanitize.sh \
    'Sm90/ForwardVsReference*bf16_d64_full_b3_h8x2_q1000_k1000:Sm90/ForwardVsReference*bf16_d64_causal_b3_h8x2_q1000_k1000:Sm90/ForwardVsReference*bf16_d64_full_b1_h8x8_q1_k1' \
    2>&1 | tee $O/idle-san.txt
  AB_ONLY="base idle" AB_OP=attention AB_ROUNDS=5 AB_TAG=bf16 \
    AB_POINTS=64:512:0,64:1024:0,64:2048:0,64:4096:0,64:512:1,64:1024:1 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -9
  AB_ONLY="base idle" AB_OP=forward_fp8 AB_ROUNDS=3 AB_TAG=fp8 AB_POINTS=64:512:0,64:1024:0,64:4096:0 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -6
else
  echo "idle: gtests failed; no sanitizer, no timing"
  grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
