#!/usr/bin/env python3
"""One summary of one or more GoogleTest JSON reports (--gtest_output=json:FILE), e.g. the shards
of a sharded run (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX, scripts/gpu-phases.sh GT_SHARDS).

Prints the counts (passed, failed, skipped), each failed test with the first line of its first
failure, and where the time went: the slowest suites and tests. The device's minutes are the
project's scarcest resource and the GPU suite is their largest fixed cost, so its timing comes back
with every run. Exit status: 0 if every report parsed and nothing failed, 1 otherwise.

    python3 scripts/gtest_report.py OUT/gt-*.json [--top 12]
"""
import argparse
import json
import sys


def seconds(text):
    """GoogleTest writes times as strings like '0.125s'."""
    return float(str(text).rstrip("s") or 0)


def load(paths):
    """Every test case of every report as (suite, name, result, seconds, first failure line)."""
    cases, bad = [], []
    for path in paths:
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            bad.append(f"{path}: {e}")
            continue
        for suite in report.get("testsuites", []):
            for case in suite.get("testsuite", []):
                failures = case.get("failures", [])
                first = failures[0].get("failure", "").strip().splitlines()[:1] if failures else []
                result = "FAILED" if failures else ("SKIPPED" if case.get("result") == "SKIPPED" else "PASSED")
                if case.get("status") == "NOTRUN":
                    result = "DISABLED"
                cases.append((suite["name"], case["name"], result, seconds(case.get("time", "0s")), first[0] if first else ""))
    return cases, bad


def summarise(cases, bad, top):
    lines = []
    counts = {}
    for _, _, result, _, _ in cases:
        counts[result] = counts.get(result, 0) + 1
    total = sum(t for _, _, _, t, _ in cases)
    lines.append(
        f"gtest: {counts.get('PASSED', 0)} passed, {counts.get('FAILED', 0)} failed, "
        f"{counts.get('SKIPPED', 0)} skipped, "
        + (f"{counts['DISABLED']} disabled, " if counts.get("DISABLED") else "")
        + f"{len(cases)} in all; {total:.1f} s of test time"
    )
    for problem in bad:
        lines.append(f"UNREADABLE {problem}")
    for suite, name, result, _, first in cases:
        if result == "FAILED":
            lines.append(f"FAILED {suite}.{name}: {first}")
    if top > 0 and total > 0:
        per_suite = {}
        for suite, _, _, t, _ in cases:
            n, s = per_suite.get(suite, (0, 0.0))
            per_suite[suite] = (n + 1, s + t)
        lines.append(f"slowest suites (of {len(per_suite)}):")
        for suite, (n, s) in sorted(per_suite.items(), key=lambda kv: -kv[1][1])[:top]:
            lines.append(f"  {s:8.1f} s {100 * s / total:5.1f}%  {n:5d} tests  {suite}")
        lines.append("slowest tests:")
        for suite, name, _, t, _ in sorted(cases, key=lambda c: -c[3])[:top]:
            lines.append(f"  {t:8.2f} s  {suite}.{name}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--top", type=int, default=12, help="suites and tests listed by time (0: none)")
    args = ap.parse_args(argv)
    cases, bad = load(args.reports)
    print("\n".join(summarise(cases, bad, args.top)))
    return 1 if bad or any(c[2] == "FAILED" for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
