# Session 45's plan for d256-causal-o-in-v.patch (O staged in V's buffer for the d256 causal kernel).
# Here, before the call: git apply the patch; HOPATTN_BUILD_DIR=$PWD/build-r bash scripts/gpu-pack.sh
#   -DHOPATTN_DTYPES=bf16 -DHOPATTN_HEAD_DIMS=256 (~6 min: two kernel units); xz the library; move .gpu
#   to .gpu-d256c and copy its library to .gpu-exp/ab/libhopattn-d256c.so.xz; main's full library as
#   .gpu-exp/ab/libhopattn-base.so.xz; git checkout -- src. carry [.gpu-d256c, .gpu-exp].
# Run from the repository root on the GPU machine. Most valuable first: the A/B, then the tests.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-d256c
AB_ONLY='base d256c' AB_OP=attention AB_ROUNDS=5 AB_POINTS=256:512:1,256:1024:1,256:2048:1,256:4096:1,256:16384:1,256:4096:0 AB_TAG=d256c bash scripts/gpu-phases.sh ab 2>&1 | tail -9
GT_SHARDS=4 GT_T=150 GT_FILTER='*Forward*:*TailSplit*:*KvCache*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
SAN_T=200 SAN_FILTER='Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_causal_b3_h8x2_q1000_k1000:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_causal_b1_h8x2_q2048_k512:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_causal_b1_h8x2_q4097_k4097' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
