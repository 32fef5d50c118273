#!/usr/bin/env bash
# Session 59 (prepared, not yet run): the FP8 forward with the new O layout (11b0fea changed its bf16 O
# store too; only bf16 points were timed). ab.py --op forward_fp8: main before (old, the .gpu-m59 pack =
# e1c1a59) against main after (PACK, default .gpu-m60), base again last; d128 4k, d256 16k. Any card;
# ~60 s. carry [.gpu-m59, PACK].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
for p in .gpu-m59 $PACK; do [ -f $p/lib/libhopattn.so ] || xz -T8 -dk $p/lib/libhopattn.so.xz; done
AB_ONLY=none AB_OP=forward_fp8 AB_ROUNDS=3 AB_POINTS=128:4096:0,256:16384:0 AB_TAG=fp8 \
  AB_EXTRA="--lib old=$PWD/.gpu-m59/lib/libhopattn.so --lib new=$PWD/$PACK/lib/libhopattn.so --lib zold=$PWD/.gpu-m59/lib/libhopattn.so" \
  bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^==="
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=  # NO_BUNDLE: a later script bundles
