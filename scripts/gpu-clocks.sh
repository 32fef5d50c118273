#!/usr/bin/env bash
# Run ON THE GPU MACHINE with the stage probe (build -DHOPATTN_BUILD_STAGE_PROBE=ON, copy the binary
# to .gpu-probe/ or set PROBE) carried along: 3 s of back-to-back launches per shape, SM clock, power and clock-event reasons
# sampled every 20 ms meanwhile.
set -u
P=${PROBE:-.gpu-probe/hopattn-fa3-stages}; chmod +x "$P"
for spec in "1 1024" "0 512" "1 2048" "0 2048" "1 16384" "0 16384"; do
  set -- $spec
  nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits -lms 20 > /tmp/smi.txt &
  smi=$!
  sleep 0.3
  $P --loop E 128 $1 $2 3 > /tmp/loop.txt 2>&1
  kill $smi; wait $smi 2>/dev/null
  python3 - "$1" "$2" <<'PY'
import sys, statistics as st, re, collections
c=[];p=[];r=collections.Counter()
for line in open('/tmp/smi.txt'):
    f=[x.strip() for x in line.split(',')]
    try: c.append(float(f[0])); p.append(float(f[1])); r[f[2]]+=1
    except Exception: pass
t=[float(re.search(r': ([0-9.]+) TFLOP',l).group(1)) for l in open('/tmp/loop.txt') if 'TFLOP' in l]
k=len(c)//4  # drop the first quarter (idle, ramp)
print(f"causal={sys.argv[1]} s={sys.argv[2]}: TFLOP/s median {st.median(t[len(t)//4:]):.1f}; SM clock median {st.median(c[k:]):.0f} MHz, power median {st.median(p[k:]):.0f} W, reasons {dict(r.most_common(3))}, n={len(c)}")
PY
done
