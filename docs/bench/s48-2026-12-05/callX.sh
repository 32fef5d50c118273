#!/usr/bin/env bash
# Session 48's edge-turns call (prepared without a device): a tile's first S GEMM and last P V GEMM
# issued outside the ping-pong turns, as FlashAttention-3 places them (branch ws-edge-turns,
# HOPATTN_WS_EDGE_TURNS=0; perf-notes "Session 48"). Library .gpu-exp/ab/libhopattn-et.so.xz: main's
# objects with fwd_bf16_hdim64/128/256 and fp8_bf16_hdim128 built with the flag off.
# carry [.gpu-rs46, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-et.so.xz]
# (with callT/callN's, one call); ~5 min. Merge (the flag's default flipped, the whole suites run on
# the merged library) if the tests pass and et gains at d64 causal without losing elsewhere.
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
ET=$PWD/.gpu-exp/ab/libhopattn-et.so
[ -f $ET ] || xz -T8 -dk $ET.xz
# 1. The bf16 and FP8 forward gtests that run the rebuilt units (fixed, windowed, packed, prefill).
LIB=$ET GT_SHARDS=4 GT_T=200 GT_FILTER='Sm90/ForwardVsReference.*bf16*:Sm90Window/ForwardVsReference.*bf16*:ForwardTailSplit.*:Sm90Repeat.*:Sm90Fp8/Fp8ForwardVsReference.*:Sm90Fp8/Fp8AttentionVsReference.*:Sm90/VarlenVsReference.*bf16*:Sm90/KvCachePrefillVsReference.*bf16*' \
  bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -8
# 2. racecheck and memcheck on a d64 causal tile walk (three warpgroups) and a d128 non-causal one.
LIB=$ET SAN_T=150 SAN_FILTER='Sm90/ForwardVsReference.*bf16_d64_causal_b3_h8x2_q1000_k1000:Sm90/ForwardVsReference.*bf16_d128_full_b1_h8x8_q127_k255' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|rc=" | head -4
# 3. The A/B, 3 rounds: d64 causal over the grid; short non-causal tiles (512-1k keys: 4-8 blocks,
# where two turns a tile also weigh) and long controls; FP8 d128.
AB_ONLY='main47 et' AB_OP=attention AB_ROUNDS=3 AB_TAG=et \
  AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:16384:1,64:1024:0,64:4096:0,128:512:0,128:1024:1,128:4096:0,256:512:0,256:2048:1 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -14
AB_ONLY='main47 et' AB_OP=forward_fp8 AB_ROUNDS=3 AB_TAG=et8 AB_POINTS=128:4096:0,128:16384:0,128:4096:1 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -5
