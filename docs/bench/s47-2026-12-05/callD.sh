# Session 48's first device call (prepared in session 47): the softcap forward's candidates against
# main, on .gpu-rs46 (tests and scripts; its library is main's except the softcap forward) and
# .gpu-exp/ab/libhopattn-{main47,f1,f2,rs}.so.xz, built by scripts/variant-lib.sh from main 761707b's
# objects:
#   main47  main itself (3 of 5 reciprocals on the FMA pipe, one_ffma for the rest)
#   f1, f2  1 or 2 of 5 on the FMA pipe (-DHOPATTN_SOFTCAP_RCP_ON_FMA_OF5=1/2; bf16 d64/d128 units)
#   rs      the softmax on -r (-DHOPATTN_SOFTCAP_RECIP_SCORE=1, branch softcap-recip-score; bf16 and
#           fp16 d64/d128 units)
#   fm      rs without a running max for bf16 (-DHOPATTN_SOFTCAP_FIXED_MAX=1 too, branch
#           softcap-fixed-max; bf16 d64/d128 units; caps above 54.7 give NaN in this build)
# carry [.gpu-rs46, .gpu-exp]; ~7 min. Merge rs if its tests pass and it gains; move the share if f1
# or f2 beats main47 in every round at d64 and d128.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
for L in rs fm; do
  LIB=$PWD/.gpu-exp/ab/libhopattn-$L.so GT_SHARDS=4 GT_T=100 GT_FILTER='*Softcap*:*Window*:*Local*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
done
for RS in $PWD/.gpu-exp/ab/libhopattn-{rs,fm}.so; do
LIB=$RS SAN_T=150 SAN_FILTER='Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap2' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
done
AB_ONLY='main47 f1 f2 rs fm' AB_OP=attention_softcap AB_ROUNDS=3 AB_POINTS=64:4096:0,64:1024:1,128:4096:1,128:16384:0 AB_TAG=scd bash scripts/gpu-phases.sh ab 2>&1 | tail -7
# pytest from this checkout's tests (the pack's copy predates the very-negative rows' test):
LIB=$PWD/.gpu-exp/ab/libhopattn-main47.so PY_T=100 PY_ARGS=$PWD/tests/python/test_softcap.py PY_K='very_negative' bash scripts/gpu-phases.sh py 2>&1 | tail -2
for L in rs fm; do
  LIB=$PWD/.gpu-exp/ab/libhopattn-$L.so PY_SHARDS=2 PY_T=150 PY_ARGS=$PWD/tests/python PY_K='softcap' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -3
done
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
