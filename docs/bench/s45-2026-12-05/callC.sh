# Session 45, device call C: main with the three merged changes (uniform turn, O in V's buffer, the
# predicated varlen handoff), full pack .gpu (carry [.gpu]). The whole gtest binary first, then the
# forward grid with the peers, then the FP8 grid (d128/d256 non-causal); on an H100 pytest instead
# of the FP8 grid (records for BENCHMARKS come from the H200 only).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
GT_SHARDS=4 GT_T=200 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|passed|FAIL" | head -8
GRID_T=260 GRID_ARGS="--direction fwd --causal both --out-dir $OUT --tag s45" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -45
if [[ "$gpu" == *H200* ]]; then
  GRID_T=200 GRID_ARGS="--direction fp8 --hdims 128,256 --causal 0 --out-dir $OUT --tag s45 --no-plot" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | head -16
else
  PY_SHARDS=4 PY_T=200 bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -6
fi
echo "=== end"
# Added after session 45's run (which lost four shard logs and the pytest logs to the file limit):
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
