#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root, with .gpu/ (from scripts/gpu-pack.sh) present:
# GPU GoogleTests, the demo, pytest and bench/compare.py; a short summary last. Logs go to $OUT
# when set (the device tool's output folder), else to .gpu/logs.
# Options: --no-bench (skip compare.py), --bench-args "..." (passed to compare.py), --gtest-filter F
set -uo pipefail
pack=.gpu
# The device tool returns at most 8 files from $OUT: logs are packed into one logs.tgz at the end,
# and compare.py's JSON/PNG/markdown land beside it.
logs=${OUT:-$pack}/logs
bench_dir=${OUT:-$pack/logs}
mkdir -p "$logs"
bench=1; bench_args=""; gfilter="*"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --bench-args) bench_args=$2; shift ;;
    --gtest-filter) gfilter=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export LD_LIBRARY_PATH=$PWD/$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export HOPATTN_LIBRARY=$PWD/$pack/lib/libhopattn.so HOPATTN_COMMIT=$(cat $pack/COMMIT) PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee "$logs/gpu.txt"
summary=()

$pack/bin/hopattn_gpu_tests --gtest_brief=1 --gtest_filter="$gfilter" > "$logs/gpu_tests.log" 2>&1
rc=$?; summary+=("gtest gpu (rc=$rc): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/gpu_tests.log" | tr '\n' ' ')")
grep -E 'FAILED|Failure' "$logs/gpu_tests.log" | head -20

# The first-path kernel stays a tested fallback: the forward grid once more with it selected.
HOPATTN_FWD_KERNEL=mma $pack/bin/hopattn_gpu_tests --gtest_brief=1 --gtest_filter="Sm90*" > "$logs/gpu_tests_mma.log" 2>&1
rc=$?; summary+=("gtest gpu, HOPATTN_FWD_KERNEL=mma (rc=$rc): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/gpu_tests_mma.log" | tr '\n' ' ')")
grep -E 'FAILED|Failure' "$logs/gpu_tests_mma.log" | head -10

$pack/bin/hopattn_cpu_tests --gtest_brief=1 > "$logs/cpu_tests.log" 2>&1
rc=$?; summary+=("gtest cpu (rc=$rc): $(grep -E '^\[  (PASSED|FAILED) ' "$logs/cpu_tests.log" | tr '\n' ' ')")

$pack/bin/hopattn-demo > "$logs/demo.log" 2>&1
rc=$?; summary+=("demo (rc=$rc): $(grep -E 'TFLOP/s' "$logs/demo.log" | tr '\n' ' ')")

HOPATTN_REQUIRE_LIBRARY=1 PYTHONPATH=$PWD/$pack/python python3 -m pytest -q -p no:cacheprovider $pack/tests/python > "$logs/pytest.log" 2>&1
rc=$?; summary+=("pytest (rc=$rc): $(tail -n 1 "$logs/pytest.log")")
grep -E '^(FAILED|ERROR)|Error:|assert' "$logs/pytest.log" | head -20

if [ $bench = 1 ]; then
  PYTHONPATH=$PWD/$pack/python python3 $pack/bench/compare.py --out-dir "$bench_dir" $bench_args > "$logs/compare.log" 2>&1
  rc=$?; summary+=("compare.py (rc=$rc): see compare.log")
  tail -n 45 "$logs/compare.log"
fi
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"; fi
echo "==== summary ($(cat $pack/COMMIT))"
printf '%s\n' "${summary[@]}"
