#!/usr/bin/env bash
# Session 65's callS.sh with its 24 intermediate files kept off $OUT (the device returns 8 files):
# decode split counts 0 (heuristic) / 2 / 4 / 8 forced at batch 4 / 8 / 16, 1k-8k, warmed, 3 rounds,
# hopattn contiguous and paged, best round printed. FLUSH (default memset) picks decode.py's --flush;
# BATCHES and LENS (decode.py's lists) other shapes, e.g. BATCHES=32,64 LENS=1024,8192 (issue 6's
# batch 32-64 points, where the heuristic never splits: session 67's lead, not run).
# Any card; carry [.gpu-m63]. ~1.5 min.
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
W=/tmp/callS; mkdir -p $W
p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
for r in 1 2 3; do
  for ns in 0 2 4 8; do
    timeout 60 python3 bench/decode.py --no-peers --flush ${FLUSH:-memset} --batches ${BATCHES:-4,8,16} \
      --cache-lens ${LENS:-1024,2048,4096,8192} --num-splits $ns --json $W/s$ns-r$r.json > $W/s$ns-r$r.log 2>&1 \
      || { echo "splits $ns round $r failed"; tail -3 $W/s$ns-r$r.log; }
  done
done
python3 - $W ${OUT:-/tmp/out} <<'PY'
import json, sys, glob, collections
best = collections.defaultdict(dict)
for f in glob.glob(f"{sys.argv[1]}/s*-r*.json"):
    ns = f.split("/")[-1].split("-")[0][1:]
    for r in json.load(open(f))["rows"]:
        for k in ("hopattn_ms", "hopattn_paged_ms"):
            key = (r["batch"], r["cache_len"], k)
            best[key][ns] = min(best[key].get(ns, 1e9), r[k] * 1e3)
lines = ["best of 3 rounds, us: batch cache layout | heuristic(0) 2 4 8 splits"]
for (b, L, k), v in sorted(best.items()):
    lines.append(f"b{b:>3} L{L:>5} {k[8:-3] or 'contig':>6} | " + "  ".join(f"{ns}:{v.get(ns, 0):6.1f}" for ns in ("0", "2", "4", "8")))
print("\n".join(lines))
open(f"{sys.argv[2]}/splits-best.txt", "w").write("\n".join(lines) + "\n")
PY
