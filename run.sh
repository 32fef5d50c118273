#!/usr/bin/env bash
# The main job: builds if needed, then runs hopattn-demo (a default workload on a Hopper GPU,
# checked against the fp64 reference, with TFLOP/s; the CPU reference on a small problem elsewhere).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/scripts/build.sh" >/dev/null
exec "${HOPATTN_BUILD_DIR:-$root/build}/hopattn-demo" "$@"
