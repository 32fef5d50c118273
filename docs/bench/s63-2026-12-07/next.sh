#!/usr/bin/env bash
# The H200 record grids, one direction a call (s63 plan; s62's next.sh `grid` runs both, ~10 min with
# the start, more than a session has left once a few starts have failed). Packs do not survive a new
# checkout: build main and pack it (`PACK_DIR=.gpu-m62 PACK_SLIM=1 bash scripts/gpu-pack.sh`), then
# carry [.gpu-m62]. An H200 only (needs_h200); exits 3 on another card.
#  bwd  issue 5's backward grid (230 s at most): the bar left is d256 non-causal 4k >= 1.05x cuDNN
#       (1.040x on the H200 in session 36; 1.11x on an H100 in session 60).
#  fwd  issue 3's forward grid (320 s at most).
#  bwd256  the backward's d256 rows alone (150 s at most; for a call with ~350 s of budget left).
export PACK=${PACK:-.gpu-m62} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
d=${1:-bwd}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200: the record grid runs on the H200 only"; exit 3 ;; esac
case $d in fwd) t=320 a="--direction fwd" ;; bwd) t=230 a="--direction bwd" ;; bwd256) t=150 a="--direction bwd --hdims 256" ;; esac
mkdir -p $O/$d
OUT=$O/$d GRID_T=$t GRID_ARGS="$a --out-dir $O/$d --tag h200" NO_BUNDLE=1 \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=|done" | cut -d'|' -f2-11 | head -60
