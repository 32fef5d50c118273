#!/usr/bin/env python3
# Softcap's cost in forward+backward through hopattn.attention (torch autograd), bf16, b x s = 16k.
# GPU machine only:  python3 bench/softcap_cost.py
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


def main():
    torch.manual_seed(0)
    print("| hdim | causal | fwd+bwd TFLOP/s, no softcap | softcap 30 | cost |")
    for d in (64, 128, 256):
        h = 2048 // d
        for causal in (False, True):
            q, k, v = (torch.randn(4, 4096, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)
            flops = 4 * 4 * 4096 * 4096 * h * d * (0.5 if causal else 1.0) * 3.5  # fwd + 2.5x bwd
            res = []
            for cap in (0.0, 30.0):
                def step():
                    o = hopattn.attention(q, k, v, causal=causal, softcap=cap)
                    torch.autograd.grad(o, (q, k, v), do)
                ms = triton.testing.do_bench(step, warmup=10, rep=200)
                res.append(flops / ms / 1e9)
            print(f"| {d} | {'yes' if causal else 'no'} | {res[0]:.1f} | {res[1]:.1f} | {100 * (res[1] / res[0] - 1):+.0f}% |", flush=True)


if __name__ == "__main__":
    main()
