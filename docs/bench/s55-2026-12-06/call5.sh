#!/usr/bin/env bash
# Session 55: two variants of the clustered release against main (call3/call4: cr lost 1.5% at
# d128 16k in 7 of 7 rounds and gained 0.8% at d256 16k). v2: mapa unpredicated (cr's predicated
# mapa left a SEL and a live register per release); v3: v2 with both arrivals from warp 0 (lanes 0
# and 8, CUTLASS's threads). Both: the branch's build with bf16 d128 (v2 / v3) and d256 (v2) units.
# Then each variant's bf16 d128/d256 forward tests with the cluster forced, and memcheck/racecheck.
# carry [.gpu-cr, .gpu-m55, .gpu-exp]; ~5 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
for p in .gpu-m55 .gpu-cr; do [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz; done
export PACK=.gpu-cr
ab=$PWD/.gpu-exp/ab
AB_OP=attention AB_ROUNDS=3 AB_ONLY=none AB_POINTS=128:8192:0,128:16384:0,256:16384:0 \
  AB_EXTRA="--lib v2=$ab/libhopattn-v2.so.xz --lib main=$PWD/.gpu-m55/lib/libhopattn.so --lib v3=$ab/libhopattn-v3.so.xz" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -6
for v in v2 v3; do
  echo "== $v"
  export LIB=$ab/libhopattn-$v.so
  HOPATTN_FWD_CLUSTER=1 GT_SHARDS=4 GT_T=120 GT_FILTER='*ForwardVsReference*bf16_d128_full*:*ForwardVsReference*bf16_d256_full*:*Repeat*:*TailSplit*' \
    bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
  HOPATTN_FWD_CLUSTER=1 SAN_T=100 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b1_h8x2_q1000_k1000:Sm90/ForwardVsReference.*bf16_d256_full_b1_h8x2_q1000_k1000' \
    bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|PASSED" | head -6
done
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
