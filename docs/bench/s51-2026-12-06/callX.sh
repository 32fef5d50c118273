#!/usr/bin/env bash
# Next session (prepared): the L2-sectioned d64 causal order's merge check (branch d64-l2-section,
# its rule: sections up to 22 query blocks, with the snake; library sec2 = main 54ab4f4's objects +
# the branch's fwd_bf16_hdim64). main's tests (.gpu-m51) on sec2:
# 1. the bf16 d64 causal forward gtests with sections forced to 1 and 5 pairs (the test shapes are
#    below the rule's threshold, so the section path needs forcing);
# 2. the whole gtest binary and pytest, 4 shards each, under the rule;
# 3. compare.py, d64 causal 512-16k with the peers in the same process, main (m51) then sec2
#    (on an H200 this is issue 3's record for those rows).
# sec2 holds the branch's bf16 d64 unit only: fp16 d64 gets the same order on merge, so the merge's
# own build (a pack of main + the branch, built here: ~25 min) is what should run part 1 in the
# end (PACK=that pack, LIB unset); sec2 is enough for part 3 and a first read of part 1.
# carry [.gpu-m51, .gpu-exp/ab/libhopattn-m51.so.xz, .gpu-exp/ab/libhopattn-sec2.so.xz]; ~8 min:
# split as `callX.sh 1` (1-2) and `callX.sh 2` (3) if a call's 600 s is short.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m51
ab=$PWD/.gpu-exp/ab
for l in m51 sec2; do xz -T8 -dkf $ab/libhopattn-$l.so.xz; done
if [ "${1:-1}" = 1 ]; then
  for g in 1 5; do
    echo "== HOPATTN_WS_SECTION=$g"
    HOPATTN_WS_SECTION=$g LIB=$ab/libhopattn-sec2.so GT_T=100 GT_FILTER='Sm90/ForwardVsReference.*_d64_causal*' \
      bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
  done
  LIB=$ab/libhopattn-sec2.so GT_SHARDS=4 GT_T=170 bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -12
  LIB=$ab/libhopattn-sec2.so PY_SHARDS=4 PY_T=150 bash scripts/gpu-phases.sh py 2>&1 | grep -E "rc=|passed|failed" | head -8
  bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
else
  for l in m51 sec2; do
    LIB=$ab/libhopattn-$l.so GRID_T=200 GRID_ARGS="--direction fwd --hdims 64 --causal 1 --out-dir $OUT --tag $l --no-plot" \
      bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -12
    mv $OUT/grid.log $OUT/grid-$l.log
  done
fi
