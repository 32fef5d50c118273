# callJ.sh and callK.sh in one device call (~5 min), on the prebuilt .gpu-rs46 (both row-shift
# patches; see callJ.sh's header). carry [.gpu-rs46, .gpu-exp]; timeout_s 600. Merge each patch whose
# tests pass and whose A/B gains; then run the whole gtest binary and pytest on the merged main.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
GT_SHARDS=4 GT_T=150 GT_FILTER='*Fp8*:*Varlen*:*KvCache*:Sm90/ForwardVsReference.*d64*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
SAN_T=150 SAN_FILTER='Sm90Fp8/*d64_causal*q1000*:Sm90/VarlenVsReference.MatchesPerSequenceFp64Reference/bf16_d64_causal_h8x2_random40' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
AB_ONLY='base rs46' AB_OP=forward_fp8 AB_ROUNDS=3 AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:16384:1 AB_TAG=fp8rs bash scripts/gpu-phases.sh ab 2>&1 | tail -7
for r in 1 2; do for l in base rs46; do
  echo "== varlen $l r$r"; HOPATTN_LIBRARY=$PWD/.gpu-exp/ab/libhopattn-$l.so PYTHONPATH=$PWD/$PACK/python timeout 60 python3 $PACK/bench/varlen.py --hdim 64 --gpu-time 2>&1 | grep -E "^\| (powers|uniform)" | cut -d'|' -f2-7 | tee -a $OUT/varlen-$l.log
done; done
PY_SHARDS=4 PY_T=150 PY_ARGS='tests/python -k fp8 or varlen or kvcache' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
