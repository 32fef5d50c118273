# Host overhead per call at a tiny shape (b=1, s=128, h=8, d=64, bf16), where the GPU work is a few
# microseconds and the host cost decides the rate: hopattn.attention (Python + ctypes + C++ launch)
# against torch SDPA's backends, in one process. Prints a markdown table last.
import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hopattn


def per_call_us(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):  # best of 5 rounds: the host is shared with nothing, but the first can page in
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=500)
    a = p.parse_args()
    b, s, h, d = 1, 128, 8, 64
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA takes (b, h, s, d); views, no copy

    def sdpa(backend):
        def fn():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        return fn

    rows = [
        ("hopattn.attention", lambda: hopattn.attention(q, k, v, causal=True)),
        ("hopattn.attention, return_lse", lambda: hopattn.attention(q, k, v, causal=True, return_lse=True)),
        ("SDPA (default dispatch)", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)),
        ("SDPA FLASH_ATTENTION", sdpa(SDPBackend.FLASH_ATTENTION)),
        ("SDPA CUDNN_ATTENTION", sdpa(SDPBackend.CUDNN_ATTENTION)),
    ]
    results = [(name, per_call_us(fn, a.calls)) for name, fn in rows]
    base = results[2][1]
    print(f"host time per call, b={b} s={s} h={h} d={d} bf16 causal, {torch.cuda.get_device_name()}")
    print("| call | µs per call | vs SDPA default |")
    print("|---|---:|---:|")
    for name, us in results:
        print(f"| {name} | {us:.1f} | {us / base:.2f}x |")


if __name__ == "__main__":
    main()
