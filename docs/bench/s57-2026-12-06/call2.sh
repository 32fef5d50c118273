#!/usr/bin/env bash
# Session 57, call 2: branch lp2 (722417d: the tile's last P V without a GEMM turn, FA3's order),
# next-lastpv.sh trimmed to fit a short budget. Pack .gpu-lp = lp2's build; .gpu-exp/ab: amain and
# zmain = main 6de8e97's library (two names: both orders), lp = lp2's. carry [.gpu-lp, .gpu-exp].
export PACK=.gpu-lp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
GT_SHARDS=4 GT_T=150 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
SAN_T=90 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b3_h8x2_q2048_k512' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|Invalid|Race|hazard" | head -8
export AB_OP=attention AB_POINTS=128:512:0,128:1024:0,128:4096:0,128:1024:1,256:2048:1
AB_ONLY="amain lp" AB_ROUNDS=3 AB_TAG=main-first timeout 90 bash scripts/gpu-phases.sh ab 2>&1 > /dev/null
AB_ONLY="lp zmain" AB_ROUNDS=3 AB_TAG=lp-first timeout 90 bash scripts/gpu-phases.sh ab 2>&1 > /dev/null
for f in ${OUT:-/tmp/out}/ab-main-first.log ${OUT:-/tmp/out}/ab-lp-first.log; do echo "== $f"; grep -v "^AB " $f | tail -9; done
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
