#!/usr/bin/env python3
# Varlen prefill benchmark (issue 6): one packed batch of mixed lengths (128 ... 8k, 64k tokens) through
# hopattn.varlen_attention, against the same sequences as fixed-length batches (one hopattn.attention
# call per distinct length, their times summed). The bar: varlen within 10% of that sum.
# FlashAttention-2's varlen kernel (torch's aten._flash_attention_forward with cu_seqlens) is timed in
# the same process when torch has it. Prints a table; --json writes the rows.
#
# --fp8: the FP8 path instead: hopattn.attention_fp8_varlen (bf16 in: rotate + quantise + V^T + kernel)
# against hopattn.attention_fp8 per distinct length, and the kernel alone (forward_fp8_varlen on e4m3
# inputs against forward_fp8), FLOPs counted as in bf16.
#
#   python3 bench/varlen.py [--hdim 128] [--heads 16] [--fp8] [--json docs/bench/varlen-<date>.json]
import argparse
import json
import random
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))
sys.path.insert(0, str(REPO_ROOT / "python"))

# Each mix is a list of sequence lengths summing to 64k tokens.
POWERS_MIX = [8192] * 4 + [4096] * 4 + [2048] * 4 + [1024] * 4 + [512] * 4 + [256] * 4 + [128] * 8


def random_mix(seed, total=65536, lo=128, hi=8192):
    """Uniform lengths in [lo, hi] until `total` tokens; the last one trimmed to land exactly."""
    rng = random.Random(seed)
    lens = []
    while sum(lens) < total:
        lens.append(min(rng.randint(lo, hi), total - sum(lens)))
    return lens


