#!/usr/bin/env bash
# Session 53 probe: d256 with 64-key tiles (no key padding at 512 keys, where 80-key tiles compute
# 560), forced by HOPATTN_D256_KEY_TILE=64 (branch d256-n64, library d256n64 = main's objects +
# the branch's fwd_bf16_hdim256). carry [.gpu-r128, .gpu-exp/ab/libhopattn-d256n64.so.xz]; ~4 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-r128
ab=$PWD/.gpu-exp/ab
xz -T8 -dkf $ab/libhopattn-d256n64.so.xz
HOPATTN_D256_KEY_TILE=64 GT_T=150 GT_SHARDS=4 LIB=$ab/libhopattn-d256n64.so \
  GT_FILTER='Sm90/ForwardVsReference.*bf16_d256*:Sm90Repeat.*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
AB_OP=attention AB_ROUNDS=${ROUNDS:-3} AB_POINTS=256:512:0,256:512:1,256:1024:0,256:1024:1,256:2048:1,256:4096:0 \
  AB_EXTRA="--lib n64=$ab/libhopattn-d256n64.so --env n64:HOPATTN_D256_KEY_TILE=64" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -10
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
