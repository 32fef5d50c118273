#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root with .gpu/ present: compute-sanitizer memcheck
# and racecheck over a small forward grid (one shape per head dim, causal off and on, GQA, ragged
# seqlens), for the default kernel and for HOPATTN_FWD_KERNEL=mma. Prints each tool's summary line.
set -uo pipefail
pack=${PACK:-.gpu}
export LD_LIBRARY_PATH=${LIBDIR:-$PWD/$pack/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Default: every head dim at q127/k255, plus d128 causal q2048/k512 (tiles with no visible key
# between full ones, N=128) and d128 non-causal q512/k2048 (the N=160 key tile). The backward
# (which always runs its own kernel) at the same ragged shape, every head dim, causal and not, at
# batch 1 and in deterministic mode at batch 2 (its semaphore hand-off between CTAs). FP8: forward_fp8 at
# q127/k255 and q255/k127 with GQA (every head dim, causal and not; the V^T pre-pass included), and
# the rotate-and-quantise kernel at a ragged seqlen. Varlen: forward (mixed lengths 0..1000) and
# backward (keys longer and shorter than queries) per head dim, causal and not, and the
# deterministic varlen backward.
# Environment: LIBDIR, the folder of the libhopattn.so to check (default .gpu/lib); SAN_KERNELS, the
# forward kernels to run the filter under (default "ws mma"; the backward runs its own either way).
filter=${1:-'Sm90*bf16_d*_b1_h8x2_q127_k255*:Sm90*bf16_d128_causal_b1_h8x2_q2048_k512*:Sm90*bf16_d128_full_b1_h8x2_q512_k2048*:Sm90/BackwardVsReference*bf16_d*_b2_h8x2_q255_k127_det:Sm90/BackwardVsReference*bf16_d*_b1_h8x2_q255_k127:Sm90Fp8/Fp8ForwardVsReference*_h4x1_q127_k255_block:Sm90Fp8/Fp8ForwardVsReference*_h4x1_q255_k127_block:Sm90Fp8/Fp8AttentionVsReference*_rotv_block_b1_h4x4_q17_k300:Fp8/QuantizeRows*bf16_*_s127:Fp8/MakeVt*bf16_d*_s129:Sm90/VarlenVsReference*bf16_d*_h8x2_mixed:Sm90/VarlenBackwardGrid*bf16_d*_h8x2_qkdiffer:Sm90VarlenBackward.DeterministicRunsAreBitwiseIdentical'}
status=0
for kernel in ${SAN_KERNELS:-ws mma}; do
  for tool in memcheck racecheck; do
    log=$(mktemp)
    HOPATTN_FWD_KERNEL=$kernel compute-sanitizer --tool $tool --error-exitcode 3 \
      $pack/bin/hopattn_gpu_tests --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "[$kernel/$tool rc=$rc] $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$log" | tr '\n' ' ')"
    [ $rc -eq 0 ] || grep -E 'Invalid|Race|hazard|Error' "$log" | head -8
    rm -f "$log"
  done
done
exit $status
