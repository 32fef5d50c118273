# Session 47, device call C: libhopattn-sc2 = main 374eab2 + the softcap FMA-pipe reciprocal (699468a)
# + the one-FFMA cap (forward and backward softcap objects rebuilt, the library relinked). carry
# [.gpu-rs46, .gpu-exp]; under 4 min (the session's last device time).
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
SC=$PWD/.gpu-exp/ab/libhopattn-sc2.so
LIB=$SC GT_SHARDS=4 GT_T=100 GT_FILTER='*Softcap*:*Window*:*Local*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
AB_ONLY='rs46 sc2' AB_OP=attention_softcap AB_ROUNDS=3 AB_POINTS=64:4096:0,64:1024:1,128:4096:1,128:16384:0,256:4096:0 AB_TAG=sc2 bash scripts/gpu-phases.sh ab 2>&1 | tail -7
AB_ONLY='rs46 sc2' AB_OP=backward_softcap AB_ROUNDS=3 AB_POINTS=64:4096:1,128:4096:0 AB_TAG=sc2bwd bash scripts/gpu-phases.sh ab 2>&1 | tail -4
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
