#!/usr/bin/env bash
# Compiler report for every kernel in the built library: registers and stack bytes (cuobjdump
# -res-usage) and a SASS check: HGMMA count, and LDL/STL counts split at the producer's
# USETMAXREG.DEALLOC (those after it are in the TMA producer warp, not the consumers' main loop).
# Needs cuobjdump + nvdisasm: the CUDA toolkit's, or `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`.
set -euo pipefail
lib=${1:-build/libhopattn.so}
find_tool() {
  command -v "$1" 2>/dev/null && return
  python3 - "$1" <<'PY'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for p in pathlib.Path(root).rglob(sys.argv[1]):
        print(p)
        raise SystemExit
PY
}
cuobjdump=$(find_tool cuobjdump || true); nvdisasm=$(find_tool nvdisasm || true)
[ -n "$cuobjdump" ] && [ -n "$nvdisasm" ] || { echo "cuobjdump/nvdisasm not found" >&2; exit 1; }
export PATH=$(dirname "$nvdisasm"):$PATH
"$cuobjdump" -res-usage "$lib" > /tmp/hopattn-res.txt
"$cuobjdump" -sass "$lib" > /tmp/hopattn-sass.txt
python3 - <<'PY'
import re
res = {}
fn = None
for line in open("/tmp/hopattn-res.txt"):
    m = re.search(r"Function ([^\s:]+):", line)
    if m:
        fn = m.group(1)
        continue
    m = re.search(r"REG:(\d+) STACK:(\d+)", line)
    if m and fn:
        res[fn] = m.groups()
rows, name, after = {}, None, False
for line in open("/tmp/hopattn-sass.txt"):
    m = re.search(r"Function : (\S+)", line)
    if m:
        name, after = m.group(1), False
        rows[name] = [0, 0, 0]
        continue
    if name is None:
        continue
    if "USETMAXREG.DEALLOC" in line:
        after = True
    if "HGMMA" in line or "QGMMA" in line:
        rows[name][0] += 1
    if re.search(r"\b(LDL|STL)\b", line):
        rows[name][2 if after else 1] += 1
def short(n):
    m = re.search(r"FwdWsConfigILNS_5DTypeE(\d)ELi(\d+)ELb(\d)ELj(\d+)ELi(\d+)E(Lb1E)?", n)
    if m:
        d, h, c, f, bn, varlen = m.groups()
        return (f"ws {'bf16' if d == '0' else 'fp16'} d{h} {'causal' if c == '1' else 'full'} flags={f}"
                + (f" N={bn}" if bn != "0" else "") + (" varlen" if varlen else ""))
    m = re.search(r"Fp8FwdConfigILNS_5DTypeE(\d)ELi(\d+)ELb(\d)ELj(\d+)ELi(\d+)", n)
    if m:
        d, h, c, f, bn = m.groups()
        return f"ws fp8->{'bf16' if d == '0' else 'fp16'} d{h} {'causal' if c == '1' else 'full'} flags={f}" + (f" N={bn}" if bn != "0" else "")
    m = re.search(r"fwd_mma_kernelILNS_5DTypeE(\d)ELi(\d+)ELb(\d)", n)
    if m:
        d, h, c = m.groups()
        return f"mma {'bf16' if d == '0' else 'fp16'} d{h} {'causal' if c == '1' else 'full'}"
    return n[:50]
print(f"{'kernel':<40} {'regs':>5} {'stack':>6} {'HGMMA':>6} {'LDL/STL consumer':>17} {'LDL/STL producer':>17}")
for n, (hg, cons, prod) in sorted(rows.items(), key=lambda kv: short(kv[0])):
    reg, stack = res.get(n, ("?", "?"))
    print(f"{short(n):<40} {reg:>5} {stack:>6} {hg:>6} {cons:>17} {prod:>17}")
PY
