#!/usr/bin/env bash
# Session 62: how cuDNN launches its short-length forward kernels where it leads us (d64 512 / 1k,
# causal and not; d256 512). ncu on one call each of hopattn and cuDNN (torch SDPA): the kernel's
# name (cuDNN's carries its tile), grid, block, registers, shared memory, CTAs per SM, duration,
# tensor pipe. If cuDNN runs two CTAs an SM at d64, its tile boundaries overlap across CTAs, which
# a persistent one-CTA kernel cannot do. Any pack with main's library (PACK, default .gpu-m61);
# ~3 min, either card (say which). carry [PACK].
export PACK=${PACK:-.gpu-m61}
nvidia-smi --query-gpu=name --format=csv,noheader; ncu --version | tail -1
export NCU_SECTIONS="SpeedOfLight LaunchStats Occupancy ComputeWorkloadAnalysis"
run() {  # tag, args
  NCU_TAG=hop-$1 NCU_ARGS="--op attention $2" bash scripts/gpu-phases.sh ncu 2>&1 | grep -v "^==="
  NCU_TAG=cudnn-$1 NCU_KERNELS="fprop|sdpa|cudnn|flash" NCU_ARGS="--op cudnn $2" \
    bash scripts/gpu-phases.sh ncu 2>&1 | grep -v "^==="
}
run d64-512 "--hdim 64 --seqlen 512"
run d64-1k "--hdim 64 --seqlen 1024"
run d64c-1k "--hdim 64 --seqlen 1024 --causal"
run d256-512 "--hdim 256 --seqlen 512"
O=${OUT:-/tmp/out}
for f in $O/details-*.txt; do
  echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Shared Memory Config|Dynamic Shared|Block Limit|Theoretical Occ|Achieved Occ|Waves Per|Grid Size|Block Size|Issue Slots Busy|Tensor is|SM Frequency" $f | head -24
done
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
