#!/usr/bin/env bash
# Branch d256-sym: the 80-key d256 backward (FlashAttention-3's layout: both warpgroups split S and dP
# by keys, dK^T / dV^T / dQ^T by head_dim) as a measuring library, .gpu-exp/ab/libhopattn-keys80.so.xz
# (main's pack with bwd_{bf16,fp16}_hdim256 and bwd_heuristics.cpp from the branch; built with
# OBJ_DIR=/tmp/k80obj SRC_ROOT=/work/sym JOBS=2 bash scripts/variant-lib.sh keys80 "" bwd_bf16_hdim256
# bwd_fp16_hdim256 src/api/bwd_heuristics.cpp). HOPATTN_BWD_KEYS80=0 in the same library runs main's
# head_dim split: the control. Any card. carry [.gpu-m63, .gpu-exp]. ~5 min.
#  1. the backward gtests on the branch library (4 shards), 2. memcheck + racecheck on a d256
#     unmasked shape, 3. ab.py backward d256 non-causal 1k / 4k / 16k, base (=0) / k80 / zbase (=0).
export PACK=${PACK:-.gpu-m63} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
L=$PWD/.gpu-exp/ab/libhopattn-keys80.so; [ -f $L ] || xz -T8 -dk $L.xz
mkdir -p /tmp/gt; OUT=/tmp/gt LIB=$L GT_SHARDS=4 GT_T=${GT_T:-200} GT_FILTER='*Backward*' NO_BUNDLE=1 \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -30
OUT=/tmp/gt LIB=$L SAN_T=150 SAN_FILTER='Sm90/BackwardVsReference*bf16_d256_full_b1_h8x2_q255_k127:Sm90/BackwardVsReference*bf16_d256_full_b1_h8x2_q127_k255' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" | head -10
p=$PWD/$PACK; export PYTHONPATH=$p/python LD_LIBRARY_PATH=$PWD/.gpu-exp/ab
timeout ${AB_T:-200} python3 bench/ab.py --op backward --points 256:1024:0,256:4096:0,256:16384:0 --rounds ${ROUNDS:-3} \
  --lib base=$L --lib k80=$L --lib zbase=$L --env base:HOPATTN_BWD_KEYS80=0 --env zbase:HOPATTN_BWD_KEYS80=0 > $O/ab-k80.log 2>&1
echo "== ab (rc=$?)"; grep -v '^AB ' $O/ab-k80.log | tail -8
