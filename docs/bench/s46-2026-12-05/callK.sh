# Prebuilt in session 46 (if it survived): .gpu-rs46, a full pack of main a3ad089 with BOTH
# fp8-row-shift.patch and varlen-row-shift.patch applied, and .gpu-exp/ab/libhopattn-base.so.xz (main's
# kernels, 6b31405 = a3ad089) and libhopattn-rs46.so.xz (the pack's library): carry [.gpu-rs46, .gpu-exp]
# and run at once. Otherwise build as below, naming the pack .gpu-rs46 and its library rs46.
# Session 46's plan for the packed (varlen) d64 causal row shift (varlen-row-shift.patch, branch
# varlen-row-shift-s46). Here, before the call: git apply the patch (it and fp8-row-shift.patch apply
# together on main c7617ea: one full build with both serves this and callJ.sh); bash scripts/gpu-pack.sh
# -DHOPATTN_DTYPES=bf16 "-DHOPATTN_HEAD_DIMS=64;128" (the KV-cache gtests need d128); xz the library;
# mv .gpu .gpu-vrs; its library as .gpu-exp/ab/libhopattn-vrs.so.xz, main's full library as
# libhopattn-base.so.xz. carry [.gpu-vrs, .gpu-exp]. ~4 min on the device.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
GT_SHARDS=4 GT_T=150 GT_FILTER='*Varlen*:*KvCache*:Sm90/ForwardVsReference.*d64*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
SAN_T=150 SAN_FILTER='Sm90/VarlenVsReference.MatchesPerSequenceFp64Reference/bf16_d64_causal_h8x2_random40:Sm90/VarlenVsReference.*bf16_d64_causal*' bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -6
# Packed vs fixed, each library in its own process, alternating (the fixed column is the row-shifted
# fixed kernel in both libraries: only the packed column should move).
for r in 1 2; do for l in base rs46; do
  echo "== varlen $l r$r"; HOPATTN_LIBRARY=$PWD/.gpu-exp/ab/libhopattn-$l.so PYTHONPATH=$PWD/$PACK/python timeout 60 python3 $PACK/bench/varlen.py --hdim 64 --gpu-time 2>&1 | grep -E "^\| (powers|uniform)" | cut -d'|' -f2-7 | tee -a $OUT/varlen-$l.log
done; done
PY_SHARDS=4 PY_T=150 PY_ARGS='tests/python -k varlen or kvcache' bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
