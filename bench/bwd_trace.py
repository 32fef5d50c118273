"""Where a backward call's time goes between waves: per-CTA start/end of the main kernel and the dQ
postprocess (HOPATTN_BWD_TRACE=1, src/sm90/bwd/trace.hpp), on the paper grid's shapes.

    HOPATTN_BWD_TRACE=1 PYTHONPATH=.gpu/python python3 .gpu/bench/bwd_trace.py --points 256:4096:0,256:1024:0

Per point, one traced call after warm-up, then one line per kernel and the main kernel's waves:
- main: CTAs, SMs used, span (first start to last end), median CTA time, when the last CTA started
  (every later moment is the last wave), and the SM-time idle from then to the main kernel's end;
- waves: CTAs per SM, the gap before an SM's next CTA, the median CTA time of the first, middle and
  last wave (docs/perf-notes.md, backward v17: lockstep waves);
- post: CTAs, when the first started and how many started before the main kernel's end (the
  overlap, d256: dq_overlap), and how long the postprocess ran past it.
Times in microseconds from the main kernel's first CTA start (%globaltimer: ns, but its update
granularity on some drivers is 1 us). The trace adds an atomic per CTA; use ab.py for timings.
"""
import argparse
import collections
import ctypes
import os
import statistics
import sys

import common  # bench/common.py, beside this script


class Record(ctypes.Structure):  # sm90::bwd::BwdTraceRecord
    _fields_ = [("kernel", ctypes.c_uint32), ("block", ctypes.c_uint32), ("smid", ctypes.c_uint32),
                ("detail", ctypes.c_uint32), ("start", ctypes.c_uint64), ("end", ctypes.c_uint64)]


CAPACITY = 1 << 17  # kBwdTraceCapacity


def read_trace(lib):
    """The records since the last read (the buffer is cleared); SystemExit when not tracing."""
    buf = (Record * CAPACITY)()
    n = lib.hopattn_debug_bwd_trace(buf, CAPACITY)
    if n < 0:
        sys.exit("not tracing: run with HOPATTN_BWD_TRACE=1 on a library that has hopattn_debug_bwd_trace")
    if n > CAPACITY:
        print(f"warning: {n} CTAs recorded, {CAPACITY} kept", file=sys.stderr)
    return list(buf[: min(n, CAPACITY)])


def traced_library(why):
    """The hopattn library with hopattn_debug_bwd_trace typed; SystemExit unless HOPATTN_BWD_TRACE=1."""
    if os.environ.get("HOPATTN_BWD_TRACE") != "1":
        sys.exit(f"set HOPATTN_BWD_TRACE=1 ({why})")
    from hopattn import _lib

    lib = _lib.load()
    lib.hopattn_debug_bwd_trace.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.hopattn_debug_bwd_trace.restype = ctypes.c_int
    return lib


def idle_after(records, t_from, t_to, sms):
    """SM-microseconds with no main-kernel CTA between t_from and t_to (ns), over `sms` SMs."""
    busy = 0
    for r in records:
        lo, hi = max(r.start, t_from), min(r.end, t_to)
        busy += max(0, hi - lo)
    return (sms * (t_to - t_from) - busy) / 1e3


def records_csv(records):
    """The records as CSV text, a header line first (times in ns, as recorded)."""
    lines = ["kernel,block,smid,start_ns,end_ns"]
    lines += [f"{r.kernel},{r.block},{r.smid},{r.start},{r.end}" for r in records]
    return "\n".join(lines) + "\n"


def waves(main):
    """The main kernel's waves, from its records: CTAs per SM (count -> SMs), the gap between one CTA's
    end and the next one's start on the same SM (median, max; us; None with one CTA per SM), and the
    median CTA time of each SM's i-th CTA (us, by i). Lockstep waves show as near-zero gaps and equal
    medians from the second wave on (the first pays for a cold L2)."""
    per_sm = collections.defaultdict(list)
    for r in main:
        per_sm[r.smid].append(r)
    gaps, by_index = [], collections.defaultdict(list)
    for ctas in per_sm.values():
        ctas.sort(key=lambda r: r.start)
        for i, r in enumerate(ctas):
            by_index[i].append((r.end - r.start) / 1e3)
            if i:
                gaps.append((r.start - ctas[i - 1].end) / 1e3)
    counts = collections.Counter(len(c) for c in per_sm.values())
    gap = (statistics.median(gaps), max(gaps)) if gaps else None
    return dict(sorted(counts.items(), reverse=True)), gap, [statistics.median(by_index[i]) for i in sorted(by_index)]


