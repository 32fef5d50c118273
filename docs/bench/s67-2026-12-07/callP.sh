#!/usr/bin/env bash
# Branch fp8-cluster: the FP8 forward's fixed-length non-causal kernels (d128 / d256, 128-key tiles,
# e4m3 V) in 2-CTA clusters sharing each K and V^T load, as the 16-bit kernel's (session 67's H200
# survey: +2.8% / +4.2% for bf16 d256 at 4k / 8k). Off unless HOPATTN_FP8_CLUSTER=1, so one library
# A/Bs it: .gpu-exp/ab/libhopattn-fp8cl.so.xz (main's build with fp8_{bf16,fp16}_hdim{128,256} and
# heuristics.cpp from the branch: `OBJ_DIR=/tmp/fp8clobj SRC_ROOT=/work/fp8cl JOBS=2 bash
# scripts/variant-lib.sh fp8cl "" fp8_bf16_hdim128 fp8_bf16_hdim256 fp8_fp16_hdim128 fp8_fp16_hdim256
# src/api/heuristics.cpp`). Any card (the H200 is the record). carry [.gpu-m67, .gpu-exp]. ~4 min.
#  1. every FP8 gtest with the cluster forced (every even-count d128/d256 non-causal shape takes it),
#  2. memcheck + racecheck on FP8 d128/d256 shapes with the cluster forced,
# Session 68: FP8CL=fp8cl2 (the library with d128's 224-key tile clustered too, same command with
# that name) and POINTS (ab.py's list) pick another library and points. E2E_POINTS adds an A/B of
# attention_fp8 (K quantised per 224 rows from 8k keys at d128, so the 224-key tile runs, which
# forward_fp8's per-128-row descales never reach), e.g. 128:8192:0,128:16384:0.
#  3. ab.py forward_fp8 (the kernel on pre-quantised inputs) d128 4k, d256 4k / 16k: base / cl / zbase.
export PACK=${PACK:-.gpu-m67} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
L=$PWD/.gpu-exp/ab/libhopattn-${FP8CL:-fp8cl}.so; [ -f $L ] || xz -T8 -dk $L.xz
mkdir -p /tmp/gt; HOPATTN_FP8_CLUSTER=1 OUT=/tmp/gt LIB=$L GT_SHARDS=4 GT_T=${GT_T:-150} GT_FILTER='*Fp8*' NO_BUNDLE=1 \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | head -12
HOPATTN_FP8_CLUSTER=1 OUT=/tmp/gt LIB=$L SAN_T=150 \
  SAN_FILTER='Sm90Fp8/Fp8ForwardVsReference*d128*_h4x1_q255_k127_block:Sm90Fp8/Fp8ForwardVsReference*d256*_h4x1_q255_k127_block' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|rc=|PASSED|FAILED" | head -8
p=$PWD/$PACK; export PYTHONPATH=$p/python LD_LIBRARY_PATH=$PWD/.gpu-exp/ab
timeout ${AB_T:-200} python3 bench/ab.py --op forward_fp8 --points ${POINTS:-128:4096:0,256:4096:0,256:16384:0} --rounds ${ROUNDS:-3} \
  --lib base=$L --lib cl=$L --lib zbase=$L --env cl:HOPATTN_FP8_CLUSTER=1 > $O/ab-fp8cl.log 2>&1
echo "== ab (rc=$?)"; grep -v '^AB ' $O/ab-fp8cl.log | tail -6
if [ -n "$E2E_POINTS" ]; then
  timeout ${E2E_T:-150} python3 bench/ab.py --op attention_fp8 --points $E2E_POINTS --rounds ${ROUNDS:-3} \
    --lib base=$L --lib cl=$L --lib zbase=$L --env cl:HOPATTN_FP8_CLUSTER=1 > $O/ab-fp8cl-e2e.log 2>&1
  echo "== ab attention_fp8 (rc=$?)"; grep -v '^AB ' $O/ab-fp8cl-e2e.log | tail -5
fi
