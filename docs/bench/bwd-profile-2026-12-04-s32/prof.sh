#!/usr/bin/env bash
# Session 32: per-instruction stall sampling of the backward main kernel (d128, non-causal 4k and causal 2k).
set -uo pipefail
p=$PWD/.gpu
[ -f $p/lib/libhopattn.so ] || xz -T4 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python:$p/bench PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$p/lib HOPATTN_LIBRARY=$p/lib/libhopattn.so
O=${OUT:-/tmp/out}; mkdir -p $O
ncu --version | tail -1
prof() { local tag=$1; shift
  ncu --kernel-name regex:bwd_kernel --launch-skip 2 --launch-count 1 \
      --section WarpStateStats --section SourceCounters --section SpeedOfLight --import-source no -o /tmp/$tag -f \
      python3 $p/bench/ncu_shape.py --op backward "$@" > $O/ncu-$tag.log 2>&1; echo "$tag rc=$?"
  ncu -i /tmp/$tag.ncu-rep --page source --csv --print-source sass > /tmp/$tag-sass.csv 2>/dev/null
  ncu -i /tmp/$tag.ncu-rep --page details > $O/details-$tag.txt 2>&1
  gzip -c /tmp/$tag-sass.csv > $O/sass-$tag.csv.gz
  python3 $p/bench/ncu_sass.py /tmp/$tag-sass.csv --top 25 > $O/sum-$tag.txt 2>&1; head -40 $O/sum-$tag.txt
}
prof bwd128nc4k --hdim 128 --seqlen 4096
prof bwd128c2k --hdim 128 --seqlen 2048 --causal
