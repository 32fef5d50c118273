#!/usr/bin/env python3
"""Run-to-run spread of one shape: hopattn and cuDNN timed alternately, N rounds in one process.

Each round allocates fresh q, k, v (seed changes per round with --fresh-seed, else fixed) behind a
pad whose size moves the tensors' addresses, then times both implementations as compare.py does
(triton do_bench median, L2 flushed). Per round it prints both TFLOP/s, the ratio, the address
offsets of q/k/v modulo 2 MiB, and the GPU's SM clock, power and temperature sampled right after.
The question it answers: is the spread of single compare.py runs a property of the process (all
rounds alike), of the inputs or addresses (rounds differ), or of the card's state (clock/temperature
track the figure)?

  python3 bench/spread.py --hdim 128 --seqlen 8192 --rounds 6 [--causal] [--direction fwd|bwd]
      [--warm-seconds 1] [--sustain 3]

--warm-seconds runs each implementation back to back that long before it is timed, as compare.py
does (0: none, compare.py's protocol before 2026-12-02). --sustain S then runs each implementation
back to back for S seconds (no L2 flush) with nvidia-smi sampling every 20 ms, and prints TFLOP/s,
the median SM clock and power, and TFLOP/s per GHz: work per cycle and the clock the power cap
allows, side by side.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
        return out.strip().replace(" ", "")
    except Exception:
        return "n/a"


def hopattn_and_cudnn(torch, direction, q, k, v, causal):
    """(hopattn, cuDNN) callables of one forward, or of one backward (autograd.grad of a kept
    graph), on q, k, v in (b, s, h, d); q, k, v must already require grad for the backward. The
    cuDNN one must run under sdpa_kernel(SDPBackend.CUDNN_ATTENTION)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import hopattn

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # SDPA's layout, a view of the same memory
    if direction == "fwd":
        return (lambda: hopattn.attention(q, k, v, causal=causal),
                lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
    dout = torch.randn_like(q)
    out_h = hopattn.attention(q, k, v, causal=causal)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out_c = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
    return (lambda: torch.autograd.grad(out_h, (q, k, v), dout, retain_graph=True),
            lambda: torch.autograd.grad(out_c, (q, k, v), dout, retain_graph=True))


def sustained(torch, fn, seconds):
    """(calls per second, median SM clock MHz, median power W) over `seconds` of back-to-back calls,
    the first quarter of the samples dropped (the ramp)."""
    from compare import warm_up

    fn()
    torch.cuda.synchronize()
    smi_proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                 "-lms", "20"], stdout=subprocess.PIPE, text=True)
    start = time.perf_counter()
    calls = warm_up(torch, fn, seconds)
    rate = calls / (time.perf_counter() - start)
    smi_proc.terminate()
    out, _ = smi_proc.communicate()
    clocks, power = [], []
    for line in out.splitlines():
        try:
            c, w = (float(x) for x in line.split(","))
        except ValueError:
            continue
        clocks.append(c)
        power.append(w)
    k = len(clocks) // 4
    if len(clocks) - k < 1:
        return rate, float("nan"), float("nan")
    return rate, statistics.median(clocks[k:]), statistics.median(power[k:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--tokens", type=int, default=16384, help="batch = tokens / seqlen (the paper's grid)")
    ap.add_argument("--hidden", type=int, default=2048, help="heads = hidden / hdim")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--direction", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--fresh-seed", action="store_true", help="new random inputs every round")
    ap.add_argument("--warm-seconds", type=float, default=0.0, help="compare.py's warm-up before each timing")
    ap.add_argument("--sustain", type=float, default=0.0, help="seconds of back-to-back calls per implementation")
    args = ap.parse_args(argv)

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from compare import make_timer

    timer, _ = make_timer(torch, args.warm_seconds)

    s, d = args.seqlen, args.hdim
    b, h = max(1, args.tokens // s), args.hidden // d
    flops = common.direction_flops(args.direction, b, h, s, s, d, args.causal)
    print(f"{args.direction} b={b} s={s} h={h} d={d} causal={args.causal}; start {smi()}", flush=True)
    print("round | hopattn | cudnn | ratio | q/k/v offset mod 2 MiB (KiB) | clock,W,C after")
    for r in range(args.rounds):
        pad = torch.empty(r * 3 * 1024 * 1024 + r * 4096, dtype=torch.uint8, device="cuda")
        gen = torch.Generator(device="cuda").manual_seed(1234 + s + d + (r if args.fresh_seed else 0))
        q, k, v = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for t in (q, k, v):
            t.requires_grad_(args.direction == "bwd")
        hop, cud = hopattn_and_cudnn(torch, args.direction, q, k, v, args.causal)
        t_h = timer(hop)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            t_c = timer(cud)
        f_h, f_c = flops / t_h / 1e9, flops / t_c / 1e9
        offs = "/".join(str((t.data_ptr() % (2 << 20)) // 1024) for t in (q, k, v))
        print(f"{r} | {f_h:.1f} | {f_c:.1f} | {f_h / f_c:.3f} | {offs} | {smi()}", flush=True)
        if args.sustain > 0 and r == args.rounds - 1:
            print(f"sustained, {args.sustain:g} s each, no L2 flush: impl | TFLOP/s | SM MHz | W | TFLOP/s per GHz")
            for name, fn in (("hopattn", hop), ("cudnn", cud), ("hopattn", hop)):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    rate, mhz, watts = sustained(torch, fn, args.sustain)
                tf = rate * flops / 1e12
                print(f"{name} | {tf:.1f} | {mhz:.0f} | {watts:.0f} | {tf / mhz * 1e3:.1f}", flush=True)
        del pad, q, k, v, hop, cud


if __name__ == "__main__":
    main()
