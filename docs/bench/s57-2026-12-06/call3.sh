#!/usr/bin/env bash
# Session 57, call 3 (same warm H100 as call 2): five more rounds, both orders, at the three points
# call 2 left unclear. carry [.gpu-lp, .gpu-exp].
export PACK=.gpu-lp PYTHONUNBUFFERED=1 AB_OP=attention AB_POINTS=128:512:0,128:1024:0,256:2048:1
AB_ONLY="amain lp" AB_ROUNDS=5 AB_TAG=main-first timeout 100 bash scripts/gpu-phases.sh ab > /dev/null 2>&1
AB_ONLY="lp zmain" AB_ROUNDS=5 AB_TAG=lp-first timeout 100 bash scripts/gpu-phases.sh ab > /dev/null 2>&1
for f in $OUT/ab-*.log; do grep -v "^AB " $f | tail -5; done
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
