#!/usr/bin/env bash
# Run HERE (no GPU needed): builds, then packs what the GPU machine needs into .gpu/ (git-ignored,
# at most 60 MiB): binaries, the library, the Python package, the Python tests and bench scripts.
# Then on the GPU machine, from the repository root: `bash scripts/gpu-suite.sh` (docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPATTN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" "$@"
pack=$root/.gpu
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
cp "$build/libhopattn.so" "$pack/lib/"
for exe in tests/hopattn_gpu_tests tests/hopattn_cpu_tests hopattn-bench hopattn-demo hopattn-bwd-check; do
  cp "$build/$exe" "$pack/bin/"
done
strip --strip-unneeded "$pack"/bin/* 2>/dev/null || true
cp -r "$root/python" "$root/bench" "$root/include" "$root/pyproject.toml" "$pack/"
mkdir -p "$pack/tests" && cp -r "$root/tests/python" "$pack/tests/"
git -C "$root" rev-parse --short HEAD > "$pack/COMMIT" 2>/dev/null || echo unknown > "$pack/COMMIT"
git -C "$root" diff --quiet 2>/dev/null || sed -i 's/$/-dirty/' "$pack/COMMIT"
size_mib=$(du -sm "$pack" | cut -f1)
echo "packed $pack: ${size_mib} MiB, commit $(cat "$pack/COMMIT")"
if [ "$size_mib" -gt 60 ]; then echo "error: .gpu is over 60 MiB" >&2; exit 1; fi
