#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root, with .gpu/ (scripts/gpu-pack.sh; the library may
# be left xz'd) and, for A/B, libraries in .gpu-exp/ab/libhopattn-<name>.so.xz (carry both folders).
# One device call does several phases, in the order given:
#   gt    the GPU gtests on $LIB (GT_FILTER, default all; GT_T seconds, default 330). GT_SHARDS=N
#         runs N processes at once (GoogleTest's own sharding), so that one shard's host work (input
#         generation, comparisons, allocation) overlaps another's kernels; each shard writes a JSON
#         report, and scripts/gtest_report.py prints the counts, the failures and the slowest suites
#         (the suite's time is the largest fixed cost of a device session: know where it goes).
#   py    pytest in .gpu on $LIB (PY_ARGS, default tests/python, split on spaces; PY_K, one -k expression; PY_T, default 300). PY_SHARDS=N
#         runs N pytest processes, each on every N-th collected test (HOPATTN_PY_SHARD=i/N, read
#         by tests/python/conftest.py), each with its own --basetemp.
#   san   scripts/gpu-sanitize.sh (memcheck, racecheck) on SAN_FILTER (default: backward tests)
#   ab    bench/ab.py over every .gpu-exp/ab library, libhopattn-base first when present
#         (AB_POINTS head_dim:seqlen:causal,..., AB_OP default backward, AB_ROUNDS default 3,
#         AB_ONLY names of .gpu-exp/ab libraries to take, AB_EXTRA more ab.py arguments,
#         AB_TAG a suffix for the log, ab-TAG.log, when one call runs two A/Bs)
#   grid  bench/compare.py $GRID_ARGS
#   acc   bench/fp8_accuracy.py --gpu $ACC_ARGS (the FP8 accuracy protocol; ACC_T, default 300)
#   trace bench/fwd_trace.py $TRACE_ARGS on $LIB with HOPATTN_BWD_TRACE=1 (LIB: a library built with
#         -DHOPATTN_FWD_TRACE=1, e.g. .gpu-exp/ab/libhopattn-trace.so; TRACE_T, default 150;
#         TRACE_TAG a suffix for the log, trace-TAG.txt)
#   ncu   one call of bench/ncu_shape.py $NCU_ARGS under ncu, the kernels matching NCU_KERNELS
#         (regex, default fwd_ws_kernel; the first after 2 warm-up calls), sections NCU_SECTIONS
#         (default SpeedOfLight ComputeWorkloadAnalysis); bench/ncu_raw.py prints the duration, SM
#         throughput and tensor-pipe shares (NCU_TAG names the files, NCU_T default 120 s)
#   bundle  every file under $OUT into one $OUT/logs.tgz (the originals removed): the device tool
#         returns only a few files per call, and session 45 lost its varlen and shard logs to that
#         limit. Last phase of a call; unpack here with `tar xzf <files_at>/logs.tgz -C <folder>`.
# $LIB defaults to the pack's library; PACK (default .gpu) names another pack folder (a second
# branch's tests and library, e.g. .gpu-b), whose logs then carry its name. Logs go to $OUT (the
# device tool's output folder); a summary of each phase is printed. Example:
#   GT_FILTER='*Backward*' AB_POINTS=256:4096:0,256:2048:1 bash scripts/gpu-phases.sh gt ab
set -uo pipefail
for knob in GT_SHARDS PY_SHARDS; do  # process counts: a typo must not run one shard or none quietly
  [[ -z "${!knob:-}" || "${!knob}" =~ ^[1-9][0-9]*$ ]] || { echo "$knob must be a positive integer, got '${!knob}'" >&2; exit 2; }
