# The H200 record at main (issues 3-6), for whichever session gets an H200: the library
# .gpu-exp/ab/libhopattn-main47.so (main 761707b; 1223040's kernels are the same SASS) with the
# pack .gpu-rs46's tests and benches. carry [.gpu-rs46, .gpu-exp]; ~9 min, so two calls on one warm
# machine: `bash callE.sh fwd` then `bash callE.sh rest`. Only an H200's figures go against the bars.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-rs46
xz -T8 -dkf .gpu-exp/ab/libhopattn-main47.so.xz
export LIB=$PWD/.gpu-exp/ab/libhopattn-main47.so
if [ "${1:-fwd}" = fwd ]; then
  GRID_T=300 GRID_ARGS="--direction fwd --causal both --out-dir $OUT --tag h200" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -45
  GRID_T=150 GRID_ARGS="--direction fp8 --hdims 128,256 --causal 0 --out-dir $OUT --tag h200 --no-plot" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | head -16
else
  GRID_T=300 GRID_ARGS="--direction bwd --out-dir $OUT --tag h200 --no-plot" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
  HOPATTN_LIBRARY=$LIB PYTHONPATH=$PWD/$PACK/python timeout 60 python3 $PACK/bench/varlen.py --hdim 64 --gpu-time 2>&1 | tail -6
fi
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
