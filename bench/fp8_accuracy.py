#!/usr/bin/env python3
"""FP8 attention accuracy, the FlashAttention-3 paper's protocol (section 4.3).

Q, K, V entries ~ N(0, 1) + N(0, 100) * Bernoulli(0.001); RMSE of the output against an fp64
reference for FP8 per-tensor scaling, block quantisation only, incoherent processing only, and
both. The FP8 rows come from hopattn.fp8_reference, the numpy model of the FP8 kernel's arithmetic
(e4m3 rounding of Q, K, V and P; fp64 elsewhere), until the FP8 kernel exists; with torch and a
Hopper GPU present, a row for hopattn's bf16 kernel is added.

Non-causal, query rows processed in chunks so that 16k fits in memory (rows are independent).

    python3 bench/fp8_accuracy.py [--head-dims 64 128 256] [--seqlens 1024 4096 16384] [--heads 2]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from hopattn import fp8_reference as f8  # noqa: E402

VARIANTS = [  # (label, incoherent, granularity)
    ("FP8 per-tensor", False, "tensor"),
    ("FP8 block quantisation only", False, "block"),
    ("FP8 incoherent processing only", True, "tensor"),
    ("FP8 block + incoherent", True, "block"),
]


def chunked(fn, q, chunk=1024):
    return np.concatenate([fn(q[:, i : i + chunk]) for i in range(0, q.shape[1], chunk)], axis=1)


def bf16_kernel_rmse(q, k, v, ref):
    try:
        import torch

        import hopattn

        if not (torch.cuda.is_available() and hopattn.is_available()):
            return None
    except Exception:
        return None
    t = [torch.from_numpy(x).to("cuda", torch.bfloat16) for x in (q, k, v)]
    out = hopattn.attention(*t).float().cpu().numpy()
    return f8.rmse(out, ref)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    labels = [v[0] for v in VARIANTS]
    print("| head_dim | seqlen | " + " | ".join(labels) + " | bf16 kernel | per-tensor / both |")
    print("|---:|---:|" + "---:|" * (len(labels) + 2))
    for d in args.head_dims:
        for s in args.seqlens:
            t0 = time.time()
            rng = np.random.default_rng(args.seed + d * 100003 + s)
            q, k, v = (f8.outlier_inputs((1, s, args.heads, d), rng) for _ in range(3))
            ref = chunked(lambda qc: f8.attention_fp64(qc, k, v), q)
            errs = []
            for _, incoherent, gran in VARIANTS:
                qd, kd, vd = f8.fp8_inputs(q, k, v, incoherent, gran, seed=args.seed)
                errs.append(f8.rmse(chunked(lambda qc: f8.attention_from_fp8(qc, kd, vd), qd), ref))
            bf16 = bf16_kernel_rmse(q, k, v, ref)
            cells = [f"{e:.2e}" for e in errs] + ["—" if bf16 is None else f"{bf16:.2e}", f"{errs[0] / errs[-1]:.2f}x"]
            print(f"| {d} | {s} | " + " | ".join(cells) + " |", flush=True)
            print(f"  ({time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
