#!/usr/bin/env bash
# Issue 6's decode table with the peers, on whatever card comes (the record wants the H200), under
# both protocols: the records' (--warm-seconds 0: the first implementation timed at a shape runs at
# the clock the previous shape left) and each implementation warmed 0.3 s at each shape, as
# compare.py's grids are (session 64: batch 64 1k contiguous read ~120 us only when it followed
# batch 32 128k). carry [.gpu-m63]. ~3 min on the H200.
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
p=$PWD/$PACK; [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
for w in ${WARMS:-0.3 0}; do
  timeout ${DEC_T:-200} python3 bench/decode.py --warm-seconds $w --json $O/dec-peers-w$w.json > $O/dec-peers-w$w.log 2>&1
  echo "== decode.py, peers, --warm-seconds $w (rc=$?)"; grep -E "^timer|^\| " $O/dec-peers-w$w.log | cut -c1-200
  # GB/s ratios against cuDNN, contiguous and paged
  python3 - $O/dec-peers-w$w.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    c = r.get("cudnn_gbps")
    if c:
        print(f"b{r['batch']:>3} L{r['cache_len']:>7}: contig/cudnn {r['hopattn_gbps'] / c:.3f}  paged/cudnn {r['hopattn_paged_gbps'] / c:.3f}")
PY
done
