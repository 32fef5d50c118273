#!/usr/bin/env bash
# Run HERE (no GPU needed): builds, then packs what the GPU machine needs into .gpu/ (git-ignored,
# at most 60 MiB): binaries, the library, the Python package, the Python tests and bench scripts.
# Then on the GPU machine, from the repository root: `bash scripts/gpu-suite.sh` (docs/gpu.md).
# PACK_DIR=.gpu-NAME packs into another folder (a second build beside .gpu, for gpu-phases.sh's
# PACK). PACK_SLIM=1 keeps only what gpu-phases.sh needs, the gtest binary and the library as .xz
# (~9 MiB against ~60): device calls carry every pack they name, within 64 MiB in all.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" "$@"
pack=$root/${PACK_DIR:-.gpu}
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
cp "$build/libhopattn.so" "$pack/lib/"
exes="tests/hopattn_gpu_tests tests/hopattn_cpu_tests hopattn-bench hopattn-demo hopattn-bwd-check"
[ "${PACK_SLIM:-0}" = 1 ] && exes=tests/hopattn_gpu_tests
for exe in $exes; do
  cp "$build/$exe" "$pack/bin/"
done
strip --strip-unneeded "$pack"/bin/* 2>/dev/null || true
[ "${PACK_SLIM:-0}" = 1 ] && xz -T2 -6 "$pack/lib/libhopattn.so"  # gpu-phases.sh unpacks it
cp -r "$root/python" "$root/bench" "$root/include" "$root/pyproject.toml" "$pack/"
mkdir -p "$pack/tests" && cp -r "$root/tests/python" "$pack/tests/"
git -C "$root" rev-parse --short HEAD > "$pack/COMMIT" 2>/dev/null || echo unknown > "$pack/COMMIT"
git -C "$root" diff --quiet 2>/dev/null || sed -i 's/$/-dirty/' "$pack/COMMIT"
size_mib=$(du -sm "$pack" | cut -f1)
echo "packed $pack: ${size_mib} MiB, commit $(cat "$pack/COMMIT")"
if [ "$size_mib" -gt 60 ]; then echo "error: $pack is over 60 MiB (PACK_SLIM=1 packs ~9 MiB)" >&2; exit 1; fi
