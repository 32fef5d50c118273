#!/usr/bin/env bash
# s56 call 6: the chained d128 forward (branch cross-tile, FwdWsConfig::kCrossTile: two Q buffers,
# a tile's last P V in one GEMM turn with the next tile's first S; d128 up to 1k keys).
# Pack .gpu-ct = the branch's build (library and tests); .gpu-exp/ab: amain / zmain = main 2b843ab's
# library (two names, so that each order runs), ct = the branch's. carry [.gpu-ct, .gpu-exp]; ~6 min.
#  1. the whole gtest binary (ForwardVsReference holds chained shapes: d128 q2048 x k512 b3 = 384 tiles,
#     17 x 17 b9000 = 72000 one-block tiles), the new ForwardChainedTiles, tail split, repeat;
#  2. memcheck and racecheck on a chained shape (384 tiles of 4 blocks);
#  3. ab.py, main against the branch in both orders: d128 512 / 1k (chained).
export PACK=.gpu-ct
nvidia-smi --query-gpu=name --format=csv,noheader
GT_SHARDS=4 GT_T=150 \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
SAN_T=120 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d128_full_b3_h8x2_q2048_k512' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "rc=|SUMMARY|Invalid|Race|hazard" | head -8
export AB_OP=attention AB_POINTS=128:512:0,128:1024:0
AB_ONLY="amain ct" AB_ROUNDS=2 AB_TAG=main-first bash scripts/gpu-phases.sh ab 2>&1 | tail -6
AB_ONLY="ct zmain" AB_ROUNDS=2 AB_TAG=ct-first bash scripts/gpu-phases.sh ab 2>&1 | tail -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
