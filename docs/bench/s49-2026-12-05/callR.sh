#!/usr/bin/env bash
# For a later device session (prepared in session 49, not yet run): the forward's row sums on the
# tensor cores (branch ws-tc-rowsum d7f9d65, HOPATTN_WS_TC_ROWSUM=1; library tcrs = main's objects
# with fwd_bf16_hdim64/128 rebuilt with the flag). Key loops 8-9% shorter; the lse comes from the
# 16-bit P's sum, which a numpy model puts beyond the gtests' lse bar (1e-4) on rows of 2-17 keys.
# Run callS.sh first: if its HMMA normaliser costs time beside the WGMMAs, this will too.
# 1. The A/B, 3 rounds: does an 8% shorter key loop buy time (d64 is where the issue rate binds)?
# 2. The bf16 d64/d128 forward gtests on tcrs: how many cases the lse bar fails, and by how much.
# carry [.gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-tcrs.so.xz]; ~5 min.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
AB_ONLY='main47 tcrs' AB_OP=attention AB_ROUNDS=3 AB_TAG=tcrs \
  AB_POINTS=64:512:0,64:1024:1,64:4096:0,64:4096:1,64:16384:0,128:1024:0,128:4096:0,128:16384:0,128:4096:1 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -11
LIB=$PWD/.gpu-exp/ab/libhopattn-tcrs.so GT_SHARDS=4 GT_T=150 GT_FILTER='Sm90/ForwardVsReference.*bf16_d64*:Sm90/ForwardVsReference.*bf16_d128*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:" | head -4
grep -h "lse rel_l2" $OUT/gt-*.log | sed 's/.*lse rel_l2=\([0-9.e-]*\).*/\1/' | sort -g | tail -5
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
