#!/usr/bin/env python3
# Ring attention on one GPU (issue 8): what each rank of a W-rank ring computes, timed alone.
#
# For each total seqlen S (causal, zigzag layout, bf16, head_dim 128 by default), each emulated rank
# r of hopattn.distributed's ring runs its W steps' blocks (the same plan and block calls as
# ring_attention) on one GPU, with no communication:
#   * "blocks": the hopattn kernels of the rank's steps only (compute only);
#   * "+merge": the same steps with the fp32 LSE merge (forward) or the fp32 dq/dk/dv accumulation
#     (backward), i.e. the rank's whole compute; merge overhead = +merge / blocks - 1.
# Per-rank TFLOP/s (the rank's attention FLOPs, common.attention_flops per block, over the +merge
# time) is compared with single-GPU hopattn at length S/W (the same kernels on one unsharded
# sequence of the rank's length; issue 8's target: >= 85%). The last columns time the whole emulated
# ring (ring_attention_emulated, all W ranks one after the other on one stream; backward: autograd
# through it) against one hopattn call over the full S (torch.ops.hopattn.fwd / bwd, the kernels
# hopattn.attention runs). --device cpu runs the same code on the CPU reference (a smoke test).
# Communication cannot be measured on one GPU: the transfers and their overlap need the two-GPU
# run (tests/python/test_distributed.py covers correctness).
#
#   HOPATTN_LIBRARY=build/libhopattn.so python3 bench/ring.py [--seqlens 16k,32k,64k,128k]
#       [--world-size 2] [--heads 16] [--hdim 128] [--direction fwd|bwd|both] [--json out.json]
import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))
# An installed hopattn wins; otherwise this checkout's python/ (with $HOPATTN_LIBRARY set).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import common  # noqa: E402
from hopattn import distributed as D  # noqa: E402

TARGET = 0.85


def rank_flops(rank, world_size, seqlen, batch, heads, head_dim, causal=True, layout="zigzag", direction="fwd"):
    """Attention FLOPs of one rank's ring steps (each block counted as common.direction_flops counts
    a (sq, sk) attention: a causal diagonal block at half)."""
    local = seqlen // world_size
    total = 0
    for _, plan in D._plans(rank, world_size, causal, layout):
        if plan is None:
            continue
        q0, q1, k0, k1 = plan.rows(local)
        total += common.direction_flops(direction, batch, heads, q1 - q0, k1 - k0, head_dim, plan.causal)
    return total


