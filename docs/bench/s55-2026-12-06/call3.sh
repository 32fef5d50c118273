#!/usr/bin/env bash
# Session 55, part 2 (~6 min): A/B of main 5b9e47a (.gpu-m55) against the branch (.gpu-cr) at the
# clustered points and two unclustered controls (cr1: the branch with the cluster forced, for the
# rule's thresholds at d128 2k and d256 4k/8k), then the branch's pytest. carry [.gpu-cr, .gpu-m55]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
for p in .gpu-m55 .gpu-cr; do [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz; done
export PACK=.gpu-cr
AB_OP=attention AB_ROUNDS=3 AB_ONLY=none \
  AB_POINTS=128:1024:0,128:2048:0,128:4096:0,128:8192:0,128:16384:0,256:4096:0,256:8192:0,256:16384:0 \
  AB_EXTRA="--lib main=$PWD/.gpu-m55/lib/libhopattn.so --lib cr=$PWD/.gpu-cr/lib/libhopattn.so --lib cr1=$PWD/.gpu-cr/lib/libhopattn.so --env cr1:HOPATTN_FWD_CLUSTER=1" \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -12
PY_SHARDS=4 PY_T=240 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
