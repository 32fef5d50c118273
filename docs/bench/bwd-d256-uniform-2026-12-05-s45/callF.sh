# Session 45's plan for the three built candidates in one device call (run from the repository root):
#  - bwd-d256-uniform.patch (this folder): the d256 backward step loop without lane branches;
#  - ../d256c-oinv-2026-12-05-s45/d256-causal-o-in-v.patch: the d256 causal forward with O in V's buffer;
#  - ../bwd-softcap-grad-2026-12-05-s45/softcap-grad.patch: the softcap backward's gradient factor
#    without a branch per score.
# Here, before the call: git apply the three patches; HOPATTN_BUILD_DIR=$PWD/build-r bash scripts/gpu-pack.sh
#   -DHOPATTN_DTYPES=bf16 "-DHOPATTN_HEAD_DIMS=64;128;256" (~18 min); xz the library; move .gpu to .gpu-s45c and
#   copy its library to .gpu-exp/ab/libhopattn-s45c.so.xz; main's full library as
#   .gpu-exp/ab/libhopattn-base.so.xz; git checkout -- src. carry [.gpu-s45c, .gpu-exp].
# The patches touch different kernels (forward d256 causal; backward d256; the backward softcap
# kernels, whose d256 one carries both backward changes), so each A/B below reads one of them.
# Most valuable first.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-s45c
AB_ONLY='base s45c' AB_OP=backward AB_ROUNDS=4 AB_POINTS=256:4096:0,256:8192:0,256:2048:0,256:4096:1,256:16384:1 AB_TAG=bwd bash scripts/gpu-phases.sh ab 2>&1 | tail -9
AB_ONLY='base s45c' AB_OP=backward_softcap AB_ROUNDS=3 AB_POINTS=64:4096:1,128:4096:1,256:4096:1,128:4096:0 AB_TAG=softcap bash scripts/gpu-phases.sh ab 2>&1 | tail -7
AB_ONLY='base s45c' AB_OP=attention AB_ROUNDS=3 AB_POINTS=256:512:1,256:1024:1,256:2048:1,256:4096:1,256:16384:1,256:4096:0 AB_TAG=fwd bash scripts/gpu-phases.sh ab 2>&1 | tail -10
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
SAN_T=240 SAN_FILTER='Sm90/BackwardVsReference*bf16_d256*_b2_h8x2_q255_k127_det:Sm90/BackwardVsReference*bf16_d256*_b1_h8x2_q255_k127:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_causal_b3_h8x2_q1000_k1000:Sm90/ForwardVsReference.MatchesFp64Reference/bf16_d256_causal_b1_h8x2_q2048_k512:Sm90Softcap/BackwardVsReference*bf16_d*_causal_b1_h8x2_q255_k127_cap30' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
