#!/usr/bin/env bash
# Session 51's last ~100 s of device time: a first, one-round read of the L2-sectioned d64 causal
# order (library sec; plain = sec with sections off) against main (m51) at 2k and 4k, then the
# bf16 d64 causal forward gtests with 3-pair sections forced. callS.sh is the full version.
# carry [.gpu-m51, .gpu-exp/ab/libhopattn-m51.so.xz, .gpu-exp/ab/libhopattn-sec.so.xz]
nvidia-smi --query-gpu=name --format=csv,noheader
p=$PWD/.gpu-m51; ab=$PWD/.gpu-exp/ab
for l in m51 sec; do xz -T8 -dkf $ab/libhopattn-$l.so.xz; done
export PYTHONPATH=$p/python:$p/bench PYTHONUNBUFFERED=1
timeout 70 python3 $p/bench/ab.py --lib m51=$ab/libhopattn-m51.so --lib sec=$ab/libhopattn-sec.so \
  --lib plain=$ab/libhopattn-sec.so --env plain:HOPATTN_WS_SECTION=0 --op attention \
  --points 64:4096:1,64:2048:1 --rounds 1 --warm 0.5 2>&1 | tail -8
mkdir -p /tmp/lsec && ln -sf $ab/libhopattn-sec.so /tmp/lsec/libhopattn.so
HOPATTN_WS_SECTION=3 LD_LIBRARY_PATH=/tmp/lsec HOPATTN_LIBRARY=/tmp/lsec/libhopattn.so timeout 60 \
  $p/bin/hopattn_gpu_tests --gtest_brief=1 --gtest_filter='Sm90/ForwardVsReference.*bf16_d64_causal*' 2>&1 | tail -4