def seq_flops(lens_q, lens_k, heads, head_dim, causal):
    """Forward FLOPs of a varlen batch: 4*sq*sk*d per head and sequence (causal: the visible part)."""
    total = 0
    for sq, sk in zip(lens_q, lens_k):
        if causal:  # bottom-right aligned: row i sees min(sk, i + 1 + sk - sq) keys
            visible = sum(max(0, min(sk, i + 1 + sk - sq)) for i in range(sq)) if sq != sk else sq * (sq + 1) // 2
            total += 4 * visible * head_dim * heads
        else:
            total += 4 * sq * sk * head_dim * heads
    return total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--heads-kv", type=int, default=None, help="default: --heads (no GQA)")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--fp8", action="store_true", help="time the FP8 calls (attention_fp8_varlen, forward_fp8_varlen)")
    p.add_argument("--gpu-time", action="store_true",
                   help="CUDA events around a sleep-padded call (GPU time) instead of do_bench: the fixed-length "
                        "side's short calls (128..1k tokens) are otherwise timed at host pace, 2-3x their GPU time")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.fp8:
        return main_fp8(args)

    import torch

    import hopattn
    timer, timer_name = pick_timer(torch, args)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    h, hk, d = args.heads, args.heads_kv or args.heads, args.hdim
    mixes = {"powers of two, 128..8k": POWERS_MIX, "uniform 128..8k (seed 0)": random_mix(0)}
    rows = []
    for mix_name, lens in mixes.items():
        lens = list(lens)
        random.Random(1).shuffle(lens)  # packing order must not matter: mix short and long
        total = sum(lens)
        cu = torch.tensor([0] + [sum(lens[: i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
        q = torch.randn(total, h, d, device="cuda", dtype=dtype)
        k = torch.randn(total, hk, d, device="cuda", dtype=dtype)
        v = torch.randn(total, hk, d, device="cuda", dtype=dtype)
        for causal in (False, True):
            flops = seq_flops(lens, lens, h, d, causal)

            def hop_varlen():
                return hopattn.varlen_attention(q, k, v, cu, cu, max(lens), max(lens), causal=causal)

            ms_var = timer(hop_varlen)
            # The same sequences as fixed-length batches: one call per distinct length.
            ms_fixed = 0.0
            for length in sorted(set(lens)):
                count = lens.count(length)
                qf = torch.randn(count, length, h, d, device="cuda", dtype=dtype)
                kf = torch.randn(count, length, hk, d, device="cuda", dtype=dtype)
                vf = torch.randn(count, length, hk, d, device="cuda", dtype=dtype)
                ms_fixed += timer(lambda: hopattn.attention(qf, kf, vf, causal=causal))
            ms_fa2 = None
            if hk == h:
                try:
                    def fa2():
                        return torch.ops.aten._flash_attention_forward(
                            q, k, v, cu, cu, max(lens), max(lens), 0.0, causal, False)[0]

                    fa2()
                    ms_fa2 = timer(fa2)
                except Exception as exc:  # noqa: BLE001 - the peer is optional
                    print(f"FA2 varlen not timed: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
            # Correctness spot check: the varlen output of the first sequence against attention().
            out = hop_varlen()
            s0 = lens[0]
            ref = hopattn.attention(q[None, :s0], k[None, :s0], v[None, :s0], causal=causal)[0]
            err = (out[:s0].float() - ref.float()).abs().max().item()
            rows.append({
                "mix": mix_name, "sequences": len(lens), "tokens": total, "causal": causal, "hdim": d,
                "heads": h, "heads_kv": hk, "varlen_ms": ms_var, "fixed_ms": ms_fixed,
                "varlen_tflops": flops / ms_var / 1e9, "fixed_tflops": flops / ms_fixed / 1e9,
                "varlen_over_fixed": ms_var / ms_fixed,
                "fa2_varlen_ms": ms_fa2, "fa2_varlen_tflops": flops / ms_fa2 / 1e9 if ms_fa2 else None,
                "max_abs_diff_seq0": err,
            })

    print(f"timer: {timer_name}; {args.dtype}, head_dim {d}, heads {h}/{hk}; device {torch.cuda.get_device_name()}")
    print("| mix | causal | seqs | varlen ms | fixed ms (sum) | varlen/fixed | varlen TFLOP/s | fixed TFLOP/s | FA2 varlen TFLOP/s | check |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        fa2 = f"{r['fa2_varlen_tflops']:.1f}" if r["fa2_varlen_tflops"] else "-"
        ok = ("ok " if r["max_abs_diff_seq0"] < 1e-2 else "BAD ") + f"{r['max_abs_diff_seq0']:.1e}"
        print(f"| {r['mix']} | {'yes' if r['causal'] else 'no'} | {r['sequences']} | {r['varlen_ms']:.3f} | "
              f"{r['fixed_ms']:.3f} | {r['varlen_over_fixed']:.3f} | {r['varlen_tflops']:.1f} | "
              f"{r['fixed_tflops']:.1f} | {fa2} | {ok} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"timer": timer_name, "device": torch.cuda.get_device_name(),
                                               "rows": rows}, indent=1))


def pick_timer(torch, args):
    from compare import make_events_timer, make_timer

    if args.gpu_time:  # the timer and its name as bench/decode.py's --timer gpu takes them
        return make_events_timer(torch, reps=30, warmup=5, sleep_cycles=200_000)
    return make_timer(torch)


def main_fp8(args):
    """FP8 varlen against FP8 fixed-length batches of the same sequences, end to end from bf16 and
    the attention kernel alone (e4m3 inputs, unit descales)."""
    import torch

    import hopattn
    timer, timer_name = pick_timer(torch, args)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    e4m3 = torch.float8_e4m3fn
    h, hk, d = args.heads, args.heads_kv or args.heads, args.hdim
    mixes = {"powers of two, 128..8k": POWERS_MIX, "uniform 128..8k (seed 0)": random_mix(0)}
    rows = []
    for mix_name, lens in mixes.items():
        lens = list(lens)
        random.Random(1).shuffle(lens)
        total = sum(lens)
        cu = torch.tensor([0] + [sum(lens[: i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
        q = torch.randn(total, h, d, device="cuda", dtype=dtype)
        k = torch.randn(total, hk, d, device="cuda", dtype=dtype)
        v = torch.randn(total, hk, d, device="cuda", dtype=dtype)
        q8, k8, v8 = q.to(e4m3), k.to(e4m3), v.to(e4m3)
        m = max(lens)
        for causal in (False, True):
            flops = seq_flops(lens, lens, h, d, causal)
            ms_e2e = timer(lambda: hopattn.attention_fp8_varlen(q, k, v, cu, cu, m, m, causal=causal))
            ms_kernel = timer(lambda: hopattn.forward_fp8_varlen(q8, k8, v8, cu, cu, m, m, causal=causal))
            fixed_e2e = fixed_kernel = 0.0
            kernel_by_length = {}  # the fixed side's terms: where its run-to-run spread comes from
            for length in sorted(set(lens)):
                count = lens.count(length)
                qf = torch.randn(count, length, h, d, device="cuda", dtype=dtype)
                kf = torch.randn(count, length, hk, d, device="cuda", dtype=dtype)
                vf = torch.randn(count, length, hk, d, device="cuda", dtype=dtype)
                qf8, kf8, vf8 = qf.to(e4m3), kf.to(e4m3), vf.to(e4m3)
                fixed_e2e += timer(lambda: hopattn.attention_fp8(qf, kf, vf, causal=causal))
                kernel_by_length[length] = timer(lambda: hopattn.forward_fp8(qf8, kf8, vf8, causal=causal))
                fixed_kernel += kernel_by_length[length]
            # Sequence 0 of the packed call must equal its own fixed-length FP8 call bitwise.
            out = hopattn.attention_fp8_varlen(q, k, v, cu, cu, m, m, causal=causal)
            s0 = lens[0]
            ref = hopattn.attention_fp8(q[None, :s0], k[None, :s0], v[None, :s0], causal=causal)[0]
            err = (out[:s0].float() - ref.float()).abs().max().item()
            rows.append({
                "mix": mix_name, "sequences": len(lens), "tokens": total, "causal": causal, "hdim": d,
                "heads": h, "heads_kv": hk, "fp8": True,
                "varlen_e2e_ms": ms_e2e, "fixed_e2e_ms": fixed_e2e, "e2e_ratio": ms_e2e / fixed_e2e,
                "varlen_kernel_ms": ms_kernel, "fixed_kernel_ms": fixed_kernel, "kernel_ratio": ms_kernel / fixed_kernel,
                "varlen_kernel_tflops": flops / ms_kernel / 1e9, "fixed_kernel_tflops": flops / fixed_kernel / 1e9,
                "varlen_e2e_tflops": flops / ms_e2e / 1e9, "max_abs_diff_seq0": err,
                "fixed_kernel_ms_by_length": kernel_by_length,
            })

    print(f"timer: {timer_name}; FP8 from {args.dtype}, head_dim {d}, heads {h}/{hk}; device {torch.cuda.get_device_name()}")
    print("| mix | causal | seqs | kernel: varlen ms | fixed ms (sum) | varlen/fixed | varlen TFLOP/s | "
          "end to end: varlen ms | fixed ms (sum) | varlen/fixed | seq 0 vs own call |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        ok = ("equal" if r["max_abs_diff_seq0"] == 0 else "DIFF ") + f" {r['max_abs_diff_seq0']:.1e}"
        print(f"| {r['mix']} | {'yes' if r['causal'] else 'no'} | {r['sequences']} | {r['varlen_kernel_ms']:.3f} | "
              f"{r['fixed_kernel_ms']:.3f} | {r['kernel_ratio']:.3f} | {r['varlen_kernel_tflops']:.1f} | "
              f"{r['varlen_e2e_ms']:.3f} | {r['fixed_e2e_ms']:.3f} | {r['e2e_ratio']:.3f} | {ok} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"timer": timer_name, "device": torch.cuda.get_device_name(),
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
