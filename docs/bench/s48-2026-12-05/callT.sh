#!/usr/bin/env bash
# Session 48's trace call (prepared without a device): where the d64 causal forward's time goes.
# FlashAttention-3 on our H200 runs d64 causal at 0.95 of its non-causal rate at 4k (440 / 461
# TFLOP/s); ours ran at 0.76 (session 43, before the row shift). bench/fwd_trace.py fits each
# tile's time against its key blocks (slope: a block's cost; intercept: a tile's fixed cost, with
# a causal tile's diagonal masking), and reports the gaps between an SM's tiles and how far apart
# the SMs finish. Library: .gpu-exp/ab/libhopattn-trace.so.xz (main's objects with fwd_bf16_hdim64
# and fwd_bf16_hdim128 compiled with -DHOPATTN_FWD_TRACE=1; key loops as main's, 663 / 618
# instructions at d64 causal / non-causal).
# Then the same work through the packed kernel, whose tiles come from an atomic counter (the dynamic
# order, session 26), against the fixed-length kernel's static order: bench/varlen_same_work.py at
# the paper grid's d64 shapes, two rounds, main's library. A packed/fixed ratio below 1 at causal
# would say the static order itself costs the fixed-length kernel that much.
# carry [.gpu-rs46, .gpu-exp/ab/libhopattn-trace.so.xz, .gpu-exp/ab/libhopattn-main47.so.xz] (or
# beside callN's); ~2-3 min.
nvidia-smi --query-gpu=name --format=csv,noheader
ab=$PWD/.gpu-exp/ab
O=${OUT:-/tmp/out}
mkdir -p $O/trace
[ -f $ab/libhopattn-trace.so ] || xz -T8 -dk $ab/libhopattn-trace.so.xz
d=/tmp/l-trace && mkdir -p $d && ln -sf $ab/libhopattn-trace.so $d/libhopattn.so
LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$ab/libhopattn-trace.so HOPATTN_BWD_TRACE=1 PYTHONPATH=$PWD/.gpu-rs46/python \
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/fwd_trace.py --dump $O/trace \
  --points 64:512:1,64:1024:1,64:2048:1,64:4096:1,64:16384:1,64:1024:0,64:4096:0,128:4096:0,128:4096:1 2>&1 | tee $O/fwd-trace.txt
echo "fwd_trace rc=${PIPESTATUS[0]}"
[ -f $ab/libhopattn-main47.so ] || xz -T8 -dk $ab/libhopattn-main47.so.xz
m=/tmp/l-main47 && mkdir -p $m && ln -sf $ab/libhopattn-main47.so $m/libhopattn.so
for r in 1 2; do
  for sb in 512:32 1024:16 2048:8 4096:4 16384:1; do
    LD_LIBRARY_PATH=$m HOPATTN_LIBRARY=$ab/libhopattn-main47.so PYTHONUNBUFFERED=1 timeout 60 \
      python3 bench/varlen_same_work.py --hdim 64 --heads 32 --seqlen ${sb%:*} --batch ${sb#*:} 2>&1 | tail -2
  done
done | tee $O/same-work.txt
