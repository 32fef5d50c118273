#!/usr/bin/env bash
# Session 49, last ~60 s of device time: the fixed-max softcap kernels with O's normaliser on the
# tensor cores (branch softcap-fm-tcsum; library fmt2 = main's objects + the branch's four softcap
# units). First the pytest that failed on fm (one-key rows' dq), then the Softcap gtests.
# carry [.gpu-fm, .gpu-exp/ab/libhopattn-fmt2.so.xz]
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-fm LIB=$PWD/.gpu-exp/ab/libhopattn-fmt2.so
PY_T=40 PY_ARGS="tests/python/test_softcap.py" PY_K="varlen_forward_and_backward_match_each_sequence or negative" \
  bash scripts/gpu-phases.sh py 2>&1 | tail -2
GT_SHARDS=8 GT_T=30 GT_FILTER='*Softcap*' bash scripts/gpu-phases.sh gt 2>&1 | grep -E "rc=|gtest:|FAIL" | head -6
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
