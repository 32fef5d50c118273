#!/usr/bin/env bash
# Session 49's first device call: on an H200, issue 5's backward record (s48 callB.sh); on an H100
# (where the backward already met issue 5's ratios in session 47), the edge-turns A/B (s48 callX.sh).
# carry [.gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-et.so.xz]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
  *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
  *) bash docs/bench/s48-2026-12-05/callX.sh; bash scripts/gpu-phases.sh bundle 2>&1 | grep rc= ;;
esac
