#!/usr/bin/env bash
# Next session (prepared): the L2-sectioned d64 causal order's merge check (branch d64-l2-section,
# its rule: sections up to 22 query blocks, with the snake; library sec2 = main 54ab4f4's objects +
# the branch's fwd_bf16_hdim64):
# 1. the d64 causal forward gtests with sections forced to 1 and 5 pairs (the test shapes are
#    below the rule's threshold, so the section path needs forcing);
# 2. the whole gtest binary and pytest, 4 shards each, under the rule (parts 1-2 on pack .gpu-sec);
# 3. compare.py, d64 causal 512-16k with the peers in the same process, main (m51) then sec2
#    (on an H200 this is issue 3's record for those rows).
# Part 1 runs on pack .gpu-sec: the branch's whole build (43dcbb5, built in session 51; its own
# tests, so fp16 d64 is covered too). Part 3 times sec2 (the branch's bf16 d64 unit on main's
# objects) against m51 (main).
# carry [.gpu-sec, .gpu-m51, .gpu-exp/ab/libhopattn-m51.so.xz, .gpu-exp/ab/libhopattn-sec2.so.xz];
# `callX.sh 1` (parts 1-2, ~5 min) and `callX.sh 2` (part 3, ~4 min).
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m51
ab=$PWD/.gpu-exp/ab
for l in m51 sec2; do xz -T8 -dkf $ab/libhopattn-$l.so.xz; done
if [ "${1:-1}" = 1 ]; then
  export PACK=.gpu-sec
  for g in 1 5; do
    echo "== HOPATTN_WS_SECTION=$g"
    HOPATTN_WS_SECTION=$g GT_T=100 GT_FILTER='Sm90/ForwardVsReference.*_d64_causal*' \
      bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
  done
  GT_SHARDS=4 GT_T=170 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
  PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
  bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
else
  for l in m51 sec2; do
    LIB=$ab/libhopattn-$l.so GRID_T=200 GRID_ARGS="--direction fwd --hdims 64 --causal 1 --out-dir $OUT --tag $l --no-plot" \
      bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -12
    mv $OUT/grid.log $OUT/grid-$l.log
  done
fi
