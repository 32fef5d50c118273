#!/usr/bin/env bash
# Run HERE (no GPU needed): which argument checks no CPU test reaches. Builds the host code with gcov
# into ${HOPATTN_COV_BUILD_DIR:-build-cov} (kernel objects from ccache, as scripts/host-sanitize.sh),
# runs the CPU gtests, the skipping GPU gtests and pytest, then prints every line of the validation
# sources (src/api/validate*.cpp, or the files given with FILES='a.cpp b.cpp') that returns or fails
# and never ran. Lines that only a build without some kernel can reach (e.g. "no sm90 backward
# kernel in this build" in a full build) stay listed; the rest want a test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_COV_BUILD_DIR:-$root/build-cov}
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="--coverage -O0" -DCMAKE_SHARED_LINKER_FLAGS=--coverage -DCMAKE_EXE_LINKER_FLAGS=--coverage "$@" >/dev/null
cmake --build "$build" -j "${HOPATTN_JOBS:-$(nproc)}" >/dev/null
find "$build" -name '*.gcda' -delete
"$build/tests/hopattn_cpu_tests" --gtest_brief=1 | tail -2
"$build/tests/hopattn_gpu_tests" --gtest_brief=1 >/dev/null
(cd "$root" && HOPATTN_LIBRARY="$build/libhopattn.so" HOPATTN_REQUIRE_LIBRARY=1 PYTHONPATH="$root/python" \
  python3 -m pytest -q -p no:cacheprovider tests/python | tail -1)
cd "$build"
for f in ${FILES:-validate.cpp validate_fp8.cpp validate_varlen.cpp validate_kvcache.cpp}; do
  gcov -o "CMakeFiles/hopattn.dir/src/api/$f.gcda" "$root/src/api/$f" >/dev/null 2>&1 || true
  echo "== src/api/$f: never ran"
  grep -E '^ +#####:' "$f.gcov" | grep -E 'return|fail\(' | sed -E 's/^ +#####: +//' || true
done