def cpu_timer(fn, runs=3):
    """Median seconds*1e3 of fn on the CPU (the smoke-test device; no warm-up needed)."""
    import statistics
    import time

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv=None):
    p = argparse.ArgumentParser(description="one-GPU measurement of ring attention's per-rank compute")
    p.add_argument("--seqlens", default="16k,32k,64k,128k", help="total sequence lengths (1k-style suffixes)")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--heads-kv", type=int, default=None, help="GQA: fewer K/V heads (default: --heads)")
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="fp32: --device cpu only")
    p.add_argument("--layout", choices=list(D.LAYOUTS), default="zigzag")
    p.add_argument("--direction", choices=["fwd", "bwd", "both"], default="both")
    p.add_argument("--no-full", action="store_true", help="skip the whole-ring vs full-length single-GPU column")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    p.add_argument("--device", default="cuda",
                   help="cuda (the measurement); cpu runs the same code on the torch reference, a smoke test only")
    args = p.parse_args(argv)

    import torch

    if args.device == "cuda":
        from compare import make_timer

        timer, timer_name = make_timer(torch)
        device_name = torch.cuda.get_device_name()
    else:
        timer, timer_name = cpu_timer, "perf_counter, median of 3 (CPU smoke test)"
        device_name = args.device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    dev = args.device
    w, b, h, d = args.world_size, args.batch, args.heads, args.hdim
    hk = args.heads_kv or h
    causal, layout = True, args.layout
    scale = d ** -0.5
    directions = common.directions_from_arg(args.direction)
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(s, heads):
        return torch.randn((b, s, heads, d), generator=gen, device=dev, dtype=dtype)

    # One attention call as the ring's blocks make it: hopattn's operators on CUDA
    # (torch.ops.hopattn.fwd / bwd, what hopattn.attention runs), the torch reference on CPU.
    def fwd(q_, k_, v_):
        return D._block_forward(torch, q_, k_, v_, causal, scale)

    def bwd(do_, q_, k_, v_, o_, l_):
        return D._block_backward(torch, do_, q_, k_, v_, o_, l_, causal, scale)

    rows = []
    for seqlen in common.parse_int_list(args.seqlens):
        local = seqlen // w
        q, k, v, dout = rand(seqlen, h), rand(seqlen, hk), rand(seqlen, hk), rand(seqlen, h)
        shards = [[D.shard(t, r, w, layout).contiguous() for r in range(w)] for t in (q, k, v, dout)]
        qs, ks, vs, douts = shards
        # The ring's final out/lse per rank (what the backward steps take).
        with torch.no_grad():
            outs, lses = D.ring_attention_emulated(qs, ks, vs, causal=causal, layout=layout, return_lse=True)

        # Single GPU at the rank's length (one unsharded sequence of S/W tokens).
        q1, k1, v1, do1 = (t[:, :local].contiguous() for t in (q, k, v, dout))
        o1, l1 = fwd(q1, k1, v1)

        for direction in directions:
            single_flops = common.direction_flops(direction, b, h, local, local, d, causal)
            if direction == "fwd":
                single_ms = timer(lambda: fwd(q1, k1, v1))
            else:
                single_ms = timer(lambda: bwd(do1, q1, k1, v1, o1, l1))
            single_tf = single_flops / (single_ms * 1e-3) / 1e12
            per_rank = []
            for r in range(w):
                plans = D._plans(r, w, causal, layout)

                def blocks_only(r=r, plans=plans):
                    for src, plan in plans:
                        if plan is None:
                            continue
                        a, e, c0, c1 = plan.rows(local)
                        if direction == "fwd":
                            D._block_forward(torch, qs[r][:, a:e], ks[src][:, c0:c1], vs[src][:, c0:c1], plan.causal,
                                             scale)
                        else:
                            D._block_backward(torch, douts[r][:, a:e], qs[r][:, a:e], ks[src][:, c0:c1],
                                              vs[src][:, c0:c1], outs[r][:, a:e], lses[r][:, :, a:e], plan.causal,
                                              scale)

                def whole_rank(r=r, plans=plans):
                    if direction == "fwd":
                        state = D._ForwardState(torch, qs[r])
                        for src, _ in plans:
                            D._step_forward(torch, state, r, src, w, causal, layout, scale, qs[r], ks[src], vs[src])
                        return state.result()
                    dq = torch.zeros(qs[r].shape, dtype=torch.float32, device=dev)
                    for src, _ in plans:
                        blk = D._step_backward(torch, dq, r, src, w, causal, layout, scale, qs[r], ks[src], vs[src],
                                               outs[r], lses[r], douts[r])
                        if blk is not None:  # the dK/dV accumulation of the travelling sums
                            c0, c1, dk, dv = blk
                            dk_acc[src][:, c0:c1] += dk
                            dv_acc[src][:, c0:c1] += dv
                    return dq.to(dtype)

                dk_acc = [torch.zeros(t.shape, dtype=torch.float32, device=dev) for t in ks]
                dv_acc = [torch.zeros(t.shape, dtype=torch.float32, device=dev) for t in vs]
                blocks_ms = timer(blocks_only)
                rank_ms = timer(whole_rank)
                del dk_acc, dv_acc
                flops = rank_flops(r, w, seqlen, b, h, d, causal, layout, direction)
                tf = flops / (rank_ms * 1e-3) / 1e12
                per_rank.append({
                    "rank": r, "flops": flops, "blocks_ms": blocks_ms, "rank_ms": rank_ms,
                    "blocks_tflops": flops / (blocks_ms * 1e-3) / 1e12, "rank_tflops": tf,
                    "merge_overhead": rank_ms / blocks_ms - 1.0, "vs_single": tf / single_tf,
                })
            ring_ms = full_ms = None
            if not args.no_full:
                if direction == "fwd":
                    with torch.no_grad():
                        ring_ms = timer(lambda: D.ring_attention_emulated(qs, ks, vs, causal=causal, layout=layout))
                        full_ms = timer(lambda: fwd(q, k, v))
                else:
                    qg = [t.detach().requires_grad_() for t in qs]
                    kg = [t.detach().requires_grad_() for t in ks]
                    vg = [t.detach().requires_grad_() for t in vs]
                    ring_out = D.ring_attention_emulated(qg, kg, vg, causal=causal, layout=layout)
                    ring_ms = timer(lambda: torch.autograd.grad(ring_out, qg + kg + vg, douts, retain_graph=True))
                    full_out, full_lse = fwd(q, k, v)
                    full_ms = timer(lambda: bwd(dout, q, k, v, full_out, full_lse))
                    del ring_out, full_out, full_lse, qg, kg, vg
            worst = min(per_rank, key=lambda x: x["vs_single"])
            rows.append({
                "direction": direction, "seqlen": seqlen, "world_size": w, "local_seqlen": local, "batch": b,
                "heads": h, "heads_kv": hk, "head_dim": d, "dtype": args.dtype, "causal": causal, "layout": layout,
                "single_ms": single_ms, "single_tflops": single_tf, "ranks": per_rank,
                "worst_vs_single": worst["vs_single"], "meets_target": worst["vs_single"] >= TARGET,
                "ring_emulated_ms": ring_ms, "full_single_ms": full_ms,
            })
            r0 = rows[-1]
            print(f"{direction} S={seqlen}: single@{local} {single_tf:.0f} TFLOP/s; ranks "
                  + ", ".join(f"{x['rank_tflops']:.0f}" for x in per_rank) + " TFLOP/s; worst "
                  f"{100 * r0['worst_vs_single']:.1f}%", flush=True)
        del q, k, v, dout, shards, qs, ks, vs, douts, outs, lses, q1, k1, v1, do1, o1, l1
        if dev == "cuda":
            torch.cuda.empty_cache()

    print()
    print(f"ring attention per rank on one GPU ({device_name}, {timer_name}); W={w} {layout}, "
          f"causal, {args.dtype}, batch {b}, heads {h}/{hk}, head_dim {d}")
    print()
    print("| dir | seqlen | single @S/W TFLOP/s | rank TFLOP/s (blocks / +merge) | worst rank vs single | "
          "merge overhead | emulated ring ms (all ranks) | 1-GPU full S ms |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        ranks = "; ".join(f"r{x['rank']} {x['blocks_tflops']:.0f} / {x['rank_tflops']:.0f}" for x in row["ranks"])
        overhead = max(x["merge_overhead"] for x in row["ranks"])
        mark = "ok" if row["meets_target"] else f"below {int(TARGET * 100)}%"
        print(f"| {row['direction']} | {row['seqlen']} | {row['single_tflops']:.0f} | {ranks} | "
              f"{100 * row['worst_vs_single']:.1f}% ({mark}) | {100 * overhead:.1f}% | "
              f"{fmt(row['ring_emulated_ms'])} | {fmt(row['full_single_ms'])} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"timer": timer_name, "device": device_name,
                                               "rows": rows}, indent=1))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
