#!/usr/bin/env bash
# Session 59 (prepared, not yet run): is a forward tile's end on the SM's critical path? Libraries
# d500 and d1000: main's objects with fwd_bf16_hdim128 built from main + end-delay.patch with
# -DHOPATTN_FWD_END_DELAY_NS=500 / 1000 (every consumer thread spins that long before the O store, at
# every tile's end; `SRC_ROOT=<worktree with the patch> scripts/variant-lib.sh d500
# "-DHOPATTN_FWD_END_DELAY_NS=500" fwd_bf16_hdim128`). ab.py against main's library (base, zbase),
# d128 non-causal at the defaults. If the end were wholly on the critical path, 0.5 us a tile would
# cost ~5.6% at 512 (8.9 us tiles), ~3% at 1k, ~0.9% at 4k; if the other warpgroup's GEMMs hid it,
# nothing. The answer says whether the short-length gap can be closed at the tile's end at all
# (sessions 56-59 changed it without gain). Any card (say which); ~90 s. carry [PACK, .gpu-exp].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so  # ab.py's first library: main
AB_ONLY="base d500 d1000" AB_OP=attention AB_ROUNDS=3 AB_POINTS=128:512:0,128:1024:0,128:4096:0 \
  AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^==="
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=  # NO_BUNDLE: a later script bundles
