#!/usr/bin/env bash
# For the next device session (prepared in session 49, not yet run): the softcap forward with the
# fixed max and O's normaliser on the tensor cores (branch softcap-fm-tcsum, 871cb42). It is meant
# to fix softcap-fm's one-key rows (pytest [*-window] dq; the new test_gpu_rows_that_see_one_key_*)
# and keep fm's measured +5-10%.
# Needs, git-ignored in this checkout:
#   .gpu-fmt/  .gpu-fm's gtest binary (the branch adds no gtest) with the branch's tests/python,
#              and as lib/libhopattn.so.xz the library fmt2 (main's objects + the branch's four
#              fwd_softcap units, scripts/variant-lib.sh with SRC_ROOT=/work/wt-fm);
#   .gpu-exp/ab/libhopattn-{main47,rs,fmb,fmt2}.so.xz (rs: the recip score alone, running max).
# carry [.gpu-fmt, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-rs.so.xz, .gpu-exp/ab/libhopattn-fmb.so.xz,
#        .gpu-exp/ab/libhopattn-fmt2.so.xz]; ~6 min.
# Merge softcap-fm-tcsum if 1-3 pass and fmt2 keeps most of fmb's gain over main47.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-fmt
# 1. The softcap, window and local gtests (cap 80: the running-max kernels).
GT_SHARDS=4 GT_T=150 GT_FILTER='*Softcap*:*Window*:*Local*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
# 2. Sanitizers on a fixed-max kernel (HMMA normaliser) and a running-max one.
SAN_T=150 SAN_FILTER='Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap80' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
# 3. Every softcap pytest (the one-key rows, the window varlen dq, the very-negative rows), 2 shards.
PY_SHARDS=2 PY_T=200 PY_K='softcap' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -4
# 4. The A/B: softcap 30, 3 rounds, alternating processes.
AB_ONLY='main47 rs fmb fmt2' AB_OP=attention_softcap AB_ROUNDS=3 AB_POINTS=64:4096:0,64:1024:1,128:4096:1,128:16384:0 \
  AB_TAG=fmt bash scripts/gpu-phases.sh ab 2>&1 | tail -7
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
