"""Summarise ncu's per-instruction stall sampling of one kernel (docs/gpu.md, "Profiling one kernel").

Input: the CSV of `ncu -i R.ncu-rep --page source --csv --print-source sass` (line 1 the kernel's
name, line 2 the header, then one row per SASS instruction). Prints the samples by opcode (the SASS
mnemonic before the first dot: MUFU, FMNMX, HGMMA, WARPGROUP, ...) with each one's two largest stall
reasons, then the instructions with the most samples. Stall reasons are ncu's `stall_*` columns;
"selected" means the warp issued.

    python3 bench/ncu_sass.py fp8-sass.csv --top 30
"""
import argparse
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_rows(lines):
    """(kernel name, [dict per instruction]) from the CSV's lines."""
    reader = csv.reader(lines)
    first = next(reader)
    kernel = first[1] if len(first) > 1 else first[0]
    header = next(reader)
    rows = [dict(zip(header, r)) for r in reader if len(r) == len(header)]
    return kernel, rows


def opcode(source):
    """The mnemonic of a SASS line, without predicate and modifiers: '@!P0 BRA 0x..' -> 'BRA'."""
    words = [w for w in source.split() if not w.startswith("@")]
    return re.split(r"[.\s]", words[0])[0] if words else ""


def stall_columns(row):
    return [k for k in row if k.startswith("stall_") and not k.endswith("(Not Issued)")]


def summarise(rows):
    """{opcode: (samples, executed, Counter of stall reasons)}, in decreasing samples."""
    by_op = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for r in rows:
        entry = by_op[opcode(r["Source"])]
        entry[0] += int(r[SAMPLES] or 0)
        entry[1] += int(r[EXECUTED] or 0)
        for k in stall_columns(r):
            entry[2][k[len("stall_"):]] += int(r[k] or 0)
    return dict(sorted(((k, tuple(v)) for k, v in by_op.items()), key=lambda kv: -kv[1][0]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25, help="instructions listed by samples")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be at least 1, got {args.top}")
    with open(args.csv, newline="") as f:
        kernel, rows = read_rows(f)
    total = sum(int(r[SAMPLES] or 0) for r in rows)
    if total == 0:
        print("no samples (was the report taken with --section SourceCounters?)")
        return 1
    print(f"{kernel}\n{total} samples over {len(rows)} instructions\n")
    print(f"{'opcode':12s} {'samples':>8s} {'share':>6s} {'executed':>12s}  top stalls")
    for op, (samples, executed, reasons) in summarise(rows).items():
        if samples == 0:
            continue
        top = ", ".join(f"{k} {v}" for k, v in reasons.most_common(2))
        print(f"{op:12s} {samples:8d} {100 * samples / total:5.1f}% {executed:12d}  {top}")
    print(f"\n{'line':>6s} {'samples':>8s}  top stalls  | instruction")
    ranked = sorted(range(len(rows)), key=lambda i: -int(rows[i][SAMPLES] or 0))[: args.top]
    for i in sorted(ranked):
        r = rows[i]
        top = ", ".join(f"{k[len('stall_'):]} {r[k]}" for k in sorted(stall_columns(r), key=lambda k: -int(r[k] or 0))[:2])
        print(f"{i:6d} {int(r[SAMPLES]):8d}  {top} | {r['Source'].strip()[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
