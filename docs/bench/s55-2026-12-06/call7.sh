#!/usr/bin/env bash
# Session 55, last ~2 min of device time: v2 (v2-release-unpredicated-mapa.patch on the bf16
# d128/d256 units of the branch's build) against main 5b9e47a, d128 16k and d256 16k, v2 first.
# carry [.gpu-cr, .gpu-m55, .gpu-exp]
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f .gpu-m55/lib/libhopattn.so ] || xz -T8 -dk .gpu-m55/lib/libhopattn.so.xz
export PACK=.gpu-cr
AB_OP=attention AB_ROUNDS=2 AB_ONLY=none AB_POINTS=128:16384:0,256:16384:0 \
  AB_EXTRA="--lib v2=$PWD/.gpu-exp/ab/libhopattn-v2.so.xz --lib main=$PWD/.gpu-m55/lib/libhopattn.so" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -4
grep '^AB' ${OUT:-/tmp/out}/ab.log
