# Session 47, device call A: main 47f0289 (both row-shift patches merged) on the prebuilt .gpu-rs46
# (same sources; see .gpu-exp/ab/README). carry [.gpu-rs46]. Whole gtest binary, whole pytest,
# then the forward grid with the peers and the packed-varlen table.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-rs46
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
PY_SHARDS=4 PY_T=200 bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -6
GRID_T=260 GRID_ARGS="--direction fwd --causal both --out-dir $OUT --tag s47" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -45
HOPATTN_LIBRARY=$PWD/$PACK/lib/libhopattn.so PYTHONPATH=$PWD/$PACK/python timeout 60 python3 $PACK/bench/varlen.py --hdim 64 --gpu-time 2>&1 | tail -8
echo "=== end"
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
