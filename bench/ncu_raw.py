#!/usr/bin/env python3
"""Print the headline counters of an ncu report's raw page (`ncu -i R --page raw --csv > F`): per
profiled kernel its name, duration, SM throughput and the tensor pipes' active share, so that two
implementations' kernels at one shape compare in a few lines (scripts/gpu-phases.sh, phase ncu)."""
import argparse
import csv

# Counters printed when the report has them: exact names, then every tensor-pipe utilisation
# (Hopper's names vary by ncu version and pipe: pipe_tensor_op_hmma, _gmma, ...).
EXACT = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed")


def wanted(name):
    return name in EXACT or ("pipe_tensor" in name and name.endswith("pct_of_peak_sustained_active"))


def summarize(rows):
    """Lines for the raw page's rows (header, units, then one row per kernel)."""
    if len(rows) < 3:
        return ["no kernel in the report"]
    head, units = rows[0], rows[1]
    lines = []
    for vals in rows[2:]:
        name = vals[head.index("Kernel Name")] if "Kernel Name" in head else "?"
        lines.append(f"kernel {name[:90]}")
        lines += [f"   {h} = {vals[i]} {units[i]}".rstrip() for i, h in enumerate(head) if wanted(h) and i < len(vals)]
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", help="the raw page as CSV")
    args = p.parse_args(argv)
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("==")]  # ncu's own notes
    print("\n".join(summarize(rows)))


if __name__ == "__main__":
    main()
