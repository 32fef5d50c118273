#!/usr/bin/env bash
# Session 60: the d128 non-causal N = 128 kernel (seqlen_k <= 1k) with cuDNN's shared-memory plan.
# ncu (short-h100/) showed cuDNN's d128 kernel at 512/1k with the same grid (132 x 384 threads, 168
# registers) but 232 448 B of shared memory: Q + 3 stages of K and V (224 KiB), ours Q + O + 2
# stages (193 KiB). Libraries: s3 = 3 stages (O then staged in V's buffer, no separate O fitting),
# o2v = 2 stages with O in V (to tell the two changes apart); both main's objects with fwd_bf16_hdim128
# built from main + stages.patch (-DHOPATTN_FWD_SHORT_D128_STAGES=3, with fwd_fp16_hdim128 too /
# _SEPARATE_O=0). ab.py against main (base, zbase) at 512 and 1k, 5 rounds. Any card (say which);
# ~6 min. carry [PACK, .gpu-exp].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so
for v in s3 o2v; do [ -f .gpu-exp/ab/libhopattn-$v.so ] || xz -T8 -dk .gpu-exp/ab/libhopattn-$v.so.xz; done
# s3 is what main would ship with 3 stages (both 16-bit d128 forward units rebuilt): the whole gtest
# binary first, then the timing, then pytest (the last is skipped if time runs short).
LIB=.gpu-exp/ab/libhopattn-s3.so GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -14
AB_ONLY="base s3 o2v" AB_OP=attention AB_ROUNDS=5 AB_POINTS=128:512:0,128:1024:0 \
  AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -8
LIB=.gpu-exp/ab/libhopattn-s3.so PY_SHARDS=4 PY_T=170 bash scripts/gpu-phases.sh py 2>&1 | grep "shard"
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
