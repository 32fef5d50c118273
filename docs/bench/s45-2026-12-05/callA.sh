# Session 45, device call A (repository root). carry [.gpu-oinv2, .gpu-ut, .gpu-vh, .gpu-exp].
#  .gpu-oinv2  O staged in V's buffer, warp chosen uniformly (bf16 d128/d256 build)
#  .gpu-ut     main + uniform-turn.patch (full build)
#  .gpu-vh     main + the varlen tile handoff read by predicated lane-0 instructions (bf16 d64 build)
#  .gpu-exp/ab libhopattn-{base,oinv2,ut,vh}.so.xz (base = main's full library)
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-ut
AB_ONLY='base oinv2 ut' AB_OP=attention AB_ROUNDS=3 AB_POINTS=128:8192:0,128:16384:0,256:2048:0,256:4096:0,256:16384:0 AB_TAG=bf16 bash scripts/gpu-phases.sh ab 2>&1 | tail -18
AB_ONLY='base ut' AB_OP=forward_fp8 AB_ROUNDS=3 AB_POINTS=256:4096:0,256:16384:0,256:4096:1,128:4096:0,128:8192:1 AB_TAG=fp8 bash scripts/gpu-phases.sh ab 2>&1 | tail -12
# varlen d64 (bf16 and FP8), packed vs fixed, each library in its own process, alternating
for r in 1 2; do for l in base vh; do
  echo "== varlen $l r$r"; HOPATTN_LIBRARY=$PWD/.gpu-exp/ab/libhopattn-$l.so PYTHONPATH=$PWD/.gpu-ut/python timeout 60 python3 .gpu-ut/bench/varlen.py --hdim 64 --gpu-time 2>&1 | grep -E "^\| (powers|uniform)" | cut -d'|' -f2-7 | tee -a $OUT/varlen-$l.log
done; done
for l in base vh; do
  echo "== varlen fp8 $l"; HOPATTN_LIBRARY=$PWD/.gpu-exp/ab/libhopattn-$l.so PYTHONPATH=$PWD/.gpu-ut/python timeout 60 python3 .gpu-ut/bench/varlen.py --fp8 --hdim 64 --gpu-time 2>&1 | grep -E "^\| (powers|uniform)" | cut -d'|' -f2-8 | tee -a $OUT/varlen-fp8-$l.log
done
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|passed|FAIL" | head -8
PACK=.gpu-vh GT_SHARDS=2 GT_T=120 GT_FILTER='*VarlenVsReference*:Sm90Varlen.*:Sm90Fp8Varlen*:Sm90VarlenValidation.*:*KvCache*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|passed|FAIL" | head -8
PACK=.gpu-vh SAN_T=150 SAN_FILTER='Sm90/VarlenVsReference.MatchesPerSequenceFp64Reference/bf16_d64_causal_h8x2_random40:Sm90Fp8Varlen/Fp8VarlenVsFixed.*bf16_d64_causal*many_tiles' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
echo "=== end"
