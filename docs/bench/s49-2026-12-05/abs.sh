#!/usr/bin/env bash
# Session 49: the speed half for s49-all (see suite.sh), then its pytest. Libraries in .gpu-exp/ab:
# main47 (main's kernels), fmb (softcap-fm alone), all (the combined candidate). A/Bs in alternating
# processes, 3 rounds: bf16 forward points where the edge turns should count (d64 causal 512-16k,
# short non-causal) with long controls; the softcap forward; FP8 d128; then bench/decode.py
# (contiguous and paged64, no peers), main47 / all, two rounds. Last: pytest on .gpu-all, 4 shards.
# carry [.gpu-all, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-fmb.so.xz,
#        .gpu-exp/ab/libhopattn-all.so.xz]; ~8-9 min.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-all
ab=$PWD/.gpu-exp/ab
O=${OUT:-/tmp/out}; mkdir -p $O
AB_ONLY='main47 all' AB_OP=attention AB_ROUNDS=3 AB_TAG=et \
  AB_POINTS=64:512:1,64:1024:1,64:2048:1,64:4096:1,64:16384:1,64:1024:0,64:4096:0,128:512:0,128:1024:1,128:4096:0,256:512:0,256:2048:1 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -14
AB_ONLY='main47 fmb all' AB_OP=attention_softcap AB_ROUNDS=3 AB_TAG=sc AB_POINTS=64:4096:0,64:1024:1,128:4096:1,128:16384:0 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -6
AB_ONLY='main47 all' AB_OP=forward_fp8 AB_ROUNDS=2 AB_TAG=fp8 AB_POINTS=128:4096:0,128:4096:1 \
  bash scripts/gpu-phases.sh ab 2>&1 | tail -4
withlib() {
  local d=/tmp/l-$(basename $1 .so)
  mkdir -p $d && ln -sf $1 $d/libhopattn.so
  LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$1 PYTHONPATH=$PWD/$PACK/python PYTHONUNBUFFERED=1 "${@:2}"
}
for r in 1 2; do
  for n in main47 all; do
    withlib $ab/libhopattn-$n.so timeout 90 python3 $PACK/bench/decode.py --no-peers --batches 1,8,32,64 \
      --cache-lens 1024,8192,32768 --json $O/dec-$n-r$r.json > $O/dec-$n-r$r.log 2>&1
    echo "decode.py $n round $r rc=$?"
  done
done
python3 bench/decode_ab.py "$O" main47 all  # the table: best of each library's rounds
PY_SHARDS=4 PY_T=200 bash scripts/gpu-phases.sh py 2>&1 | grep -E "shard|rc=" | head -5
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
