#!/usr/bin/env bash
# Lead from session 65 (H100, one unwarmed round): batch 8 at 1k read 24.9 us with 4 splits forced
# against 25.7-26.7 with the heuristic's 2. Not run in session 65; session 66 ran it as its own
# callS.sh (the same measurement with the intermediate files kept off $OUT), which this now calls.
exec bash "$(dirname "$0")/../s66-2026-12-07/callS.sh" "$@"
