#!/usr/bin/env bash
# Session 49's second machine (budget left ~480 s). On an H200: issue 5's backward grid at main
# (main47's library; main's backward kernels are SASS-identical to it), seqlens 2k-16k, where the
# issue's ratios are set, peers in the same process. On an H100: which library fails
# test_gpu_varlen_forward_and_backward_match_each_sequence[*-window] (suite/abs found two failures
# on s49-all): main47, fmb (softcap-fm alone) and all, on .gpu-all's tests.
# carry [.gpu-rs46, .gpu-all, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-fmb.so.xz]
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in
  *H200*)
    export PACK=.gpu-rs46
    xz -T8 -dkf .gpu-exp/ab/libhopattn-main47.so.xz
    export LIB=$PWD/.gpu-exp/ab/libhopattn-main47.so
    GRID_T=400 GRID_ARGS="--direction bwd --seqlens 2k,4k,8k,16k --out-dir $OUT --tag h200" \
      bash scripts/gpu-phases.sh grid 2>&1 | grep -E "^\||rc=" | cut -d'|' -f2-11 | head -30 ;;
  *)
    export PACK=.gpu-all
    for n in main47 fmb; do xz -T8 -dkf .gpu-exp/ab/libhopattn-$n.so.xz; done
    for n in ${LIBS:-main47 fmb all}; do
      lib=$PWD/.gpu-exp/ab/libhopattn-$n.so; [ $n = all ] && { xz -T8 -dkf .gpu-all/lib/libhopattn.so.xz; lib=$PWD/.gpu-all/lib/libhopattn.so; }
      LIB=$lib PY_T=120 PY_ARGS="tests/python/test_softcap.py" PY_K="varlen_forward_and_backward_match_each_sequence" \
        bash scripts/gpu-phases.sh py 2>&1 | tail -1 | sed "s/^/$n: /"
      grep -E "^E .*rel-L2" $OUT/py.log | head -3; mv $OUT/py.log $OUT/py-$n.log
    done ;;
esac
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
