#!/usr/bin/env bash
# Configures (once) and builds hopattn into ${HOPATTN_BUILD_DIR:-build}. Extra args go to CMake's
# configure step, e.g. `scripts/build.sh -DHOPATTN_HEAD_DIMS=128 -DHOPATTN_DTYPES=bf16`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_BUILD_DIR:-$root/build}
export CCACHE_BASEDIR=$root  # clones in other folders still hit the cache
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$build" -j "${HOPATTN_JOBS:-$(nproc)}"
