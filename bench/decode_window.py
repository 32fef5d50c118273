#!/usr/bin/env python3
# Decode (seqlen_q = 1) with a 4k sliding window against the whole cache: time should follow the window.
# GPU machine only:  python3 bench/decode_window.py
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
    print("| batch | cache | window | ms | ms without window | ratio | keys ratio |")
    for batch in (1, 8):
        for L in (32768, 131072):
            q = torch.randn(batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, L, 8, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            seqlens = torch.full((batch,), L, dtype=torch.int32, device="cuda")
            full = lambda: hopattn.attention_with_kvcache(q, k, v, seqlens, causal=True)
            win = lambda: hopattn.attention_with_kvcache(q, k, v, seqlens, causal=True, window_size=(4095, 0))
            o1, o2 = full(), win()
            t_full = triton.testing.do_bench(full, warmup=10, rep=100)
            t_win = triton.testing.do_bench(win, warmup=10, rep=100)
            print(f"| {batch} | {L} | 4096 | {t_win:.4f} | {t_full:.4f} | {t_win / t_full:.3f} | {4096 / L:.3f} |", flush=True)


if __name__ == "__main__":
    main()
