"""Where a forward call's time goes, tile by tile: per-tile timestamps of the persistent forward
kernel (a library built with -DHOPATTN_FWD_TRACE=1, src/sm90/ws/trace.cuh; the records go to the
backward trace's buffer, which HOPATTN_BWD_TRACE=1 allocates), on the paper grid's shapes.

    HOPATTN_BWD_TRACE=1 HOPATTN_LIBRARY=.gpu-exp/ab/libhopattn-trace.so PYTHONPATH=.gpu/python \\
        python3 .gpu/bench/fwd_trace.py --points 64:4096:1,64:4096:0

Per point, one traced call after warm-up, then:
- tiles: how many, on how many SMs; the span (first tile start to last tile end);
- fit: a tile's time against its key blocks by least squares, time = slope * blocks + intercept
  (us), with R^2. The slope is the cost of one key block in the steady walk; the intercept is what a
  tile costs besides its blocks (the first S GEMM with nothing to overlap, the last P V, the
  epilogue; with causal tiles also the diagonal blocks' masking, as every causal tile has a few);
- gaps: between one tile's end and the same SM's next tile start (the scheduler, the next Q wait);
- start (trace libraries built from 82e43a3 on): a tile's start split into its setup after the
  scheduler answers, the wait for Q and the first K, and the first S GEMM with its turn;
- end (trace libraries from session 58 on): the walk from the first S's completion to the last
  softmax's end (fitted against the key blocks), then the last P V, the finalize and the O store;
- balance: the SMs' busy share of the span, and the spread of their last tile ends (a static
  order whose CTAs finish apart leaves the early ones idle);
- rounds: how many tiles each SM ran (the uneven last round's idle share) and each SM's first tile
  against the rest (the pipeline's fill);
- --csv over dumps of several non-causal lengths: a tile's cost (plus the gap) fitted across them.
Times in microseconds (%globaltimer: ns; its update granularity on some drivers is 1 us, which the
fit over thousands of tiles averages out). The trace adds an atomic per tile; use ab.py for timings.
"""
import argparse
import collections
import os
import statistics

import bwd_trace  # bench/bwd_trace.py: the record, the buffer read

FWD_KERNEL = 2  # kFwdTraceKernel: records of forward tiles; `detail` holds the tile's key blocks
# kFwdTraceStartKernel: a tile's start, from the scheduler's answer (start) to its first S GEMM's
# completion (end; 0 where the kernel does not stamp it), with the setup before mma_tile in `detail`
# and the wait for Q and the first K after that in `block` (ns).
FWD_START_KERNEL = 3
# kFwdTraceEndKernel: a tile's end, from the walk's end (start) to the O store's issue (end), with the
# last P V in `block` and the finalize in `detail` (ns); start 0 where the kernel does not stamp it.
FWD_END_KERNEL = 4
# kFwdTraceWalkKernel: from the first S's completion (start) to the walk's end (end; 0 where not
# stamped), with the tile's key blocks in `detail` and the trace's own slot atomic in `block` (ns;
# 0 in libraries before session 59, whose end records' store included that atomic).
FWD_WALK_KERNEL = 5
CSV_HEADER = "smid,key_blocks,start_ns,end_ns"


def tiles_of(records):
    """(smid, key_blocks, start_ns, end_ns) of the forward tiles among trace records."""
    return [(r.smid, r.detail, r.start, r.end) for r in records if r.kernel == FWD_KERNEL]


def starts_of(records):
    """(setup_ns, load_wait_ns, to_first_s_ns) of each forward tile's start record that has its
    first-S stamp: the tile's bounds, mask and softmax setup; Q and its first K arriving; the first
    S GEMM (its ping-pong turn included)."""
    return [(r.detail, r.block, r.end - r.start - r.detail - r.block)
            for r in records if r.kernel == FWD_START_KERNEL and r.end > 0]


def ends_of(records):
    """(last_pv_ns, finalize_ns, store_ns) of each forward tile's end record that has its stamps: the
    last P V (its turn wait included), the finalize (O / l, lse, the O-in-V sync), the epilogue's
    store up to its issue."""
    return [(r.block, r.detail, r.end - r.start - r.block - r.detail)
            for r in records if r.kernel == FWD_END_KERNEL and r.start > 0]


def walks_of(records):
    """(smid, key_blocks, start_ns, end_ns) of each stamped walk (first S done to the walk's end), in
    tiles_of's form so that fit() and the medians apply."""
    return [(r.smid, r.detail, r.start, r.end) for r in records if r.kernel == FWD_WALK_KERNEL and r.end > 0]


def atomics_of(records):
    """(atomic_ns,) of each walk record that times the trace's own slot atomic: what tracing adds to a
    tile's end, outside the store."""
    return [(r.block,) for r in records if r.kernel == FWD_WALK_KERNEL and r.block > 0]


