#!/usr/bin/env bash
# Branch xtile (docs/design-cross-tile.md): the next tile's first S GEMM issued with this tile's last
# P V, O's finalize and store under it, Q double-buffered. Session 56's branch cross-tile did this at
# d128 (-2.3% at 512, old 16-box O store); xtile is on main's 2-box store and covers d64 too. Measuring library .gpu-exp/ab/libhopattn-
# xtile.so.xz: main's objects with fwd_bf16_hdim128 and fwd_bf16_hdim64 built from the branch with
# -DHOPATTN_FWD_CROSS_TILE=1 (`SRC_ROOT=<xtile worktree> scripts/variant-lib.sh xtile
# "-DHOPATTN_FWD_CROSS_TILE=1" fwd_bf16_hdim128 fwd_bf16_hdim64`; it applies at d128 N = 128, i.e.
# seqlen_k <= 1k, and d64, non-causal fixed-length). In order, each gating the next:
#  1. the bf16 d128/d64 non-causal forward gtests, the tail split and repeat tests on it;
#  2. compute-sanitizer racecheck and memcheck on shapes that carry (384 tiles of 4 blocks; 192 of 8);
#  3. ab.py against main (base, zbase) at d128 and d64 512 / 1k, 5 rounds.
# Any card (say which); ~5 min. carry [PACK, .gpu-exp].
export PACK=${PACK:-.gpu-m60} PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f $PACK/lib/libhopattn.so ] || xz -T8 -dk $PACK/lib/libhopattn.so.xz
ln -sf $PWD/$PACK/lib/libhopattn.so .gpu-exp/ab/libhopattn-base.so
[ -f .gpu-exp/ab/libhopattn-xtile.so ] || xz -T8 -dk .gpu-exp/ab/libhopattn-xtile.so.xz
LIB=.gpu-exp/ab/libhopattn-xtile.so GT_SHARDS=4 GT_T=200 \
  GT_FILTER='Sm90/ForwardVsReference.*bf16_d128_full*:Sm90/ForwardVsReference.*bf16_d64_full*:ForwardTailSplit.*:Sm90Repeat.*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -v "^===" | tee $O/xtile-gt.txt | head -14
if grep -q " 0 failed" $O/xtile-gt.txt; then
  mkdir -p /tmp/xlib && ln -sf $PWD/.gpu-exp/ab/libhopattn-xtile.so /tmp/xlib/libhopattn.so
  LIBDIR=/tmp/xlib SAN_KERNELS=ws timeout 240 bash scripts/gpu-sanitize.sh \
    'Sm90/ForwardVsReference*bf16_d128_full_b3_h8x8_q2048_k512:Sm90/ForwardVsReference*bf16_d128_full_b3_h8x8_q1000_k1000:Sm90/ForwardVsReference*bf16_d64_full_b3_h8x8_q2048_k512' \
    2>&1 | tee $O/xtile-san.txt
  AB_ONLY="base xtile" AB_OP=attention AB_ROUNDS=5 AB_POINTS=128:512:0,128:1024:0,64:512:0,64:1024:0 \
    AB_EXTRA="--lib zbase=$PWD/$PACK/lib/libhopattn.so" bash scripts/gpu-phases.sh ab 2>&1 | grep -v "^===" | tail -8
else
  echo "xtile: gtests failed; no sanitizer, no timing"
  grep -h "FAILED\|Failure" $O/gt-*.log | head -20
fi
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
