#!/usr/bin/env bash
# Session 55: call3's A/B again with the order reversed (the branch first, main second), since
# call3 read -1.3% for cr at d256 8k, where both libraries run the same SASS (main first there).
# carry [.gpu-cr, .gpu-m55]; ~3 min.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
for p in .gpu-m55 .gpu-cr; do [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz; done
export PACK=.gpu-cr
AB_OP=attention AB_ROUNDS=4 AB_ONLY=none AB_POINTS=128:4096:0,128:8192:0,128:16384:0,256:8192:0,256:16384:0 \
  AB_EXTRA="--lib cr=$PWD/.gpu-cr/lib/libhopattn.so --lib main=$PWD/.gpu-m55/lib/libhopattn.so" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
