"""Times one forward or backward of hopattn and cuDNN under three protocols, in one process, with
the SM clock sampled throughout:
  flush   CUDA events around each call after a 256 MB L2 flush: the median (compare.py's do_bench)
          and the mean of the same calls;
  b2b     CUDA events around N calls back to back, no flush, mean per call;
  prof    torch.profiler over N back-to-back calls: the sum of kernel times per call, and the
          union of the kernels' intervals (kernels that overlap count once).
Each protocol starts after `--warm-seconds` of the same calls back to back. Prints one table.
It answers why two protocols rank implementations differently (perf-notes, backward v8)."""
import datetime
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


PROTOCOLS = ("flush", "b2b", "prof")


def back_to_back(torch, fn, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def profiled(torch, fn, calls):
    """(sum of kernel µs per call, union of kernel intervals µs per call, wall µs per call by events,
    {kernel name: µs per call})."""
    from torch.profiler import ProfilerActivity, profile

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
    intervals, per_kernel = [], {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        a, b = ev.time_range.start, ev.time_range.end
        if b <= a:
            continue
        intervals.append((a, b))
        per_kernel[ev.name] = per_kernel.get(ev.name, 0.0) + (b - a) / calls
    total = sum(b - a for a, b in intervals)
    return total / calls, union_length(intervals) / calls, 1e3 * start.elapsed_time(end) / calls, per_kernel


def union_length(intervals):
    """Length of the union of (start, end) intervals: kernels that overlap in time count once."""
    union, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                union += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        union += cur_b - cur_a
    return union


class ClockSampler:
    """nvidia-smi clock/power samples every 20 ms with their times, to attribute to phases."""

    def __init__(self):
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                                      "--format=csv,noheader,nounits", "-lms", "20"],
                                     stdout=subprocess.PIPE, text=True)

    def stop(self):
        self.proc.terminate()
        out, _ = self.proc.communicate()
        samples = []
        for line in out.splitlines():
            try:
                ts, c, w = (x.strip() for x in line.split(","))
                t = datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((t, float(c), float(w)))
            except ValueError:
                continue
        return samples


def median_in(samples, a, b, i):
    vals = [s[i] for s in samples if a <= s[0] <= b]
    return statistics.median(vals) if vals else float("nan")


def main(argv=None):
    args = common.probe_parser(__doc__.splitlines()[0], calls=30).parse_args(argv)
    seqlens = common.parse_int_list(args.seqlens)

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from compare import flushed_call_times, make_l2_flush, power_burn, warm_up
    from spread import hopattn_and_cudnn

    power_burn(torch, 2.0)
    d = args.hdim
    rows = []
    for s in seqlens:
        _, _, flops, q, k, v = common.probe_inputs(torch, args.direction, d, s, args.causal, seed=7 + s)
        impls = dict(zip(("hopattn", "cudnn"), hopattn_and_cudnn(torch, args.direction, q, k, v, args.causal)))
        for name, fn in impls.items():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                sampler = ClockSampler()
                res, kernels = {}, {}
                flush = make_l2_flush(torch, "memset")
                for proto in PROTOCOLS:
                    warm_up(torch, fn, args.warm_seconds)
                    t0 = time.time()
                    if proto == "flush":
                        times = flushed_call_times(torch, fn, args.calls, flush)
                        us = 1e3 * statistics.median(times)
                        res["flush_mean"] = 1e3 * statistics.mean(times)
                    elif proto == "b2b":
                        us = 1e3 * back_to_back(torch, fn, args.calls)
                    else:
                        ksum, union, wall, kernels = profiled(torch, fn, args.calls)
                        us = union
                        res["prof_sum"], res["prof_wall"] = ksum, wall
                    res[proto] = us
                    res[proto + "_t"] = (t0, time.time())
                samples = sampler.stop()
                del flush
            clocks = {p: median_in(samples, *res[p + "_t"], 1) for p in PROTOCOLS}
            rows.append((s, name, res, clocks, flops))
            print(f"\n{args.direction} d={d} s={s} {name}: kernels under the profiler, µs per call")
            for kname, kus in sorted(kernels.items(), key=lambda kv: -kv[1])[:6]:
                print(f"  {kus:9.1f}  {kname[:100]}")
        del q, k, v, impls
        torch.cuda.empty_cache()

    print(f"\n{args.direction} d={d} causal={args.causal}: µs per call (TFLOP/s), median SM MHz while timed")
    print("| seqlen | impl | flush median | b2b | flush mean | prof union | prof sum | prof wall | MHz flush / b2b / prof |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for s, name, r, c, flops in rows:
        def cell(us):
            return f"{us:.0f} ({flops / us / 1e6:.0f})"
        print(f"| {s} | {name} | {cell(r['flush'])} | {cell(r['b2b'])} | {cell(r['flush_mean'])} | {cell(r['prof'])} | "
              f"{r['prof_sum']:.0f} | {r['prof_wall']:.0f} | {c['flush']:.0f} / {c['b2b']:.0f} / {c['prof']:.0f} |")


if __name__ == "__main__":
    main()
