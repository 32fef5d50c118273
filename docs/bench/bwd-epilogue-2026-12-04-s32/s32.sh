#!/usr/bin/env bash
# Session 32: FP8 P V in SS form (branch fp8-sspv2): main (.gpu) vs s1 (SS) vs s2 (SS + wait held).
set -uo pipefail
p=$PWD/.gpu
[ -f $p/lib/libhopattn.so ] || xz -T4 -dk $p/lib/libhopattn.so.xz
ab=$PWD/.gpu-exp/ab
for f in $ab/*.so.xz; do [ -f ${f%.xz} ] || xz -T4 -dk $f; done
M=$p/lib/libhopattn.so
export PYTHONPATH=$p/python PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
withlib() { local lib=$1; shift; local d=/tmp/l-$(basename $lib .so); mkdir -p $d; ln -sf $lib $d/libhopattn.so
  LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$lib "$@"; }
t0=$(date +%s)
for phase in "$@"; do
  echo "=== $phase $(( $(date +%s) - t0 )) s"
  case $phase in
    gt8) for v in ${VARIANTS:-s1 s2}; do
           withlib $ab/libhopattn-$v.so $p/bin/hopattn_gpu_tests --gtest_brief=1 --gtest_filter="${GT_FILTER:-*Fp8*}" > $O/gt8-$v.log 2>&1; echo "$v rc=$?"
           grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED' $O/gt8-$v.log | sed 's/, where.*//' | head -12
         done ;;
    py8) for v in ${VARIANTS:-s1 s2}; do
           (cd $p && withlib $ab/libhopattn-$v.so env HOPATTN_REQUIRE_LIBRARY=1 timeout 200 python3 -m pytest -q tests/python/test_fp8.py > $O/py8-$v.log 2>&1; echo "$v rc=$?"); tail -1 $O/py8-$v.log
         done ;;
    ab) for r in 1 2; do
          withlib $M python3 .gpu-exp/${ABT:-abt.py} --tag main-r$r ${ABARGS:-} > $O/ab-main-r$r.log 2>&1
          for v in ${VARIANTS:-s1 s2}; do
            withlib $ab/libhopattn-$v.so python3 .gpu-exp/${ABT:-abt.py} --tag $v-r$r ${ABARGS:-} > $O/ab-$v-r$r.log 2>&1
          done
        done
        python3 - $O <<'PY'
import sys, glob, collections
d = collections.defaultdict(dict); tags = set()
for f in sorted(glob.glob(sys.argv[1] + "/ab-*.log")):
    for l in open(f):
        if l.startswith("AB "):
            _, tag, op, hd, s, c, us, tf = l.split()
            d[(op, hd, s, c)][tag] = float(tf); tags.add(tag.rsplit("-", 1)[0])
vs = sorted(t for t in tags if t != "main")
print("op hd s c | main r1 r2 |", " | ".join(f"{v} r1 r2 {v}/main" for v in vs))
for k, v in d.items():
    m = [v.get("main-r1", 0), v.get("main-r2", 0)]
    row = [*k, "|", *m]
    for t in vs:
        n = [v.get(t + "-r1", 0), v.get(t + "-r2", 0)]
        row += ["|", *n, "%.3f" % (sum(n) / sum(m) if sum(m) else 0)]
    print(*row)
PY
        ;;
  esac
done
echo "=== done $(( $(date +%s) - t0 )) s"
