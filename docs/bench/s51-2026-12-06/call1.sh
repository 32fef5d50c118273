#!/usr/bin/env bash
# Session 51, first call after callM/callW: on an H200, issue 5's backward record (s48 callB.sh).
# On an H100 instead, a second softcap A/B (wgs / fmt2 / main47) at points callW did not time.
# carry [.gpu-m50, .gpu-rs46, .gpu-exp/ab/libhopattn-{main47,fmt2,wgs}.so.xz].
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
  *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
  *)
    echo "$gpu: no H200, the softcap A/B instead"
    for l in main47 fmt2 wgs; do xz -T8 -dkf .gpu-exp/ab/libhopattn-$l.so.xz; done
    PACK=.gpu-m50 AB_ONLY='main47 fmt2 wgs' AB_OP=attention_softcap AB_ROUNDS=3 AB_TAG=wgs2 \
      AB_POINTS=64:512:0,64:2048:1,64:4096:1,128:512:0,128:2048:1,128:4096:0,128:16384:1 \
      bash scripts/gpu-phases.sh ab 2>&1 | tail -10
    bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
