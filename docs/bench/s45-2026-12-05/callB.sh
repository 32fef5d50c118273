# Session 45, device call B: the O-in-V build's tests (only if it is to be merged), and the 16-bit P.V
# FP8 kernel alone. carry [.gpu-oinv2, .gpu-ut].
nvidia-smi --query-gpu=name --format=csv,noheader
PACK=.gpu-oinv2 HOPATTN_D128_KEY_TILE=176 GT_SHARDS=4 GT_T=150 GT_FILTER='Sm90/ForwardVsReference.*bf16_d128*:Sm90/ForwardVsReference.*bf16_d256*:Sm90Window/ForwardVsReference.*bf16*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|passed|FAIL" | head -8
PACK=.gpu-oinv2 SAN_T=150 SAN_FILTER='Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d128_full_b1_h8x1_q4097_k4097:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_full_b3_h8x1_q1000_k1000' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
for a in "128 16" "256 8"; do set -- $a; LD_LIBRARY_PATH=$PWD/.gpu-ut/lib timeout 60 .gpu-ut/bin/hopattn-bench --fp8 --hdim $1 --seqlen 4096 --batch 4 --heads $2 2>&1 | tail -6; done
