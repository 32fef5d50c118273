#!/usr/bin/env bash
# Session 51 (prepared, not yet run): why a full-length d64 causal tile costs ~20% more per key
# block than a non-causal one (perf-notes, "Session 51"). ncu on the forward kernel, d64 4k causal
# and non-causal (bf16, batch 4, heads 32): SpeedOfLight, the memory workload (L2 hit rate, DRAM
# bytes), warp states and per-instruction stall sampling of the consumer's key loop. Pack: any with
# main's library (.gpu-m51). ~3 min, either card (say which).
set -uo pipefail
p=$PWD/${PACK:-.gpu-m51}
[ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python:$p/bench PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$p/lib HOPATTN_LIBRARY=$p/lib/libhopattn.so
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader; ncu --version | tail -1
prof() { local tag=$1; shift
  timeout 120 ncu --kernel-name regex:fwd_ws_kernel --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters \
      --import-source no -o /tmp/$tag -f python3 $p/bench/ncu_shape.py --op attention "$@" > $O/ncu-$tag.log 2>&1
  echo "$tag rc=$?"
  ncu -i /tmp/$tag.ncu-rep --page details > $O/details-$tag.txt 2>&1
  ncu -i /tmp/$tag.ncu-rep --page source --csv --print-source sass > /tmp/$tag-sass.csv 2>/dev/null
  gzip -c /tmp/$tag-sass.csv > $O/sass-$tag.csv.gz
  python3 $p/bench/ncu_sass.py /tmp/$tag-sass.csv --top 20 > $O/sum-$tag.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Hit Rate|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued" $O/details-$tag.txt | head -12
}
prof d64c4k --hdim 64 --seqlen 4096 --causal
prof d64n4k --hdim 64 --seqlen 4096
