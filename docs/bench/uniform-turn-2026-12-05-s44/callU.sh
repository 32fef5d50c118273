# Session 44's plan for uniform-turn.patch (run on the GPU machine from the repository root).
# carry [.gpu-ut, .gpu-exp]: .gpu-ut = a full pack of main + the patch; .gpu-exp/ab holds
# libhopattn-base.so.xz (main) and libhopattn-ut.so.xz (the patch). Most valuable first: the A/B.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-ut
AB_ONLY='base ut' AB_OP=forward_fp8 AB_ROUNDS=3 AB_POINTS=256:4096:0,256:16384:0,256:4096:1,128:4096:0 AB_TAG=fp8 bash scripts/gpu-phases.sh ab 2>&1 | tail -7
AB_ONLY='base ut' AB_OP=attention AB_ROUNDS=3 AB_POINTS=256:4096:0,128:8192:0,64:4096:1 AB_TAG=bf16 bash scripts/gpu-phases.sh ab 2>&1 | tail -6
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
