# Prebuilt in session 46 (if it survived): .gpu-rs46, a full pack of main a3ad089 with BOTH
# fp8-row-shift.patch and varlen-row-shift.patch applied, and .gpu-exp/ab/libhopattn-base.so.xz (main's
# kernels, 6b31405 = a3ad089) and libhopattn-rs46.so.xz (the pack's library): carry [.gpu-rs46, .gpu-exp]
# and run at once. Otherwise build as below, naming the pack .gpu-rs46 and its library rs46.
# Session 46's plan for the FP8 d64 causal row shift (perf-notes, "The same for FP8 d64 causal").
# Here, before the call: git apply docs/bench/s46-2026-12-05/fp8-row-shift.patch (or check out branch
#   fp8-row-shift-s46); bash scripts/gpu-pack.sh (full build, ~16 min: every forward object includes
#   tile_shape.hpp); xz -T2 -6 .gpu/lib/libhopattn.so; mv .gpu .gpu-fp8rs; main's own library (a full
#   build of main) as .gpu-exp/ab/libhopattn-base.so.xz and the new one as libhopattn-fp8rs.so.xz.
#   carry [.gpu-fp8rs, .gpu-exp]. ~3 min on the device.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
GT_SHARDS=4 GT_T=120 GT_FILTER='*Fp8*:*Varlen*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
PY_SHARDS=4 PY_T=150 PY_ARGS='tests/python -k fp8' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -6
SAN_T=120 SAN_FILTER='Sm90Fp8/*d64_causal*q1000*:Sm90Fp8/*d64_causal*q255*' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
AB_ONLY='base rs46' AB_OP=forward_fp8 AB_ROUNDS=5 AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:16384:1,128:4096:1 AB_TAG=fp8rs bash scripts/gpu-phases.sh ab 2>&1 | tail -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
