#!/usr/bin/env bash
# Builds if needed and runs every test suite: C++ CPU tests, C++ GPU tests (they skip without an
# sm_90 device) and the Python tests (torch/GPU ones skip where unavailable).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
build=${HOPATTN_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
"$build/tests/hopattn_cpu_tests" --gtest_brief=1
"$build/tests/hopattn_gpu_tests" --gtest_brief=1
HOPATTN_LIBRARY="$build/libhopattn.so" HOPATTN_REQUIRE_LIBRARY=1 PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 -m pytest -q "$root/tests/python"
