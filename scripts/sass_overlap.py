#!/usr/bin/env python3
"""Does each forward kernel's softmax overlap its warpgroup's own P V GEMM?

For every fwd_ws_kernel in a CUDA object or library, counts the MUFU.EX2 instructions between the
key loop's `WARPGROUP.DEPBAR.LE gsb0, 0x1` (S done) and the next `WARPGROUP.DEPBAR.LE gsb0, 0x0`
(P V done). The source puts the softmax between the two waits. A count near 0 means ptxas hoisted
the P V wait above the softmax, so the overlap is lost (docs/perf-notes.md, "The key loop per
instruction, and P's registers held until the wait"). Needs cuobjdump (CUDA toolkit, or the
nvidia-cuda-cuobjdump wheel).

    python3 scripts/sass_overlap.py build/CMakeFiles/hopattn.dir/instantiations/fwd_bf16_hdim256.cu.o
"""
import argparse
import re
import shutil
import subprocess
import sys


def overlap_counts(sass):
    """{kernel name: [EX2 count per wait-1 → wait-0 span]} for the fwd_ws_kernels in cuobjdump -sass output."""
    counts = {}
    for function in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = function.split("\n", 1)
        if "fwd_ws_kernel" not in name:
            continue
        spans, inside, ex2 = [], False, 0
        for line in body.split("\n"):
            if "DEPBAR.LE gsb0, 0x1" in line and not inside:
                inside, ex2 = True, 0
            elif "DEPBAR.LE gsb0, 0x0" in line and inside:
                spans.append(ex2)
                inside = False
            elif inside and "MUFU.EX2" in line:
                ex2 += 1
        counts[name.strip()] = spans
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("objects", nargs="+")
    parser.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    args = parser.parse_args(argv)
    if shutil.which(args.cuobjdump) is None:
        parser.error(f"--cuobjdump: {args.cuobjdump!r} is not an executable (install the CUDA toolkit or nvidia-cuda-cuobjdump)")
    for path in args.objects:
        run = subprocess.run([args.cuobjdump, "-sass", path], capture_output=True, text=True)
        if run.returncode != 0:
            parser.error(f"cuobjdump -sass {path}: {run.stderr.strip() or 'failed'}")
        sass = run.stdout
        for name, spans in overlap_counts(sass).items():
            config = re.sub(r"^.*fwd_ws_kernel", "", name)
            print(f"{spans}\t{config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
