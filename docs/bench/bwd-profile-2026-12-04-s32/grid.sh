#!/usr/bin/env bash
# Session 32: the whole forward grid (issue 3) at the head, warm-up protocol, peers in the same process.
set -uo pipefail
p=$PWD/.gpu
[ -f $p/lib/libhopattn.so ] || xz -T4 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$p/lib HOPATTN_LIBRARY=$p/lib/libhopattn.so HOPATTN_COMMIT=$(cat $p/COMMIT)
O=${OUT:-/tmp/out}; mkdir -p $O
t0=$(date +%s)
timeout ${GRID_TIMEOUT:-540} python3 $p/bench/compare.py --direction ${DIR:-fwd} --out-dir $O --tag ${TAG:-s32} ${GRIDARGS:-} > $O/compare-${DIR:-fwd}.log 2>&1; echo "rc=$? $(( $(date +%s) - t0 )) s"
tail -45 $O/compare-${DIR:-fwd}.log
