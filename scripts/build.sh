#!/usr/bin/env bash
# Configures (once) and builds hopattn into ${HOPATTN_BUILD_DIR:-build}. Extra args go to CMake's
# configure step, e.g. `scripts/build.sh -DHOPATTN_HEAD_DIMS=128 -DHOPATTN_DTYPES=bf16`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_BUILD_DIR:-$root/build}
export CCACHE_BASEDIR=$root  # clones in other folders still hit the cache
# ...provided the build folder's absolute path is not hashed: ccache hashes the working directory
# when it sees debug info, and it counts nvcc's -lineinfo as that. Without this, a clone at
# another path missed on every kernel file.
export CCACHE_NOHASHDIR=1
# Configure every time (about a second): it also refreshes the commit baked into version().
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "${HOPATTN_JOBS:-$(nproc)}"
