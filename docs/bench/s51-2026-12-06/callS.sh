#!/usr/bin/env bash
# Session 51 (prepared, not yet run): the L2-sectioned causal order for d64 (branch d64-l2-section,
# d6d0746; library sec = main 54ab4f4's objects + the branch's fwd_bf16_hdim64). Why: perf-notes
# "Session 51" (d64 4k causal: L2 hit 9.9%, ~5.6x the minimum HBM bytes).
# 1. Correctness: the bf16 d64 causal forward gtests with sections forced small (1 and 3 pairs: the
#    test shapes are below the rule's threshold), then the whole forward filter under the rule.
# 2. A/B, d64 causal 512-16k, 3 rounds: m51 (main), sec (the rule), plain (sec with sections off:
#    the code's cost alone), secs (the rule with the snake forced on; the model puts the static
#    round-robin's imbalance at 1.6-2.2% with sections, against 1.0-3.1% plain).
# 3. ncu at d64 4k causal: DRAM bytes and L2 hit rate, plain against the rule.
# carry [.gpu-m51, .gpu-exp/ab/libhopattn-m51.so.xz, .gpu-exp/ab/libhopattn-sec.so.xz]; ~6 min, either card.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-m51
xz -T8 -dkf .gpu-exp/ab/libhopattn-sec.so.xz
sec=$PWD/.gpu-exp/ab/libhopattn-sec.so
for g in 1 3; do
  echo "== HOPATTN_WS_SECTION=$g"
  HOPATTN_WS_SECTION=$g LIB=$sec GT_T=120 GT_FILTER='Sm90/ForwardVsReference.*bf16_d64_causal*' \
    bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -4
done
LIB=$sec GT_SHARDS=2 GT_T=150 GT_FILTER='*Forward*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
LIB=$sec AB_ONLY='m51 sec' AB_OP=attention AB_ROUNDS=3 AB_TAG=sec \
  AB_EXTRA="--lib plain=$sec --env plain:HOPATTN_WS_SECTION=0 --lib secs=$sec --env secs:HOPATTN_WS_SNAKE=1 --warm 1" \
  AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:8192:1,64:16384:1 bash scripts/gpu-phases.sh ab 2>&1 | tail -10
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
mv $OUT/logs.tgz $OUT/logs-callS.tgz
p=$PWD/.gpu-m51
export PYTHONPATH=$p/python:$p/bench PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$(dirname $sec) HOPATTN_LIBRARY=$sec
for v in 0 rule; do
  tag=d64c4k-sec$v
  ( [ $v = rule ] || export HOPATTN_WS_SECTION=$v
    timeout 90 ncu --kernel-name regex:fwd_ws_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis -o /tmp/$tag -f python3 $p/bench/ncu_shape.py --op attention --hdim 64 --seqlen 4096 --causal \
      > $OUT/ncu-$tag.log 2>&1 ); echo "$tag rc=$?"
  ncu -i /tmp/$tag.ncu-rep --page details > $OUT/details-$tag.txt 2>&1
  grep -E "Duration|L2 Hit Rate|DRAM Throughput|Memory Throughput" $OUT/details-$tag.txt | head -5
done
