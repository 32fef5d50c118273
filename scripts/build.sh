#!/usr/bin/env bash
# Configures (once) and builds hopattn into ${HOPATTN_BUILD_DIR:-build}. Extra args go to CMake's
# configure step, e.g. `scripts/build.sh -DHOPATTN_HEAD_DIMS=128 -DHOPATTN_DTYPES=bf16`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_BUILD_DIR:-$root/build}
export CCACHE_BASEDIR=$root  # clones in other folders still hit the cache
# Configure every time (about a second): it also refreshes the commit baked into version().
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "${HOPATTN_JOBS:-$(nproc)}"
