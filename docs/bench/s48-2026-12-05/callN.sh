#!/usr/bin/env bash
# Session 48, call N: the narrow decode kernel (branch decode-narrow, src/sm90/decode/
# kernel_narrow.cuh: keys in the mma's M, up to 8 query rows per KV head in its N) against main.
# Not yet run on a GPU. Run from the repository root of a checkout that holds
#   .gpu-rs46/                           main's tests, bench and python (its library's decode
#                                        kernels are main's);
#   .gpu-exp/ab/libhopattn-main47.so.xz  main 761707b (decode kernels as main's HEAD);
#   .gpu-exp/ab/libhopattn-dnarrow.so.xz main's objects with decode-narrow's two decode units.
# carry [.gpu-rs46, .gpu-exp] (or the two .xz files alone: .gpu-exp holds ~37 MB of libraries).
# Phases (~5 min): the *KvCache*:*Decode* gtests on dnarrow; memcheck and racecheck on three small
# cases that take the narrow kernel; the kernels one GQA 32/8 decode call launches; bench/decode.py
# (contiguous and paged64, no peers) for main47 and dnarrow in alternating processes, two rounds;
# a comparison table last. Logs: $OUT/logs.tgz (unpack with tar xzf).
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader
export PACK=.gpu-rs46
ab=$PWD/.gpu-exp/ab
O=${OUT:-/tmp/out}
mkdir -p $O
for n in main47 dnarrow; do [ -f $ab/libhopattn-$n.so ] || xz -T8 -dk $ab/libhopattn-$n.so.xz; done
NARROW=$ab/libhopattn-dnarrow.so
# One folder per library, so that a process sees one libhopattn.so (as gpu-phases.sh's withlib).
withlib() {
  local d=/tmp/l-$(basename $1 .so)
  mkdir -p $d && ln -sf $1 $d/libhopattn.so
  LD_LIBRARY_PATH=$d HOPATTN_LIBRARY=$1 PYTHONPATH=$PWD/$PACK/python PYTHONUNBUFFERED=1 "${@:2}"
}

# 1. Correctness: every decode gtest (grid, windows, softcap, splits, paged, bitwise repeats).
LIB=$NARROW GT_SHARDS=4 GT_T=150 GT_FILTER='*KvCache*:*Decode*' bash scripts/gpu-phases.sh gt 2>&1 \
  | grep -E "rc=|gtest:|passed|FAIL" | head -12

# 2. Sanitizers on narrow-kernel cases: GQA group 4 at seqlen_q 1 (4 rows; 3 heuristic splits, the
# combine); paged64, group 8, causal with an append (8 rows, one split); a two-sided window
# (4 rows; heuristic, 5 and 1 splits).
LIB=$NARROW SAN_T=150 SAN_FILTER='Sm90/KvCacheVsReference.*/bf16_d128_contig_g4_q1_full:Sm90/KvCacheVsReference.*/bf16_d128_paged64_g8_q1_causal_append:Sm90/KvCacheWindowVsReference.*/both40_7_contig_q1' \
  bash scripts/gpu-phases.sh san 2>&1 | grep -E "SUMMARY|PASSED|FAILED|rc=|Invalid|Race|hazard" | head -12

# 3. Which kernels a 32/8-head decode step launches (expect split_kernel_narrow, then the combine).
withlib $NARROW timeout 60 python3 - <<'PY' 2>&1 | tail -3
import torch, hopattn
from torch.profiler import profile, ProfilerActivity
q = torch.randn(4, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(4, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
s = torch.full((4,), 4096, dtype=torch.int32, device="cuda")
hopattn.attention_with_kvcache(q, k, v, s)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    hopattn.attention_with_kvcache(q, k, v, s)
    torch.cuda.synchronize()
print("kernels:", sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"}))
PY

# 4. Timing: alternating processes, two rounds each (bench/decode.py's timer: memset flush + sleep +
# events, median of 100).
for r in 1 2; do
  for n in main47 dnarrow; do
    withlib $ab/libhopattn-$n.so timeout 100 python3 $PACK/bench/decode.py --no-peers --batches 1,8,32,64 \
      --cache-lens 1024,8192,32768,131072 --json $O/dec-$n-r$r.json > $O/dec-$n-r$r.log 2>&1
    echo "decode.py $n round $r rc=$? $(grep -c '^| [0-9]' $O/dec-$n-r$r.log) rows"
  done
done
python3 bench/decode_ab.py "$O" main47 dnarrow  # the table: best of each library's rounds
bash scripts/gpu-phases.sh bundle 2>&1 | grep rc=
