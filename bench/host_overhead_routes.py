#!/usr/bin/env python3
# Host time per call of the torch routes (no sync inside the loop; the GPU work is tiny).
# GPU machine only:  python3 bench/host_overhead_routes.py
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# An installed hopattn wins; otherwise this checkout's python/ (with $HOPATTN_LIBRARY set).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import time  # noqa: E402

import torch  # noqa: E402

import hopattn  # noqa: E402


def main():
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sl = torch.full((1,), 1024, dtype=torch.int32, device="cuda")
    qa = torch.randn(1, 128, 32, 128, device="cuda", dtype=torch.bfloat16)
    ka = torch.randn(1, 128, 8, 128, device="cuda", dtype=torch.bfloat16)
    calls = {
        "attention_with_kvcache": lambda: hopattn.attention_with_kvcache(q, k, v, sl, causal=True),
        "attention_with_kvcache window": lambda: hopattn.attention_with_kvcache(q, k, v, sl, causal=True, window_size=(255, 0)),
        "attention": lambda: hopattn.attention(qa, ka, ka, causal=True),
        "attention softcap": lambda: hopattn.attention(qa, ka, ka, causal=True, softcap=30.0),
    }
    for name, f in calls.items():
        for _ in range(50): f()
        torch.cuda.synchronize()
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n): f()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"{name:32s} {1e6 * (t1 - t0) / n:7.1f} us per call (host)")


if __name__ == "__main__":
    main()
