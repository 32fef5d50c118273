#!/usr/bin/env bash
# Session 59 (prepared, not yet run): is cuDNN's lead at short d128 non-causal lengths a denser steady
# state or a cheaper tile boundary? ncu on one forward call each of hopattn and cuDNN (torch SDPA,
# bench/ncu_shape.py --op cudnn) at d128 512 / 1k / 4k (the paper grid's shapes): duration, SM
# throughput and the tensor pipes' active share (gpu-phases.sh ncu). If cuDNN's tensor pipe is busier
# at 512 by about its speed lead and level at 4k, the boundary is where it wins. Any pack with main's
# library (PACK, default .gpu-m60); ~2-3 min, either card (say which). carry [PACK].
export PACK=${PACK:-.gpu-m60}
nvidia-smi --query-gpu=name --format=csv,noheader; ncu --version | tail -1
for s in 512 1024 4096; do
  NCU_TAG=hop-d128-$s NCU_ARGS="--op attention --hdim 128 --seqlen $s" bash scripts/gpu-phases.sh ncu 2>&1 | grep -v "^==="
  NCU_TAG=cudnn-d128-$s NCU_KERNELS="fprop|sdpa|cudnn|flash" NCU_ARGS="--op cudnn --hdim 128 --seqlen $s" \
    bash scripts/gpu-phases.sh ncu 2>&1 | grep -v "^==="
done
[ -n "${NO_BUNDLE:-}" ] || bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=  # NO_BUNDLE: a later script bundles
