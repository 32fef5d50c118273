#!/usr/bin/env bash
# Session 48, on an H200 only: issue 5's record at main. The backward grid (compare.py --direction
# bwd, peers in the same process), then the sanitizers on a small backward grid (bf16 d64/d128/d256,
# causal and not, deterministic and not) and the deterministic mode's bitwise test, and the packed
# batches' ratio. Library: main47 (main's kernels are SASS-identical to it). carry [.gpu-rs46,
# .gpu-exp/ab/libhopattn-main47.so.xz]; ~7 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-rs46
xz -T8 -dkf .gpu-exp/ab/libhopattn-main47.so.xz
export LIB=$PWD/.gpu-exp/ab/libhopattn-main47.so
GRID_T=300 GRID_ARGS="--direction bwd --out-dir $OUT --tag h200" bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -40
# memcheck and racecheck on gpu-sanitize.sh's default backward set: bf16 d64/d128/d256 at q255 x k127,
# deterministic (b2) and not (b1), causal and not.
SAN_T=180 bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=" | head -6
GT_T=120 GT_FILTER='BackwardDeterminism.*:Sm90/BackwardVsReference.*bf16_d*_b1_h8x2_q127_k255' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
