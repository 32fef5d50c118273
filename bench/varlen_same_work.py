#!/usr/bin/env python3
# The packed (varlen) kernels against the fixed-length ones on identical work: B sequences of L
# tokens, once as one packed batch (cu_seqlens) and once as a (B, L) batch, same data, bf16 and FP8
# (e4m3 inputs: the kernel and the V^T pass, no quantisation). Any ratio above 1 is the packed
# kernel's own cost (its scheduler, its tile order), not the mix's. GPU-time timer (CUDA events
# around a sleep-padded loop, bench/compare.py), so short calls are not timed at host pace.
#
#   python3 bench/varlen_same_work.py [--seqlen 2048] [--batch 16] [--hdim 64] [--heads 16]
import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))
sys.path.insert(0, str(REPO_ROOT / "python"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seqlen", type=int, default=2048)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--hdim", type=int, default=64)
    p.add_argument("--heads", type=int, default=16)
    args = p.parse_args(argv)

    import torch
    import hopattn
    from compare import make_events_timer

    e4m3 = torch.float8_e4m3fn
    L, B, h, d = args.seqlen, args.batch, args.heads, args.hdim
    cu = torch.arange(0, (B + 1) * L, L, dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(B, L, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    q8, k8, v8 = (x.to(e4m3) for x in (q, k, v))
    flat = lambda x: x.reshape(B * L, h, d)
    calls = {
        "fp8 varlen": lambda c: hopattn.forward_fp8_varlen(flat(q8), flat(k8), flat(v8), cu, cu, L, L, causal=c),
        "fp8 fixed": lambda c: hopattn.forward_fp8(q8, k8, v8, causal=c),
        "bf16 varlen": lambda c: hopattn.varlen_attention(flat(q), flat(k), flat(v), cu, cu, L, L, causal=c),
        "bf16 fixed": lambda c: hopattn.attention(q, k, v, causal=c),
    }
    timer, _ = make_events_timer(torch, reps=30, warmup=5, sleep_cycles=200_000)
    print(f"{B} x {L} tokens, {h} heads, head_dim {d}; {torch.cuda.get_device_name()}")
    print("| causal | fp8 varlen us | fp8 fixed us | fp8 v/f | bf16 varlen us | bf16 fixed us | bf16 v/f |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in (True, False):
        t = {n: timer(lambda: f(c)) * 1e3 for n, f in calls.items()}
        print(f"| {'yes' if c else 'no'} | {t['fp8 varlen']:.1f} | {t['fp8 fixed']:.1f} | "
              f"{t['fp8 varlen'] / t['fp8 fixed']:.3f} | {t['bf16 varlen']:.1f} | {t['bf16 fixed']:.1f} | "
              f"{t['bf16 varlen'] / t['bf16 fixed']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
