#!/usr/bin/env bash
# Session 31: main (.gpu) against p-live (P's registers held until wait<0>), bf16 library, all head dims.
set -uo pipefail
p=$PWD/.gpu
[ -f $p/lib/libhopattn.so ] || xz -T4 -dk $p/lib/libhopattn.so.xz
ab=$PWD/.gpu-exp/ab
for f in $ab/*.so.xz; do [ -f ${f%.xz} ] || xz -T4 -dk $f; done
M=$p/lib/libhopattn.so N=$ab/libhopattn-plive.so
export PYTHONPATH=$p/python PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
withlib() { local lib=$1; shift; mkdir -p /tmp/l-$(basename $lib); ln -sf $lib /tmp/l-$(basename $lib)/libhopattn.so
  LD_LIBRARY_PATH=/tmp/l-$(basename $lib) HOPATTN_LIBRARY=$lib "$@"; }
t0=$(date +%s)
for phase in "$@"; do
  echo "=== $phase $(( $(date +%s) - t0 )) s"
  case $phase in
    gt) withlib $N $p/bin/hopattn_gpu_tests --gtest_brief=1 > $O/gt-plive.log 2>&1; echo "rc=$?"
        grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED' $O/gt-plive.log | sed 's/, where.*//' | head -20 ;;
    ab) for r in 1 2; do
          withlib $M python3 .gpu-exp/abt.py --tag main-r$r ${ABARGS:-} > $O/ab-main-r$r.log 2>&1
          withlib $N python3 .gpu-exp/abt.py --tag new-r$r ${ABARGS:-} > $O/ab-new-r$r.log 2>&1
        done
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
  esac
done
echo "=== done $(( $(date +%s) - t0 )) s"
