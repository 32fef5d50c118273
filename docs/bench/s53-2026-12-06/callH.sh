#!/usr/bin/env bash
# Session 53's last device seconds: on an H200 only, issue 5's open point (d256 backward non-causal,
# 1.040x cuDNN at 4k in session 36) on main's build (pack .gpu-m53; the backward kernels are
# SASS-identical to session 36's record's through main47). carry [.gpu-m53]; ~4 min with a start.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*) export PACK=.gpu-m53
          GRID_T=240 GRID_ARGS="--direction bwd --hdims 256 --causal 0 --seqlens 1k,4k,8k,16k --out-dir $OUT --tag m53-d256-h200 --no-plot" \
            bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -8
          bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
  *) echo "not an H200; exiting" ;;
esac
