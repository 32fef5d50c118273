#!/usr/bin/env python3
# Where batch-1 decode time goes: kernel durations from torch.profiler, CUDA-graph replay per call.
# GPU machine only:  python3 bench/decode_profile.py
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# An installed hopattn wins; otherwise this checkout's python/ (with $HOPATTN_LIBRARY set).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import torch  # noqa: E402
import triton  # noqa: E402

import hopattn  # noqa: E402
from torch.profiler import profile, ProfilerActivity


def main():
    for L in (8192, 32768, 131072):
        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, L, 8, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        seqlens = torch.full((1,), L, dtype=torch.int32, device="cuda")
        f = lambda: hopattn.attention_with_kvcache(q, k, v, seqlens, causal=True)
        f(); torch.cuda.synchronize()
        t = triton.testing.do_bench(f, warmup=20, rep=200)
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                flush.zero_()
                f()
            torch.cuda.synchronize()
        gb = 2 * L * 8 * 128 * 2 / 1e9
        print(f"L={L}: do_bench {t * 1e3:.1f} us = {gb / (t * 1e-3):.0f} GB/s")
        for e in prof.key_averages():
            if "zero" in e.key or "fill" in e.key: continue
            print(f"   {e.key[:90]:90s} n={e.count:3d} avg {e.device_time / 1e0:.1f} us")
        # Back to back without flush: the steady-state figure
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10): f()
        g.replay(); torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / 10
        print(f"   CUDA graph x10 back to back: {ms * 1e3:.1f} us per call = {gb / (ms * 1e-3):.0f} GB/s")


if __name__ == "__main__":
    main()
