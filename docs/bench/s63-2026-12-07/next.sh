#!/usr/bin/env bash
# The H200 record grids, one direction a call (s63 plan; s62's next.sh `grid` runs both, ~10 min with
# the start, more than a session has left once a few starts have failed). Packs do not survive a new
# checkout: build main and pack it (`PACK_DIR=.gpu-m63 PACK_SLIM=1 bash scripts/gpu-pack.sh`), then
# carry [.gpu-m63 (be01086: main with the decode padding-row skip)]. An H200 only (needs_h200); exits 3 on another card.
#  bwd  issue 5's backward grid (230 s at most): the bar left is d256 non-causal 4k >= 1.05x cuDNN
#       (1.040x on the H200 in session 36; 1.11x on an H100 in session 60).
#  fwd  issue 3's forward grid (320 s at most).
#  bwd256  the backward's d256 rows alone (150 s at most; for a call with ~350 s of budget left).
#  decprof  any card: issue 6's 1k column (session 63 on an H100: hopattn / cuDNN 0.85 / 0.95 / 0.97
#        at batch 1 / 8 / 32), kernel by kernel: bench/decode_profile.py, hopattn and cuDNN,
#        batch 1 / 8 / 32 / 64 at 1k and 8k (~1 min). Pack main's build first (the decode skip).
# Also prepared (on branch decode-cluster-combine, worktree /work/wt-dcc): callX.sh there, the decode
# splits combined in clusters (any card, ~5 min; perf-notes "Decode: the padding rows' softmax skipped").
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
d=${1:-bwd}
if [ $d = decprof ]; then
  p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
  PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib timeout 200 \
    python3 bench/decode_profile.py --batches 1,8,32,64 --cache-lens 1024,8192 --peers 2>&1 | tee $O/decprof.txt
  exit
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200: the record grid runs on the H200 only"; exit 3 ;; esac
case $d in fwd) t=320 a="--direction fwd" ;; bwd) t=230 a="--direction bwd" ;; bwd256) t=150 a="--direction bwd --hdims 256" ;; esac
mkdir -p $O/$d
OUT=$O/$d GRID_T=$t GRID_ARGS="$a --out-dir $O/$d --tag h200" NO_BUNDLE=1 \
  bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=|done" | cut -d'|' -f2-11 | head -60
