#!/usr/bin/env bash
# Session 31: the kHoldP tree (.gpu, packed from p-live) — whole suites, and compare.py fwd d256 against main's library.
set -uo pipefail
p=$PWD/.gpu
[ -f $p/lib/libhopattn.so ] || xz -T4 -dk $p/lib/libhopattn.so.xz
ab=$PWD/.gpu-exp/ab
for f in $ab/*.so.xz; do [ -f ${f%.xz} ] || xz -T4 -dk $f; done
N=$p/lib/libhopattn.so M=$ab/libhopattn-main.so
export LD_LIBRARY_PATH=$p/lib HOPATTN_LIBRARY=$N PYTHONPATH=$p/python PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
echo "commit $(cat $p/COMMIT)"; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
t0=$(date +%s)
for phase in "$@"; do
  echo "=== $phase $(( $(date +%s) - t0 )) s"
  case $phase in
    gt) $p/bin/hopattn_gpu_tests --gtest_brief=1 > $O/gt.log 2>&1; echo "rc=$?"
        grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED' $O/gt.log | sed 's/, where.*//' | head -20 ;;
    py) HOPATTN_REQUIRE_LIBRARY=1 timeout 300 python3 -m pytest -q -p no:cacheprovider $p/tests/python > $O/py.log 2>&1; echo "rc=$?"
        grep -E "^FAILED|passed|failed" $O/py.log | cut -c1-200 | tail -8 ;;
    ab) for r in 1 2; do for side in main new; do
          lib=$N; [ $side = main ] && lib=$M
          HOPATTN_LIBRARY=$lib python3 .gpu-exp/abt.py --tag $side-r$r --ops attention --hdims 256 > $O/ab-$side-r$r.log 2>&1
          HOPATTN_LIBRARY=$lib python3 .gpu-exp/abt.py --tag $side-r$r --ops backward --hdims 64,128 --seqlens 1024,2048,4096,16384 >> $O/ab-$side-r$r.log 2>&1
          echo "-- $side r$r rc=$?"
        done; done
        python3 - $O <<'PY'
import sys, glob, collections
d = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + "/ab-*.log")):
    for l in open(f):
        if l.startswith("AB "):
            _, tag, op, hd, s, c, us, tf = l.split()
            d[(op, hd, s, c)][tag] = float(tf)
print("op hd s c | main r1 r2 | new r1 r2 | new/main")
for k, v in d.items():
    m = [v.get("main-r1", 0), v.get("main-r2", 0)]; n = [v.get("new-r1", 0), v.get("new-r2", 0)]
    r = (sum(n) / sum(m)) if sum(m) else 0
    print(*k, "|", *m, "|", *n, "| %.3f" % r)
PY
        ;;
    cmp) for r in ${ROUNDS:-1 2}; do for side in ${SIDES:-main new}; do
           lib=$N; [ $side = main ] && lib=$M
           HOPATTN_LIBRARY=$lib python3 $p/bench/compare.py --direction fwd --hdims ${HD:-256} --seqlens ${SL:-1k,4k,16k} --causal both --no-plot --out-dir $O/cmp --tag $side-r$r > $O/cmp-$side-r$r.log 2>&1
           echo "-- $side r$r rc=$?"; grep -E "^\| *[0-9]+ \|" $O/cmp-$side-r$r.log | head -12
         done; done ;;
  esac
done
echo "=== done $(( $(date +%s) - t0 )) s"
