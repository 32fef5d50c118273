#!/usr/bin/env bash
# Session 48's softcap call (prepared without a device; run by the next session that has one): the
# merge-ready softcap forward of branch softcap-fm (the recip score, and for bf16 d64/d128 the
# kernels without a running max up to softcap 54.7, the running-max ones above) against main.
# Needs, git-ignored in this checkout (perf-notes "Session 48" says how to rebuild them):
#   .gpu-fm/   a pack: the branch's gtest binary (test_forward.cpp with cap 80 cases), the branch's
#              tests/python (test_softcap.py with caps 54.8 and 80), main's python and bench, and as
#              lib/libhopattn.so.xz the library fmb;
#   .gpu-exp/ab/libhopattn-{main47,rs,fmb,f1,f2}.so.xz
#     main47  main (761707b's kernels; main's kernels since are SASS-identical)
#     rs      the recip score alone (session 47's candidate; fmb's running-max kernels equal it)
#     fmb     branch softcap-fm: main's objects with the branch's four softcap units
#     f1, f2  main with 1 or 2 of every 5 reciprocals on the FMA pipe instead of 3
# carry [.gpu-fm, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-rs.so.xz,
#        .gpu-exp/ab/libhopattn-fmb.so.xz, .gpu-exp/ab/libhopattn-f1.so.xz, .gpu-exp/ab/libhopattn-f2.so.xz]
# ~45 MB with the tree; ~7-8 min. Merge softcap-fm if the gtests, sanitizers and pytest pass and fmb
# beats main47 at every point in every round (perf-notes: predicted +4-6% at d64/d128).
# PACK, AB_ONLY and AB_TAG may be set by the caller (s49 callS.sh runs this with another pack).
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=${PACK:-.gpu-fm}
# 1. The softcap, window and local forward and backward gtests on fmb (cap 80 runs the running-max kernels).
GT_SHARDS=4 GT_T=150 GT_FILTER='*Softcap*:*Window*:*Local*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
# 2. Sanitizers: a fixed-max kernel (bf16 d64, cap 30, q1000) and a running-max one (bf16 d128, cap 80, q127).
SAN_T=150 SAN_FILTER='Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap80' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
# 3. Every softcap pytest (the very-negative rows at caps 30-80 among them), two shards.
PY_SHARDS=2 PY_T=200 PY_K='softcap' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|passed|failed|rc=" | head -4
# 4. The A/B (softcap 30, 3 rounds, alternating processes).
AB_ONLY=${AB_ONLY:-'main47 rs fmb f1 f2'} AB_OP=attention_softcap AB_ROUNDS=3 AB_POINTS=${AB_POINTS:-64:4096:0,64:1024:1,128:4096:1,128:16384:0} \
  AB_TAG=${AB_TAG:-scf} bash scripts/gpu-phases.sh ab 2>&1 | tail -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
