#!/usr/bin/env bash
# Per-instruction stall sampling (SASS source page) of the FP8 d128 and bf16 d128 kernels, main's library.
set -uo pipefail
p=$PWD/.gpu
[ -f $p/lib/libhopattn.so ] || xz -T4 -dk $p/lib/libhopattn.so.xz
export LD_LIBRARY_PATH=$p/lib HOPATTN_LIBRARY=$p/lib/libhopattn.so PYTHONPATH=$p/python PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
ncu --version | tail -1
prof() { # tag op [causal]
  local tag=$1 op=$2; shift 2
  timeout 200 ncu --kernel-name regex:fwd_ws_kernel --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --import-source no -o /tmp/$tag -f \
    python3 $p/bench/ncu_shape.py --op $op --hdim 128 --seqlen 4096 "$@" > $O/prof-$tag.log 2>&1
  echo "-- $tag rc=$?"
  ncu -i /tmp/$tag.ncu-rep --page source --csv --print-source sass > $O/src-$tag.csv 2> $O/src-$tag.err
  echo "   source rc=$? $(wc -l < $O/src-$tag.csv) lines"; head -c 600 $O/src-$tag.err
  xz -T4 -1 -c /tmp/$tag.ncu-rep > $O/$tag.ncu-rep.xz
}
prof fp8 forward_fp8
prof bf16 attention
head -3 $O/src-fp8.csv | cut -c1-600
