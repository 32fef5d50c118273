#!/usr/bin/env bash
# Session 49's first device call: on an H200, issue 5's backward record (s48 callB.sh); on an H100
# (where the backward already met issue 5's ratios in session 47), the combined candidate's suite
# (suite.sh). carry [.gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-all]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$gpu" in
  *H200*) bash docs/bench/s48-2026-12-05/callB.sh ;;
  *) bash docs/bench/s49-2026-12-05/suite.sh ;;
esac
