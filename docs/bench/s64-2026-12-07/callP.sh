#!/usr/bin/env bash
# Issue 6's decode 1k column: at batch 64, 1k the contiguous cache reads 0.87x cuDNN in decode.py's
# peer runs (120.4 against 105.3 us, session 64 H100; 119.8 in session 63) but 107-108 us in the
# A/B runs without peers (which stop at 32k), and the paged cache (same keys, same kernel, one split)
# 108.6. Which is it: the shape; where the cache sits (a peer run reaches batch 64 1k right after
# batch 32 128k frees 16 GB, so the caching allocator carves the new cache from that segment); or the
# clock that heavy shape leaves (contiguous is timed first at each shape; compare.warm_up's docstring)?
#  1. decode.py with the peers at batch 64 1k alone (a fresh process);
#  2. the peer run at batch 32 / 64, 128k then 1k (as sessions 63-64 reached batch 64 1k), as is
#     and with --warm-seconds 0.3 (each implementation warmed at each shape, as compare.py does);
#  3. ncu on the contiguous and the paged split_kernel at batch 64 1k, fresh and after a 16 GB
#     allocation is freed: duration, DRAM throughput, L2 hit rate, occupancy, stalls.
# Any card; carry [.gpu-m63]. ~2.5 min (cut down for a session with little device time left).
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
for r in 1; do
  timeout 60 python3 bench/decode.py --batches 64 --cache-lens 1024 --json $O/dec64-r$r.json > $O/dec64-r$r.log 2>&1
  grep "^| 64 " $O/dec64-r$r.log | cut -c1-160
done
for w in 0 0.3; do
  timeout 150 python3 bench/decode.py --batches 32,64 --cache-lens 131072,1024 --warm-seconds $w --json $O/dec-w$w.json \
    > $O/dec-w$w.log 2>&1; echo "warm $w s:"; grep "^| " $O/dec-w$w.log | cut -c1-160
done
for pre in 0 16; do
  t=ncu-pre$pre
  timeout 100 ncu --kernel-name regex:split_kernel --launch-skip 6 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section SchedulerStats --section WarpStateStats -o /tmp/$t -f \
    python3 bench/decode_ncu.py --batch 64 --cache-len 1024 --pre-alloc-gb $pre > $O/$t.log 2>&1; echo "$t rc=$?"
  ncu -i /tmp/$t.ncu-rep --page details > $O/$t.txt 2>&1
  echo "== batch 64 cache 1k, pre-alloc $pre GB: first kernel contiguous, second paged"
  grep -E "Duration|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Achieved Occupancy|Waves Per SM|Issued Warp Per|No Eligible|Warp Cycles Per Issued|Mem Busy|Max Bandwidth" $O/$t.txt | cut -c1-110
done
# 4. the split count at small caches: batch 1 and 8 at 1k / 2k with num_splits forced (the plan takes
#    16 and 2 at 1k contiguous): the combine launch against fewer streaming blocks.
for ns in 1 2 4; do
  timeout 60 python3 bench/decode.py --no-peers --batches 1,8 --cache-lens 1024 --num-splits $ns \
    --json $O/split$ns.json > $O/split$ns.log 2>&1
  echo "num_splits $ns: $(grep -E '^\| (1|8) ' $O/split$ns.log | awk -F'|' '{printf "b%s/%s %s %s; ", $2+0, $3+0, $5+0, $7+0}')"
done
