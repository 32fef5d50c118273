#!/usr/bin/env bash
# Issue 6, the ~16 us every decode implementation sits above bytes / bandwidth at small caches.
# Hypothesis (session 65): the 256 MB memset that flushes L2 before each timed call leaves ~50 MB of
# dirty lines, which the timed call writes back to HBM while it reads. Prediction: with --flush read
# (a 256 MB sum, clean lines) every implementation gains up to ~50 MB / bandwidth (~12-16 us) where
# its own bytes are few (1k-8k caches), little at 128k, and the order of the implementations holds.
# Both protocols on the same card in one process each, peers included, warmed 0.3 s. Any card;
# carry [.gpu-m63]. ~2 min.
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
for f in read memset; do
  timeout ${DEC_T:-150} python3 bench/decode.py --flush $f --json $O/dec-flush-$f.json > $O/dec-flush-$f.log 2>&1
  echo "== decode.py, peers, --flush $f (rc=$?)"; grep -E "^timer" $O/dec-flush-$f.log | cut -c1-160
done
python3 - $O <<'PY'
import json, sys
d = {f: {(r["batch"], r["cache_len"]): r for r in json.load(open(f"{sys.argv[1]}/dec-flush-{f}.json"))["rows"]}
     for f in ("read", "memset")}
print("us read / memset (GB/s read) | contig | paged | cudnn | flash ; contig/cudnn read, memset")
for key in sorted(d["read"]):
    r, m = d["read"][key], d["memset"].get(key, {})
    cells = []
    for k in ("hopattn", "hopattn_paged", "cudnn", "flash"):
        if r.get(f"{k}_ms"):
            cells.append(f"{r[k + '_ms'] * 1e3:7.1f}/{m.get(k + '_ms', 0) * 1e3:7.1f} ({r[k + '_gbps']:5.0f})")
    ratio = lambda x: x["hopattn_gbps"] / x["cudnn_gbps"] if x.get("cudnn_gbps") else 0
    print(f"b{key[0]:>3} L{key[1]:>6} | " + " | ".join(cells) + f" ; {ratio(r):.3f} {ratio(m):.3f}")
PY