def read_csv(text):
    """Records from records_csv's text (a dumped trace), for summarising it again without a GPU."""
    rows = text.strip().splitlines()
    if not rows or rows[0] != "kernel,block,smid,start_ns,end_ns":
        raise ValueError("not a bwd_trace.py --dump CSV (header kernel,block,smid,start_ns,end_ns)")
    out = []
    for row in rows[1:]:
        k, b, sm, start, end = (int(x) for x in row.split(","))
        out.append(Record(k, b, sm, 0, start, end))
    return out


def summarize(records, sms):
    main = [r for r in records if r.kernel == 0]
    post = [r for r in records if r.kernel == 1]
    if not main:
        return ["no main-kernel records"]
    t0 = min(r.start for r in main)
    us = lambda t: (t - t0) / 1e3  # noqa: E731
    main_end = max(r.end for r in main)
    last_start = max(r.start for r in main)
    lines = [
        f"main  {len(main)} CTAs on {len({r.smid for r in main})} SMs, span {us(main_end):.1f} us, "
        f"median CTA {statistics.median((r.end - r.start) / 1e3 for r in main):.1f} us, "
        f"last CTA started at {us(last_start):.1f} us; idle after it {idle_after(main, last_start, main_end, sms):.0f} "
        f"SM-us of {sms * (main_end - last_start) / 1e3:.0f}"
    ]
    counts, gap, medians = waves(main)
    line = "waves " + ", ".join(f"{n} CTAs on {k} SMs" for n, k in counts.items())
    if gap:
        line += f"; next CTA on an SM after {gap[0]:.2f} us (max {gap[1]:.2f})"
    line += "; median CTA by wave " + (f"first {medians[0]:.1f}, middle {medians[len(medians) // 2]:.1f}, "
                                       f"last {medians[-1]:.1f} us" if len(medians) > 1 else f"{medians[0]:.1f} us")
    lines.append(line)
    if post:
        first = min(r.start for r in post)
        early = sum(r.start < main_end for r in post)
        done_early = sum(r.end <= main_end for r in post)
        lines.append(
            f"post  {len(post)} CTAs, first start {us(first):.1f} us, {early} started and {done_early} ended "
            f"before the main kernel's end, last end {us(max(r.end for r in post)) - us(main_end):+.1f} us past it"
        )
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", default="256:4096:0", help="head_dim:seqlen:causal,... (the grid's shapes)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--dump", help="also write each point's raw records to DUMP/bwd-trace-d{d}-s{s}-c{c}.csv")
    parser.add_argument("--csv", nargs="+", help="summarise dumped traces instead (no GPU): the CSV files")
    parser.add_argument("--sms", type=int, default=132, help="with --csv: the SMs of the traced device")
    args = parser.parse_args(argv)
    if args.csv:
        for path in args.csv:
            print(f"== {path} ({args.sms} SMs)")
            with open(path) as f:
                for line in summarize(read_csv(f.read()), args.sms):
                    print("  " + line)
        return
    lib = traced_library("read once, when the library first runs a backward")
    import torch

    import hopattn

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for item in args.points.split(","):
        d, s, c = (int(x) for x in item.split(":"))
        _, _, _, q, k, v = common.probe_inputs(torch, "bwd", d, s, bool(c), seed=0)
        out = hopattn.attention(q, k, v, causal=bool(c))
        dout = torch.randn_like(out)
        for _ in range(args.warmup):
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        read_trace(lib)  # drop the warm-up's records
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        records = read_trace(lib)
        print(f"== d{d} s{s} {'causal' if c else 'non-causal'} ({sms} SMs)")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, f"bwd-trace-d{d}-s{s}-c{c}.csv"), "w") as f:
                f.write(records_csv(records))
        for line in summarize(records, sms):
            print("  " + line)


if __name__ == "__main__":
    main()
