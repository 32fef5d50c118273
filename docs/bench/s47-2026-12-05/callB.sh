# Session 47, device call B: the softcap forward's reciprocal on the FMA pipe for 3 of every 5
# scores (branch softcap-rcp-fma). .gpu-exp/ab/libhopattn-sc.so.xz = main 374eab2 + that change
# (bf16/fp16 d64/d128 softcap objects rebuilt, the library relinked); rs46 = main's kernels.
# carry [.gpu-rs46, .gpu-exp]; ~4 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
SC=$PWD/.gpu-exp/ab/libhopattn-sc.so
LIB=$SC GT_SHARDS=4 GT_T=150 GT_FILTER='*Softcap*:*Window*:*Local*:Sm90/ForwardVsReference.*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
LIB=$SC SAN_T=150 SAN_FILTER='Sm90Softcap/ForwardVsReference.*bf16_d64_*q1000*cap30:Sm90Softcap/ForwardVsReference.*bf16_d128_*q127*cap2' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
AB_ONLY='rs46 sc' AB_OP=attention_softcap AB_ROUNDS=3 AB_POINTS=64:4096:0,64:4096:1,64:1024:1,128:4096:0,128:4096:1,128:16384:0,256:4096:0 AB_TAG=sc bash scripts/gpu-phases.sh ab 2>&1 | tail -10
LIB=$SC PY_SHARDS=2 PY_T=150 PY_K='softcap or window or local' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -4
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