def quantiles_us(rows, i):
    """Median and 90th percentile of field i of rows, ns to us."""
    xs = sorted(t[i] / 1e3 for t in rows)
    return xs[len(xs) // 2], xs[min(len(xs) - 1, (9 * len(xs)) // 10)]


def end_line(ends, walks, atomics=()):
    """The walk (its fit against key blocks, or its mean when every tile has one count), the end
    records' medians (90th percentiles) in us and the trace's own atomic after them, or None without
    walks and ends."""
    parts = []
    if walks:
        slope, intercept, r2 = fit(walks)
        if slope is None:
            parts.append(f"walk (first S done to the last softmax done) mean {intercept:.2f} us over {walks[0][1]} blocks")
        else:
            parts.append(f"walk = {slope:.3f} us x blocks + {intercept:.2f} us (R^2 {r2:.3f})")
    if ends:
        (p50, p90), (f50, f90), (s50, s90) = (quantiles_us(ends, i) for i in range(3))
        parts.append(f"then the last P V {p50:.2f} ({p90:.2f}) us, the finalize {f50:.2f} ({f90:.2f}) us, "
                     f"the O store's issue {s50:.2f} ({s90:.2f}) us")
        if atomics:
            a50, a90 = quantiles_us(atomics, 0)
            parts[-1] += f", then the trace's atomic {a50:.2f} ({a90:.2f}) us"
    return "end   " + "; ".join(parts) if parts else None


def start_line(starts):
    """The start records' medians (and 90th percentiles) in us, or None without any."""
    if not starts:
        return None
    (s50, s90), (l50, l90), (f50, f90) = (quantiles_us(starts, i) for i in range(3))
    return (f"start median (p90): setup {s50:.2f} ({s90:.2f}) us, then Q and first K {l50:.2f} ({l90:.2f}) us, "
            f"then the first S {f50:.2f} ({f90:.2f}) us")


def tiles_csv(tiles):
    return "\n".join([CSV_HEADER] + [",".join(str(x) for x in t) for t in tiles]) + "\n"


def read_csv(text):
    rows = text.strip().splitlines()
    if not rows or rows[0] != CSV_HEADER:
        raise ValueError(f"not a fwd_trace.py --dump CSV (header {CSV_HEADER})")
    return [tuple(int(x) for x in row.split(",")) for row in rows[1:]]


def fit(tiles):
    """Least squares time_us = slope * key_blocks + intercept over the tiles: (slope, intercept, r2).
    With a single key-block count the slope is undefined: (None, mean time, None)."""
    xs = [t[1] for t in tiles]
    ys = [(t[3] - t[2]) / 1e3 for t in tiles]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None, my, None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - slope * x - intercept) ** 2 for x, y in zip(xs, ys))
    return slope, intercept, (1 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def tiles_by_sm(tiles):
    """Each SM's tiles in start order (one list per SM)."""
    per_sm = collections.defaultdict(list)
    for t in tiles:
        per_sm[t[0]].append(t)
    return [sorted(ts, key=lambda t: t[2]) for ts in per_sm.values()]


def span_us(tiles):
    """First tile start to last tile end, in us."""
    return (max(t[3] for t in tiles) - min(t[2] for t in tiles)) / 1e3


def balance(tiles):
    """Per SM: its tiles in start order. Returns (span_us, busy share of sms_used * span, median and
    max gap between an SM's consecutive tiles in us (None with one tile per SM), spread of the SMs'
    last tile ends in us, SMs used)."""
    per_sm = tiles_by_sm(tiles)
    span = span_us(tiles)
    busy = sum(t[3] - t[2] for t in tiles) / 1e3
    gaps, ends = [], []
    for ts in per_sm:
        gaps += [(b[2] - a[3]) / 1e3 for a, b in zip(ts, ts[1:])]
        ends.append(ts[-1][3])
    gap = (statistics.median(gaps), max(gaps)) if gaps else None
    share = busy / (len(per_sm) * span) if span > 0 else 1.0
    return span, share, gap, (max(ends) - min(ends)) / 1e3, len(per_sm)


def rounds(tiles):
    """Per SM: how many tiles it ran, and what its first tile cost against the others. Returns
    (Counter of tiles per SM, the idle share of the SMs' time that the uneven last round leaves, each
    SM's first tile median in us, the other tiles' median in us or None with one tile per SM). The
    idle share counts, for each SM with fewer tiles than the busiest, the missing tiles at the median
    tile time, over sms * span: the wave quantisation of a static round-robin order."""
    per_sm = tiles_by_sm(tiles)
    counts = collections.Counter(len(ts) for ts in per_sm)
    most = max(counts)
    span = span_us(tiles)
    median = statistics.median((t[3] - t[2]) / 1e3 for t in tiles)
    missing = sum((most - n) * k for n, k in counts.items())
    idle = missing * median / (len(per_sm) * span) if span > 0 else 0.0
    firsts, rest = [], []
    for ts in per_sm:
        firsts.append((ts[0][3] - ts[0][2]) / 1e3)
        rest += [(t[3] - t[2]) / 1e3 for t in ts[1:]]
    return counts, idle, statistics.median(firsts), statistics.median(rest) if rest else None


def rounds_line(tiles):
    counts, idle, first, rest = rounds(tiles)
    mix = ", ".join(f"{k} x {n}" for n, k in sorted(counts.items(), reverse=True))
    line = f"rounds SMs x tiles: {mix}; the uneven last round idles {100 * idle:.1f}% of the SM time"
    if rest is not None:
        line += f"; an SM's first tile {first:.2f} us against {rest:.2f} us (median)"
    return line


def cross_fit(points):
    """Points whose tiles all have one key-block count each (non-causal, one length per point): a
    tile's cost, its median time plus the median gap before the SM's next tile, against its key blocks,
    fitted across the points. Returns fit()'s (slope, intercept, r2): the intercept is what a tile
    costs besides its blocks, from points measured in separate calls (the card's clock may differ)."""
    rows = []
    for tiles in points:
        gap = balance(tiles)[2]
        per_tile = statistics.median((t[3] - t[2]) for t in tiles) + (gap[0] * 1e3 if gap else 0.0)
        rows.append((0, tiles[0][1], 0, per_tile))
    return fit(rows)


def summarize(tiles, starts=None, ends=None, walks=None, atomics=None):
    if not tiles:
        return ["no forward-tile records (a library built with -DHOPATTN_FWD_TRACE=1, and HOPATTN_BWD_TRACE=1?)"]
    span, share, gap, end_spread, sms = balance(tiles)
    slope, intercept, r2 = fit(tiles)
    blocks = [t[1] for t in tiles]
    lines = [f"tiles {len(tiles)} on {sms} SMs, key blocks {min(blocks)}-{max(blocks)} (mean {statistics.fmean(blocks):.1f}), "
             f"span {span:.1f} us"]
    if slope is None:
        lines.append(f"fit   every tile {blocks[0]} blocks: mean tile {intercept:.2f} us")
    else:
        lines.append(f"fit   tile = {slope:.3f} us x blocks + {intercept:.2f} us (R^2 {r2:.3f}); the intercept is "
                     f"{intercept / slope:.1f} blocks' worth")
    line = f"SMs   busy {100 * share:.1f}% of the span, last tile ends spread over {end_spread:.1f} us"
    if gap:
        line += f"; gap before an SM's next tile median {gap[0]:.2f} us (max {gap[1]:.2f})"
    lines.append(line)
    lines.append(rounds_line(tiles))
    start = start_line(starts)
    if start:
        lines.append(start)
    end = end_line(ends or [], walks or [], atomics or ())
    if end:
        lines.append(end)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", default="64:4096:1,64:4096:0", help="head_dim:seqlen:causal,... (the grid's shapes)")
    parser.add_argument("--op", default="attention", help="a forward op of bench/ab.py (attention, attention_softcap, "
                                                          "forward_fp8)")
    parser.add_argument("--warm", type=float, default=0.5, help="seconds of the point's own calls before the traced one")
    parser.add_argument("--dump", help="also write each point's tiles to DUMP/fwd-trace-{op}-d{d}-s{s}-c{c}.csv")
    parser.add_argument("--csv", nargs="+", help="summarise dumped traces instead (no GPU): the CSV files")
    args = parser.parse_args(argv)
    if args.csv:
        uniform = []
        for path in args.csv:
            print(f"== {path}")
            with open(path) as f:
                tiles = read_csv(f.read())
            for line in summarize(tiles):
                print("  " + line)
            if tiles and len({t[1] for t in tiles}) == 1:
                uniform.append(tiles)
        if len({p[0][1] for p in uniform}) >= 2:
            slope, intercept, r2 = cross_fit(uniform)
            print(f"== across the {len(uniform)} files of one key-block count each: tile + gap = {slope:.3f} us x blocks "
                  f"+ {intercept:.2f} us (R^2 {r2:.3f})")
        return
    lib = bwd_trace.traced_library("it allocates the trace buffer the forward's records go to")
    import time

    import torch

    import ab  # bench/ab.py: the ops as it times them
    import hopattn

    for d, s, c in ab.parse_points(args.points):
        _, call = ab.make_call(torch, hopattn, args.op, d, s, c)
        start = time.time()
        while time.time() - start < args.warm:
            call()
        bwd_trace.read_trace(lib)  # drop the warm-up's records
        call()
        records = bwd_trace.read_trace(lib)
        tiles = tiles_of(records)
        print(f"== {args.op} d{d} s{s} {'causal' if c else 'non-causal'}")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, f"fwd-trace-{args.op}-d{d}-s{s}-c{c}.csv"), "w") as f:
                f.write(tiles_csv(tiles))
        for line in summarize(tiles, starts_of(records), ends_of(records), walks_of(records),
                              atomics_of(records)):
            print("  " + line)


if __name__ == "__main__":
    main()
