#!/usr/bin/env bash
# Session 53: d64 with 128-row tiles (branch d64-rows128, library r128f: main + FwdWsConfig's
# kBlockMOverride, the bf16/fp16 d64 units and the two host sources rebuilt; the rule still picks
# 192 everywhere, HOPATTN_D64_QUERY_TILE=128 forces the new kernels).
# carry [.gpu-m52, .gpu-exp/ab/libhopattn-r128f.so.xz]; ~6 min.
# 1. correctness with 128 rows forced: the d64 fixed-length forward gtests, the tail split's, repeat.
# 2. ab.py: main (m52's library), r128f (192, the default), r128 (the same library, 128 forced).
# 3. compare.py d64 512-4k with 128 forced (peers in the same process).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
export PACK=.gpu-m52
ab=$PWD/.gpu-exp/ab
xz -T8 -dkf $ab/libhopattn-r128f.so.xz
HOPATTN_D64_QUERY_TILE=128 GT_T=200 GT_SHARDS=4 LIB=$ab/libhopattn-r128f.so \
  GT_FILTER='Sm90/ForwardVsReference.*_d64_*:Sm90Repeat.*:ForwardTailSplit.*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|passed|failed|FAIL" | head -12
AB_OP=attention AB_ROUNDS=${ROUNDS:-3} AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:512:0,64:1024:0,64:2048:0,64:4096:0 \
  AB_EXTRA="--lib main=$PWD/.gpu-m52/lib/libhopattn.so --lib r128=$ab/libhopattn-r128f.so --env r128:HOPATTN_D64_QUERY_TILE=128" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -14
if [ "${GRID:-1}" = 1 ]; then
  HOPATTN_D64_QUERY_TILE=128 LIB=$ab/libhopattn-r128f.so GRID_T=200 \
    GRID_ARGS="--direction fwd --hdims 64 --seqlens 512,1k,2k,4k --out-dir ${OUT:-/tmp/out} --tag r128 --no-plot" \
    bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -14
fi
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
