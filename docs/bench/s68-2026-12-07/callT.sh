#!/usr/bin/env bash
# Issue 6: is the paged cache's lag behind the contiguous one (1-5% from 32k keys on the H200, decode
# v4) the kernel's page-table reads or address translation over scattered pages? perf-notes "Session
# 68" counted the page-table latency as hidden. bench/decode.py --page-order identity stores the
# pages in order (the pool is the contiguous cache's bytes): if paged-identity reads as contiguous,
# the lag is the scatter (translation / DRAM locality), not the kernel; if it lags like random, it is
# the kernel's reads. hopattn only, memset flush, warmed, 2 rounds alternating. Any card (the H200
# is where the gap was read); carry [.gpu-m67]. ~1.5 min.
export PACK=${PACK:-.gpu-m67} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; W=/tmp/callT; mkdir -p $O $W
p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
for r in 1 2; do
  for order in random identity; do
    timeout 80 python3 bench/decode.py --no-peers --page-order $order --batches ${BATCHES:-1,8,32} \
      --cache-lens ${LENS:-32768,131072} --json $W/$order-r$r.json > $W/$order-r$r.log 2>&1 \
      || { echo "$order round $r failed"; tail -3 $W/$order-r$r.log; }
  done
done
python3 - $W $O <<'PY'
import json, sys, glob, collections
best = collections.defaultdict(dict)
for f in glob.glob(f"{sys.argv[1]}/*-r*.json"):
    order = f.split("/")[-1].split("-")[0]
    for r in json.load(open(f))["rows"]:
        key = (r["batch"], r["cache_len"])
        for k, name in (("hopattn_ms", "contig"), ("hopattn_paged_ms", order)):
            best[key][name] = min(best[key].get(name, 1e9), r[k] * 1e3)
lines = ["best of 2 rounds, us (paged / contiguous): batch cache | contiguous | paged random | paged identity"]
for (b, L), v in sorted(best.items()):
    c = v.get("contig", 0)
    lines.append(f"b{b:>3} L{L:>6} | {c:7.1f} | {v.get('random', 0):7.1f} ({v.get('random', 0) / c:.3f}) | "
                 f"{v.get('identity', 0):7.1f} ({v.get('identity', 0) / c:.3f})")
print("\n".join(lines))
open(f"{sys.argv[2]}/page-order.txt", "w").write("\n".join(lines) + "\n")
PY
