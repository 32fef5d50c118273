#!/usr/bin/env bash
# Session 53 probe: FP8 d128 with 192-row tiles (three consumer warpgroups at 160 registers), key
# tiles of 64 (HOPATTN_FP8_D128_KEYS unset) or 128 (=128), forced by HOPATTN_FP8_D128_ROWS=192
# (branch fp8-d128-m192, library f8m192 = main's objects + the branch's fp8_bf16_hdim128).
# carry [.gpu-r128, .gpu-exp/ab/libhopattn-f8m192.so.xz]; ~5 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-r128
ab=$PWD/.gpu-exp/ab
xz -T8 -dkf $ab/libhopattn-f8m192.so.xz
for keys in 64 128; do
  HOPATTN_FP8_D128_ROWS=192 HOPATTN_FP8_D128_KEYS=$keys GT_T=120 GT_SHARDS=2 LIB=$ab/libhopattn-f8m192.so \
    GT_FILTER='Sm90Fp8/Fp8*VsReference.*bf16_d128*:Sm90Fp8Repeat.*' \
    bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
done
AB_OP=forward_fp8 AB_ROUNDS=${ROUNDS:-2} AB_POINTS=128:1024:0,128:4096:0,128:16384:0,128:4096:1,128:16384:1 \
  AB_EXTRA="--lib m192n64=$ab/libhopattn-f8m192.so --env m192n64:HOPATTN_FP8_D128_ROWS=192 --lib m192n128=$ab/libhopattn-f8m192.so --env m192n128:HOPATTN_FP8_D128_ROWS=192 --env m192n128:HOPATTN_FP8_D128_KEYS=128" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -9
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
