#!/usr/bin/env bash
# Prepared in session 62, not yet run: the per-SM balance of every forward grid point. Session 62
# found d64's round-robin aliased (132 CTAs, 3-22 query blocks a head) only because ncu's tensor-pipe
# share per SM had a min and a max far from its mean. This reads that spread for hopattn's forward on
# the whole paper grid (d64 / d128 / d256, causal and not, 512..16k): one ncu launch a point, the
# tensor pipe's active share mean / min / max over the SMs and the duration (metrics only, one
# pass). A point whose max / mean is well above cuDNN's 1.03 has an order to fix. OPS (default
# attention; e.g. "attention forward_fp8") and HDIMS / SEQLENS / CAUSAL narrow it. Any card (say
# which); ~4 min for the 36 points of one op. carry [PACK] (default .gpu-m62).
export PACK=${PACK:-.gpu-m62} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
p=$PWD/$PACK
[ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
export PYTHONPATH=$p/python HOPATTN_LIBRARY=$p/lib/libhopattn.so LD_LIBRARY_PATH=$p/lib
nvidia-smi --query-gpu=name --format=csv,noheader
m=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.min.pct_of_peak_sustained_active
m=$m,sm__pipe_tensor_cycles_active.max.pct_of_peak_sustained_active,gpu__time_duration.sum
echo "| op | d | causal | seqlen | us | tensor mean | min | max | max / mean |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for op in ${OPS:-attention}; do
  kern=$([ $op = cudnn ] && echo "fprop|sdpa|cudnn|flash" || echo fwd_ws_kernel)
  for d in ${HDIMS:-64 128 256}; do for c in ${CAUSAL:-0 1}; do for s in ${SEQLENS:-512 1024 2048 4096 8192 16384}; do
    cflag=$([ $c = 1 ] && echo --causal)
    timeout 60 ncu --kernel-name "regex:$kern" --launch-skip 2 --launch-count 1 --metrics $m --csv \
      python3 bench/ncu_shape.py --op $op --hdim $d --seqlen $s $cflag > $O/bal-$op-$d-$c-$s.csv 2> $O/bal-$op-$d-$c-$s.err
    python3 - "$O/bal-$op-$d-$c-$s.csv" "$op" "$d" "$c" "$s" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if len(rows) < 2:
    print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | no data | | | | |"); sys.exit()
head = rows[0]; name, unit, val = head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
v = {r[name]: float(r[val].replace(",", "")) for r in rows[1:]}
g = lambda k: v.get(k, float("nan"))
mean, lo, hi = (g(f"sm__pipe_tensor_cycles_active.{s}.pct_of_peak_sustained_active") for s in ("avg", "min", "max"))
t = g("gpu__time_duration.sum")
unit_t = [r[unit] for r in rows[1:] if r[name] == "gpu__time_duration.sum"]
us = t * {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit_t[0] if unit_t else "usecond", 1.0)
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {us:.1f} | {mean:.1f} | {lo:.1f} | {hi:.1f} | {hi / mean:.3f} |")
PY
  done; done; done
done | tee $O/balance.md