done
p=$PWD/${PACK:-.gpu}
[ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz
ab=$PWD/.gpu-exp/ab
for f in $ab/*.so.xz; do [ -e "$f" ] && { [ -f ${f%.xz} ] || xz -T8 -dk $f; }; done
export PYTHONPATH=$p/python PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
mkdir -p $O
LIB=$(readlink -f "${LIB:-$p/lib/libhopattn.so}")  # absolute: withlib links to it from /tmp
name=$(basename $LIB .so)
[ "${PACK:-.gpu}" = .gpu ] || name=$name-${PACK#.}
# Each library is loaded through its own folder, so that a process sees one libhopattn.so only.
libdir() { echo /tmp/l-$(echo "$1" | md5sum | cut -c1-10); }  # one folder per library path
withlib() {
  local lib=$1; shift
  local d=$(libdir $lib)
  mkdir -p $d && ln -sf $lib $d/libhopattn.so
  LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$lib "$@"
}
ab_libs() {  # AB_ONLY='base di': only those of .gpu-exp/ab (default: all)
  local first=$ab/libhopattn-base.so
  for f in $( [ -f $first ] && echo $first) $(ls $ab/*.so 2>/dev/null | grep -v -- -base.so); do
    n=$(basename $f .so)
    n=${n#libhopattn-}
    [ -z "${AB_ONLY:-}" ] || [[ " $AB_ONLY " == *" $n "* ]] || continue
    echo --lib $n=$f
  done
}
t0=$(date +%s)
for phase in "$@"; do
  echo "=== $phase $(( $(date +%s) - t0 )) s lib=$LIB"
  case $phase in
    gt)  # N shards (1 by default), each a process with its own log and JSON report
      n=${GT_SHARDS:-1}
      for i in $(seq 0 $((n - 1))); do
        GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i withlib $LIB timeout ${GT_T:-330} $p/bin/hopattn_gpu_tests --gtest_brief=1 \
          --gtest_filter="${GT_FILTER:-*}" --gtest_output=json:$O/gt-$name-$i.json > $O/gt-$name-$i.log 2>&1 &
      done
      rcs=""; for job in $(jobs -p); do wait $job; rcs="$rcs $?"; done
      echo "rc=$rcs (one per shard)"
      python3 scripts/gtest_report.py --top 8 $(for i in $(seq 0 $((n - 1))); do echo $O/gt-$name-$i.json; done) | head -40 ;;
    py)
      n=${PY_SHARDS:-1}
      if [ "$n" -le 1 ]; then
        (cd $p && withlib $LIB env HOPATTN_REQUIRE_LIBRARY=1 timeout ${PY_T:-300} python3 -m pytest -q -x ${PY_ARGS:-tests/python} ${PY_K:+-k "$PY_K"} > $O/py.log 2>&1
         echo "rc=$?")
        tail -2 $O/py.log
      else
        # Test by test: shard i keeps every n-th collected test from the i-th (tests/python/conftest.py,
        # HOPATTN_PY_SHARD), so one slow file's cases spread over all the shards.
        for i in $(seq 0 $((n - 1))); do
          (cd $p && withlib $LIB env HOPATTN_REQUIRE_LIBRARY=1 HOPATTN_PY_SHARD=$i/$n timeout ${PY_T:-300} python3 -m pytest -q \
             --durations=10 -p no:cacheprovider --basetemp=/tmp/pyt-$i ${PY_ARGS:-tests/python} ${PY_K:+-k "$PY_K"} > $O/py-$i.log 2>&1
           echo "shard $i rc=$?: $(tail -1 $O/py-$i.log)") &
        done
        wait
        echo "slowest (all shards):"; cat $O/py-*.log | grep -E '^[0-9.]+s (call|setup|teardown) ' | sort -rn | head -10
      fi ;;
    san)  # scripts/gpu-sanitize.sh on $LIB, under the default forward kernel only
      withlib $LIB env LIBDIR=$(libdir $LIB) SAN_KERNELS=ws timeout ${SAN_T:-180} bash scripts/gpu-sanitize.sh \
        "${SAN_FILTER:-Sm90/BackwardVsReference*bf16_d*_b2_h8x2_q255_k127_det:Sm90/BackwardVsReference*bf16_d*_b1_h8x2_q255_k127}"
      echo "rc=$?" ;;
    ab)
      # AB_EXTRA: more ab.py arguments, e.g. one library again under a knob:
      #   AB_EXTRA='--lib dioff=.gpu-exp/ab/libhopattn-di.so --env dioff:HOPATTN_BWD_DQ_INIT=0'
      log=$O/ab${AB_TAG:+-$AB_TAG}.log
      withlib $LIB python3 $p/bench/ab.py $(ab_libs) ${AB_EXTRA:-} --op ${AB_OP:-backward} --points ${AB_POINTS:?AB_POINTS is needed} \
        --rounds ${AB_ROUNDS:-3} > $log 2>&1
      echo "rc=$?"
      grep -v '^AB ' $log | tail -20 ;;
    grid)
      withlib $LIB timeout ${GRID_T:-400} python3 $p/bench/compare.py ${GRID_ARGS:-} > $O/grid.log 2>&1
      echo "rc=$?"
      tail -45 $O/grid.log ;;
    acc)
      withlib $LIB timeout ${ACC_T:-300} python3 $p/bench/fp8_accuracy.py --gpu ${ACC_ARGS:-} --json $O/acc.json > $O/acc.log 2>&1
      echo "rc=$?"
      tail -25 $O/acc.log ;;
    trace)
      log=$O/trace${TRACE_TAG:+-$TRACE_TAG}.txt
      withlib $LIB env HOPATTN_BWD_TRACE=1 timeout ${TRACE_T:-150} python3 $p/bench/fwd_trace.py ${TRACE_ARGS:-} 2>&1 \
        | grep -v '^warning' > $log
      echo "rc=${PIPESTATUS[0]}"
      cat $log ;;
    ncu)
      tag=${NCU_TAG:-ncu}
      withlib $LIB timeout ${NCU_T:-120} ncu --kernel-name "regex:${NCU_KERNELS:-fwd_ws_kernel}" --launch-skip 2 \
        --launch-count 1 $(for s in ${NCU_SECTIONS:-SpeedOfLight ComputeWorkloadAnalysis}; do echo --section $s; done) \
        -o /tmp/$tag -f python3 $p/bench/ncu_shape.py ${NCU_ARGS:-} > $O/ncu-$tag.log 2>&1
      echo "rc=$?"
      ncu -i /tmp/$tag.ncu-rep --page raw --csv > $O/raw-$tag.csv 2>&1
      ncu -i /tmp/$tag.ncu-rep --page details > $O/details-$tag.txt 2>&1
      python3 $p/bench/ncu_raw.py $O/raw-$tag.csv ;;
    bundle)
      (cd $O && find . -type f ! -name logs.tgz -print0 | tar czf logs.tgz --null -T - \
        && find . -type f ! -name logs.tgz -delete)
      echo "rc=$? $(tar tzf $O/logs.tgz | wc -l) files in logs.tgz" ;;
    *) echo "unknown phase $phase" >&2 ;;
  esac
done
echo "=== done $(( $(date +%s) - t0 )) s"
