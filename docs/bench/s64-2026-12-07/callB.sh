#!/usr/bin/env bash
# Issue 5's last bar on the H200 alone, for a session with ~300 s of device time left: the backward's
# d256 non-causal rows at 4k / 8k / 16k (bar >= 1.05x cuDNN at 4k: 1.040x on the H200 in session 36,
# 1.11x on an H100 in session 60), peers in the same process (compare.py, the grid's protocol).
# carry [.gpu-m63] (main be01086; the backward code is unchanged since session 60's grid). ~70 s.
# An H200 only (needs_h200); exits 3 on another card.
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200"; exit 3 ;; esac
mkdir -p $O/bwd
OUT=$O/bwd GRID_T=110 NO_BUNDLE=1 \
  GRID_ARGS="--direction bwd --hdims 256 --seqlens 4k,8k,16k --causal 0 --out-dir $O/bwd --tag h200" \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=|done" | cut -d'|' -f2-11 | head -30
