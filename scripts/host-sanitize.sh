#!/usr/bin/env bash
# Run HERE (no GPU needed): the host code under AddressSanitizer and UndefinedBehaviorSanitizer.
# Builds into ${HOPATTN_ASAN_BUILD_DIR:-build-asan} with the C++ files instrumented (argument
# validation, dispatch, heuristics, the CPU reference, the C ABI, the tests themselves), then runs
# the CPU gtests, the GPU gtests (they skip without a GPU, after their host-side setup) and pytest
# with the sanitizer runtimes preloaded, since python3 itself is not instrumented.
# The .cu files keep their normal flags, so a tree already built by scripts/build.sh with the same
# -D arguments gets every kernel object from ccache; only the C++ files compile again.
# Any sanitizer report fails the run: UBSan does not recover, ASan aborts on its first error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_ASAN_BUILD_DIR:-$root/build-asan}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1  # as scripts/build.sh: kernel objects hit the cache
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" "$@" >/dev/null
cmake --build "$build" -j "${HOPATTN_JOBS:-$(nproc)}"

# Leak checking stays on for the C++ tests (no interpreter in the process) and off under python3,
# whose own allocations ASan would report at exit.
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/tests/hopattn_cpu_tests" --gtest_brief=1
"$build/tests/hopattn_gpu_tests" --gtest_brief=1
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")  # the runtimes of the compiler that built it
preload="$($cxx -print-file-name=libasan.so) $($cxx -print-file-name=libubsan.so)"
(cd "$root" && LD_PRELOAD="$preload" ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 \
  HOPATTN_LIBRARY="$build/libhopattn.so" HOPATTN_REQUIRE_LIBRARY=1 PYTHONPATH="$root/python" \
  python3 -m pytest -q -p no:cacheprovider tests/python)
echo "host sanitizers: clean"
