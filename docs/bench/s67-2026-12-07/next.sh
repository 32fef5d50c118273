#!/usr/bin/env bash
# Session 67's first H200 call (spent: the knobs ran as `KNOBS=fwd,bwd bash knobs.sh`; next2.sh is the next one).
# Was: knobs.sh (~6 min), then what time left of session 66's next2.sh (decode under both flushes).
# Exits 3 on another card.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200"; exit 3 ;; esac
t0=$(date +%s)
bash docs/bench/s67-2026-12-07/knobs.sh
left=$(( 560 - ($(date +%s) - t0) )); echo "left ${left}s"
if [ $left -gt 150 ]; then DEC_T=$(( (left - 20) / 2 )) bash docs/bench/s66-2026-12-07/callF.sh | tail -20; fi
