# GPU time of the FP8 pre-passes, by kernel durations (torch.profiler), not by timing the Python
# call: at the sizes that matter a quantize_fp8 call from Python costs about as much host time as
# its kernel runs (perf-notes, "quantiser lanes": 62-66 us per call for every head dim, rotated or
# not, was the call's cost). Two tables, after a 1 s matmul burn so the clock is up:
#   1. quantize_fp8 alone on x (1, rows, 2048 / d, d) bf16: rotated or not, block or per-head
#      scales, head_dim 64/128/256; GB/s at 3 bytes a value (5 for per-head: two reads).
#   2. attention_fp8 per kernel at d128 (batch x seqlen = 16k tokens, 16 heads), causal off/on:
#      each kernel's device time per call, their sum, and the call's wall time between events
#      (bench/protocol.py's profiled).
# Usage: python3 bench/fp8_prepass.py [--rows 65536] [--calls 20]
import argparse
import time

import common  # bench/, beside this script


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=65536, help="rows of x for quantize_fp8 (x has 2048 values a row)")
    p.add_argument("--calls", type=int, default=20, help="profiled calls per configuration")
    p.add_argument("--seqlens", default="1024,2048", help="attention_fp8 seqlens (16k tokens: batch = 16384 / seqlen)")
    return p.parse_args(argv)


def kernel_us(torch, fn, calls):
    """({kernel name: device µs per call}, kernels' sum µs per call, wall µs per call by events)."""
    import protocol  # bench/, beside this script

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    total, _, wall, per_kernel = protocol.profiled(torch, fn, calls)
    return per_kernel, total, wall


def short(name):
    """A kernel's name without its namespaces and template arguments' noise."""
    name = name.replace("hopattn::sm90::", "").replace("(anonymous namespace)::", "")
    return name[:90]


def main(argv=None):
    args = parse_args(argv)
    import torch

    import hopattn

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time.time()
    while time.time() - t < 1.0:
        a @ a
    torch.cuda.synchronize()

    print("| quantize_fp8 | rows x values | rotate | scales | µs | GB/s |")
    print("|---|---|---|---|---:|---:|")
    for d in (64, 128, 256):
        x = torch.randn(1, args.rows, 2048 // d, d, device="cuda", dtype=torch.bfloat16)
        for rotate in (True, False):
            for block in (True, False):
                ks, _, _ = kernel_us(torch, lambda: hopattn.quantize_fp8(x, rotate=rotate, block_quant=block), args.calls)
                us = sum(t for name, t in ks.items() if "quantize_rows" in name)
                gbs = x.numel() * (3 if block else 5) / us / 1e3
                print(f"| d{d} | {args.rows} x 2048 | {int(rotate)} | {'block' if block else 'head'} | {us:.1f} | {gbs:.0f} |")

    for s in common.parse_int_list(args.seqlens):
        b, _, _, q, k, v = common.probe_inputs(torch, "fwd", 128, s, False, seed=0)  # 16 heads
        for causal in (False, True):
            ks, total, wall = kernel_us(torch, lambda: hopattn.attention_fp8(q, k, v, causal=causal), args.calls)
            print(f"\nattention_fp8 d128 b={b} s={s} h=16 causal={int(causal)}: wall {wall:.1f} µs per call, "
                  f"kernels {total:.1f} µs")
            for name, us in sorted(ks.items(), key=lambda kv: -kv[1]):
                print(f"  {us:8.1f} µs  {short(name)}")


if __name__ == "__main__":
    main()
