#!/usr/bin/env bash
# s56: an H200 runs call4 (the forward grid, issue 3's record), any other card call5 (the trace).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
  *H200*) bash docs/bench/s56-2026-12-06/call4.sh ;;
  *) bash docs/bench/s56-2026-12-06/call5.sh ;;
esac
