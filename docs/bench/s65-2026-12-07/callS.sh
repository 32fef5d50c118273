#!/usr/bin/env bash
# Lead from session 65 (H100, one unwarmed round): batch 8 at 1k read 24.9 us with 4 splits forced
# against 25.7-26.7 with the heuristic's 2 (contiguous caches plan one block an SM; 4 splits run 256
# blocks, two an SM). Split counts forced at batch 4 / 8 / 16, 1k-8k, warmed, 3 rounds alternating
# the counts, hopattn contiguous and paged. Any card; carry [.gpu-m63]. ~1.5 min.
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
for r in 1 2 3; do
  for ns in 0 2 4 8; do
    timeout 60 python3 bench/decode.py --no-peers --batches 4,8,16 --cache-lens 1024,2048,4096,8192 \
      --num-splits $ns --json $O/s$ns-r$r.json > $O/s$ns-r$r.log 2>&1 || echo "splits $ns round $r failed"
  done
done
python3 - $O <<'PY'
import json, sys, glob, collections
best = collections.defaultdict(dict)
for f in glob.glob(f"{sys.argv[1]}/s*-r*.json"):
    ns = f.split("/")[-1].split("-")[0][1:]
    for r in json.load(open(f))["rows"]:
        for k in ("hopattn_ms", "hopattn_paged_ms"):
            key = (r["batch"], r["cache_len"], k)
            best[key][ns] = min(best[key].get(ns, 1e9), r[k] * 1e3)
print("best of 3 rounds, us: batch cache layout | heuristic(0) 2 4 8 splits")
for (b, L, k), v in sorted(best.items()):
    print(f"b{b:>3} L{L:>5} {k[8:-3] or 'contig':>6} | " + "  ".join(f"{ns}:{v.get(ns, 0):6.1f}" for ns in ("0", "2", "4", "8")))
PY
