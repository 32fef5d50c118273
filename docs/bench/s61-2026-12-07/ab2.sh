#!/usr/bin/env bash
# The second A/B of branch idle-wg (run inline as one device command after callI and callJ on the
# same H100): forward_fp8 d64, 5 rounds, both masks; attention_fp8 (pre-pass included) d64, 3 rounds.
export PACK=.gpu-m60 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so
[ -f .gpu-exp/ab/libhopattn-idle.so ] || xz -T8 -dk .gpu-exp/ab/libhopattn-idle.so.xz
AB_ONLY="base idle" AB_OP=forward_fp8 AB_ROUNDS=5 AB_TAG=fp8b AB_POINTS=64:512:0,64:1024:0,64:2048:0,64:512:1,64:1024:1 \
  AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -8
AB_ONLY="base idle" AB_OP=attention_fp8 AB_ROUNDS=3 AB_TAG=fp8att AB_POINTS=64:512:0,64:1024:0 \
  AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -5
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
