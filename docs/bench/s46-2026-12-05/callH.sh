# Session 46, device call H: main 5160b7d (softcap-grad and d256 causal O-in-V merged) plus the d64
# causal row shift (kRowShift, uncommitted at pack time), full pack .gpu-s46; A/B library
# .gpu-exp/ab/libhopattn-s46.so.xz (the same library) against libhopattn-base.so.xz (04f61ab).
# carry [.gpu-s46, .gpu-exp]. Most valuable first; ~350 s.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-s46
AB_ONLY='base s46' AB_OP=attention AB_ROUNDS=3 AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:8192:1,256:1024:1,64:4096:0 AB_TAG=rowshift bash scripts/gpu-phases.sh ab 2>&1 | tail -11
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
SAN_T=150 SAN_FILTER='Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d64_causal_b3_h8x2_q1000_k1000:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d64_causal_b3_h8x2_q2048_k512:Sm90/ForwardVsReference.MatchesFp64Reference/fp16_d64_causal_b1_h8x1_q17_k17:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d64_causal_b3_h8x2_q127_k255' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
