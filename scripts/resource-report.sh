#!/usr/bin/env bash
# Compiler report for every kernel in the built library: registers and stack bytes (cuobjdump
# -res-usage) and a SASS check: HGMMA count, and LDL/STL counts split at the producer's
# USETMAXREG.DEALLOC (those after it are in the TMA producer warp, not the consumers' main loop),
# and those inside the innermost loop that issues GMMAs (the key-block loop: a spill there is paid
# per key block, elsewhere per tile or per CTA). Takes a library or an object file.
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
# Scratch files of this run only: two reports at once (base and change) must not read each other's.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cuobjdump" -res-usage "$lib" > "$tmp/res.txt"
"$cuobjdump" -sass "$lib" > "$tmp/sass.txt"
REPORT_TMP=$tmp python3 - <<'PY'
import os, re
res = {}
fn = None
for line in open(os.path.join(os.environ["REPORT_TMP"], "res.txt")):
    m = re.search(r"Function ([^\s:]+):", line)
    if m:
        fn = m.group(1)
        continue
    m = re.search(r"REG:(\d+) STACK:(\d+)", line)
    if m and fn:
        res[fn] = m.groups()
def key_loop_counts(lines):
    """(instructions, LDL/STL, R2UR, BSSY) in the innermost loop that issues GMMAs (the key-block
    loop): the smallest span from a backward branch's target to the branch that holds an
    HGMMA/QGMMA and an EX2; None when there is none. R2UR and BSSY show a loop that ptxas took off the uniform
    datapath or treats as divergent (a threadIdx-based warp test in the tile loop did both:
    perf-notes, "O staged in V's buffer"), which costs instructions without any spill."""
    at = {}
    for i, l in enumerate(lines):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/", l)
        if m:
            at[int(m.group(1), 16)] = i
    best = None
    for i, l in enumerate(lines):
        m = re.search(r"/\*([0-9a-f]+)\*/\s+[^;]*\bBRA\b[^;]*?(0x[0-9a-f]+)", l)
        if not m or int(m.group(2), 16) >= int(m.group(1), 16) or int(m.group(2), 16) not in at:
            continue
        t = at[int(m.group(2), 16)]
        # The key loop holds the softmax too: a span with GMMAs but no MUFU.EX2 is some other loop
        # (in the d64 causal local softcap kernel, one through the epilogue and the next tile's
        # first S GEMM, which the key loop's own back edge does not enclose).
        body = lines[t:i]
        if (any("GMMA" in x for x in body) and any("MUFU.EX2" in x for x in body)
                and (best is None or i - t < best[1] - best[0])):
            best = (t, i)
    if best is None:
        return None
    span = [x for x in lines[best[0]:best[1] + 1] if re.match(r"\s*/\*[0-9a-f]{4,}\*/", x)]
    count = lambda pattern: sum(1 for x in span if re.search(pattern, x))
    return len(span), count(r"\b(LDL|STL)\b"), count(r"\bR2UR\b"), count(r"\bBSSY\b")

rows, name, after, body = {}, None, False, []
def close():
    if name is not None:
        rows[name][3] = key_loop_counts(body)
for line in open(os.path.join(os.environ["REPORT_TMP"], "sass.txt")):
    m = re.search(r"Function : (\S+)", line)
    if m:
        close()
        name, after, body = m.group(1), False, []
        rows[name] = [0, 0, 0, None]
        continue
    if name is None:
        continue
    body.append(line)
    if "USETMAXREG.DEALLOC" in line:
        after = True
    if "HGMMA" in line or "QGMMA" in line:
        rows[name][0] += 1
    if re.search(r"\b(LDL|STL)\b", line):
        rows[name][2 if after else 1] += 1
close()
def short(n):
    m = re.search(r"FwdWsConfigILNS_5DTypeE(\d)ELi(\d+)ELb(\d)ELj(\d+)ELi(\d+)E(?:Lb(\d)E)?(?:Lb(\d)E)?(?:Lb(\d)E)?", n)
    if m:
        d, h, c, f, bn, varlen, local, softcap = m.groups()
        return (f"ws {'bf16' if d == '0' else 'fp16'} d{h} {'causal' if c == '1' else 'full'} flags={f}"
                + (f" N={bn}" if bn != "0" else "") + (" varlen" if varlen == "1" else "")
                + (" local" if local == "1" else "") + (" softcap" if softcap == "1" else ""))
    m = re.search(r"Fp8FwdConfigILNS_5DTypeE(\d)ELi(\d+)ELb(\d)ELj(\d+)ELi(\d+)E(?:Li(\d+)E)?(?:Lb(\d)E)?(?:Lb(\d)E)?", n)
    if m:
        d, h, c, f, bn, bm, varlen, pv16 = m.groups()
        return (f"ws fp8->{'bf16' if d == '0' else 'fp16'} d{h} {'causal' if c == '1' else 'full'} flags={f}"
                + (f" N={bn}" if bn != "0" else "") + (f" M={bm}" if bm not in (None, "0") else "")
                + (" varlen" if varlen == "1" else "") + (" pv16" if pv16 == "1" else ""))
    m = re.search(r"fwd_mma_kernelILNS_5DTypeE(\d)ELi(\d+)ELb(\d)", n)
    if m:
        d, h, c = m.groups()
        return f"mma {'bf16' if d == '0' else 'fp16'} d{h} {'causal' if c == '1' else 'full'}"
    return n[:50]
print(f"{'kernel':<40} {'regs':>5} {'stack':>6} {'HGMMA':>6} {'LDL/STL consumer':>17} {'LDL/STL producer':>17} "
      f"{'in key loop':>12} {'loop instr':>10} {'R2UR':>5} {'BSSY':>5}")
for n, (hg, cons, prod, loop) in sorted(rows.items(), key=lambda kv: short(kv[0])):
    reg, stack = res.get(n, ("?", "?"))
    size, spills, r2ur, bssy = loop if loop else ("-",) * 4
    print(f"{short(n):<40} {reg:>5} {stack:>6} {hg:>6} {cons:>17} {prod:>17} {spills:>12} {size:>10} {r2ur:>5} {bssy:>5}")
PY
