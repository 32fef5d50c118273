nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-oinv2
AB_ONLY='base oinv2' AB_OP=attention AB_ROUNDS=3 AB_POINTS=128:8192:0,128:16384:0,256:2048:0,256:4096:0,256:16384:0 bash scripts/gpu-phases.sh ab 2>&1 | tail -8
HOPATTN_D128_KEY_TILE=176 GT_SHARDS=4 GT_T=150 GT_FILTER='Sm90/ForwardVsReference.*bf16_d128*:Sm90/ForwardVsReference.*bf16_d256*:Sm90Window/ForwardVsReference.*bf16*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
SAN_T=150 SAN_FILTER='Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d128_full_b1_h8x1_q4097_k4097:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_full_b3_h8x1_q1000_k1000' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
[ -f .gpu-m44/lib/libhopattn.so ] || xz -T8 -dk .gpu-m44/lib/libhopattn.so.xz
for a in "128 16" "256 8"; do set -- $a; LD_LIBRARY_PATH=$PWD/.gpu-m44/lib timeout 60 .gpu-m44/bin/hopattn-bench --fp8 --hdim $1 --seqlen 4096 --batch 4 --heads $2 2>&1 | tail -2; done
