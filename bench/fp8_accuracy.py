#!/usr/bin/env python3
"""FP8 attention accuracy, the FlashAttention-3 paper's protocol (section 4.3).

Q, K, V entries ~ N(0, 1) + N(0, 100) * Bernoulli(0.001); RMSE of the output against an fp64
reference, non-causal.

Default (CPU, numpy): the FP8 rows come from hopattn.fp8_reference, the numpy model of the FP8
kernel's arithmetic (e4m3 rounding of Q, K, V and P; fp64 elsewhere), for per-tensor scaling, block
quantisation only, incoherent processing only, and both; with torch and a Hopper GPU present, a row
for hopattn's bf16 kernel is added. Query rows are processed in chunks so that 16k fits in memory.

--gpu (torch + a Hopper GPU + libhopattn): the kernels themselves on bf16 inputs, against an fp64
reference computed with torch on the GPU from the same bf16 values: the bf16 kernel
(hopattn.attention); FP8 with one scale per tensor, quantised in torch, then hopattn.forward_fp8;
the same with a random Hadamard rotation of Q and K applied in torch first (as FlashAttention-3
measured it); hopattn.attention_fp8 with block quantisation only, incoherent processing only (scales
per (batch, head)), and both (the defaults). --attribution adds, at one shape, a torch fp64
simulation of "both" with one quantisation made exact at a time (V, P, Q/K): where the remaining
error comes from.

    python3 bench/fp8_accuracy.py [--head-dims 64 128 256] [--seqlens 1024 4096] [--heads 2]
    python3 bench/fp8_accuracy.py --gpu [--head-dims 64 128 256] [--seqlens 1024 4096 16384]
        [--batch 2] [--heads H] [--attribution] [--json out.json]
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
# An installed hopattn wins; otherwise this checkout's python/ (with $HOPATTN_LIBRARY set).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))
from hopattn import fp8_reference as f8  # noqa: E402

VARIANTS = [  # (label, incoherent, granularity)
    ("FP8 per-tensor", False, "tensor"),
    ("FP8 block quantisation only", False, "block"),
    ("FP8 incoherent processing only", True, "tensor"),
    ("FP8 block + incoherent", True, "block"),
]

CPU_SEQLENS = [1024, 4096]
GPU_SEQLENS = [1024, 4096, 16384]
GPU_HIDDEN = 2048  # --gpu default heads: hidden / head_dim (16 at d128, as in the issue)
E4M3_MAX = 448.0
BLOCK_ROWS = 128


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


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int, nargs="+", default=None,
                    help=f"default {CPU_SEQLENS} (CPU), {GPU_SEQLENS} (--gpu)")
    ap.add_argument("--heads", type=int, default=None,
                    help=f"default 2 (CPU), {GPU_HIDDEN} / head_dim (--gpu)")
    ap.add_argument("--batch", type=int, default=None, help="default 1 (CPU), 2 (--gpu)")
    ap.add_argument("--seed", type=int, default=0, help="input generator seed and rotation seed")
    ap.add_argument("--gpu", action="store_true", help="measure the kernels (torch + Hopper GPU + libhopattn)")
    ap.add_argument("--attribution", action="store_true",
                    help="--gpu: also attribute the error of 'both' to V, P and Q/K quantisation at one shape")
    ap.add_argument("--attr-head-dim", type=int, default=128, help="--attribution shape (default %(default)s)")
    ap.add_argument("--attr-seqlen", type=int, default=4096, help="--attribution shape (default %(default)s)")
    ap.add_argument("--no-grid", action="store_true", help="--gpu --attribution: skip the main grid")
    ap.add_argument("--ref-chunk-mib", type=int, default=1024,
                    help="--gpu: fp64 score-matrix budget of the chunked reference (default %(default)s MiB)")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if (args.attribution or args.no_grid) and not args.gpu:
        ap.error("--attribution and --no-grid need --gpu")
    return args


# --- CPU: the numpy model ---------------------------------------------------------------------------


def run_cpu(args):
    seqlens = args.seqlens or CPU_SEQLENS
    heads = args.heads or 2
    batch = args.batch or 1
    labels = [v[0] for v in VARIANTS]
    rows = []
    lines = ["| head_dim | seqlen | " + " | ".join(labels) + " | bf16 kernel | per-tensor / both |",
             "|---:|---:|" + "---:|" * (len(labels) + 2)]
    print(lines[0])
    print(lines[1])
    for d in args.head_dims:
        for s in seqlens:
            t0 = time.time()
            rng = np.random.default_rng(args.seed + d * 100003 + s)
            q, k, v = (f8.outlier_inputs((batch, s, heads, d), rng) for _ in range(3))
            ref = chunked(lambda qc: f8.attention_fp64(qc, k, v), q)
            errs = []
            for _, incoherent, gran in VARIANTS:
                qd, kd, vd = f8.fp8_inputs(q, k, v, incoherent, gran, seed=args.seed)
                errs.append(f8.rmse(chunked(lambda qc: f8.attention_from_fp8(qc, kd, vd), qd), ref))
            bf16 = bf16_kernel_rmse(q, k, v, ref)
            cells = [f"{e:.2e}" for e in errs] + ["—" if bf16 is None else f"{bf16:.2e}", f"{errs[0] / errs[-1]:.2f}x"]
            lines.append(f"| {d} | {s} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
            print(f"  ({time.time() - t0:.0f} s)", file=sys.stderr)
            rows.append(dict(head_dim=d, seqlen=s, batch=batch, heads=heads,
                             rmse=dict(zip(labels, errs), **{"bf16 kernel": bf16}), ratio=errs[0] / errs[-1]))
    return dict(mode="cpu (numpy model)", rows=rows), "\n".join(lines)


# --- GPU: the kernels, fp64 reference in torch -------------------------------------------------------

GPU_VARIANTS = [  # (key, table header)
    ("bf16", "bf16 kernel"),
    ("tensor", "FP8 per-tensor"),
    ("tensor_hadamard", "FP8 per-tensor + Hadamard"),
    ("block", "FP8 block only"),
    ("incoherent", "FP8 incoherent only"),
    ("both_qk", "FP8 block + incoherent (Q, K rotated)"),
    ("both", "FP8 block + incoherent (attention_fp8's defaults)"),
]


def outlier_inputs_torch(torch, shape, gen):
    """N(0, 1) + N(0, 100) * Bernoulli(0.001) in float32 on the GPU."""
    x = torch.randn(shape, generator=gen, device="cuda")
    spikes = torch.randn(shape, generator=gen, device="cuda") * 10.0
    return x + spikes * (torch.rand(shape, generator=gen, device="cuda") < 1e-3)


def attention_fp64(torch, q, k, v, round_p=None, budget_bytes=1 << 30):
    """Non-causal attention in float64 on the GPU, q, k, v (b, s, h, d) with the same heads, any
    dtype (upcast per slice). round_p, if given, rounds P = exp(s - rowmax) before P V (the row sum
    keeps the unrounded P, as the FP8 kernel). Chunked over (batch, head) slices and query rows so
    that one fp64 score block stays within budget_bytes."""
    b, sq, h, d = q.shape
    sk = k.shape[1]
    scale = 1.0 / math.sqrt(d)
    out = torch.empty((b, sq, h, d), dtype=torch.float64, device=q.device)
    rows = max(1, min(sq, budget_bytes // (8 * max(sk, 1))))
    for bi in range(b):
        for hi in range(h):
            kk = k[bi, :, hi].double()
            vv = v[bi, :, hi].double()
            for r0 in range(0, sq, rows):
                s = (q[bi, r0 : r0 + rows, hi].double() @ kk.T) * scale
                p = torch.exp(s - s.amax(dim=-1, keepdim=True))
                total = p.sum(dim=-1, keepdim=True)
                if round_p is not None:
                    p = round_p(p)
                out[bi, r0 : r0 + rows, hi] = (p @ vv) / total
                del s, p
    return out


def rmse_t(got, want):
    return (got.double() - want).pow(2).mean().sqrt().item()


def e4m3_round(torch, x):
    """x (already scaled into range) rounded to e4m3fn (to nearest even, saturating), as float64."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).double()


def round_p_sim(torch, p):
    """P as the kernel's P·V GEMM sees it (fp8_reference.round_p_to_e4m3): 2^8 P rounded to e4m3."""
    bias = 2.0**f8.P_EXPONENT_BIAS
    return e4m3_round(torch, p * bias) / bias


def quantize_sim(torch, x, granularity):
    """Dequantised e4m3 values of x (b, s, h, d) float64: one scale per tensor, per (batch, head),
    or per 128-row block of a (batch, head), mapping the |max| to 448."""
    b, s, h, d = x.shape
    if granularity == "tensor":
        amax = x.abs().amax().reshape(1, 1, 1, 1)
        scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        return e4m3_round(torch, x / scale) * scale
    if granularity == "head":
        amax = x.abs().amax(dim=(1, 3), keepdim=True)
        scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        return e4m3_round(torch, x / scale) * scale
    nblk = -(-s // BLOCK_ROWS)
    xp = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, nblk * BLOCK_ROWS - s)).reshape(b, nblk, BLOCK_ROWS, h, d)
    amax = xp.abs().amax(dim=(2, 4), keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return (e4m3_round(torch, xp / scale) * scale).reshape(b, nblk * BLOCK_ROWS, h, d)[:, :s]


def quantize_per_tensor(torch, x):
    """(x_e4m3, descale): one scale for the whole tensor (|max| -> 448), descale a 0-dim tensor."""
    xf = x.float()
    amax = xf.abs().amax().clamp_min(torch.finfo(torch.float32).tiny)
    return (xf * (E4M3_MAX / amax)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), amax / E4M3_MAX


def rotation(torch, d, seed):
    """hopattn's M = diag(signs(seed)) H / sqrt(d) (hopattn.fp8_reference.random_rotation), float32."""
    return torch.from_numpy(f8.random_rotation(d, seed)).to("cuda", torch.float32)


def gpu_inputs(torch, batch, seqlen, heads, d, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + d * 100003 + seqlen)
    return tuple(outlier_inputs_torch(torch, (batch, seqlen, heads, d), gen).to(torch.bfloat16) for _ in range(3))


def measure_point(torch, hopattn, batch, seqlen, heads, d, seed, budget):
    q, k, v = gpu_inputs(torch, batch, seqlen, heads, d, seed)
    ref = attention_fp64(torch, q, k, v, budget_bytes=budget)
    err = {}
    err["bf16"] = rmse_t(hopattn.attention(q, k, v), ref)
    (q8, qd), (k8, kd), (v8, vd) = (quantize_per_tensor(torch, t) for t in (q, k, v))
    err["tensor"] = rmse_t(hopattn.forward_fp8(q8, k8, v8, qd, kd, vd), ref)
    m = rotation(torch, d, seed)
    (q8, qd), (k8, kd) = (quantize_per_tensor(torch, t.float() @ m) for t in (q, k))
    err["tensor_hadamard"] = rmse_t(hopattn.forward_fp8(q8, k8, v8, qd, kd, vd), ref)
    del q8, k8, v8
    err["block"] = rmse_t(hopattn.attention_fp8(q, k, v, incoherent=False, block_quant=True, seed=seed), ref)
    err["incoherent"] = rmse_t(hopattn.attention_fp8(q, k, v, incoherent=True, block_quant=False, seed=seed), ref)
    err["both_qk"] = rmse_t(hopattn.attention_fp8(q, k, v, seed=seed, rotate_v=False), ref)
    err["both"] = rmse_t(hopattn.attention_fp8(q, k, v, seed=seed), ref)
    return err


def attribution(torch, hopattn, batch, seqlen, heads, d, seed, budget):
    """RMSE of 'both' as the kernel computes it and as simulated in torch fp64, then the simulation
    with V, P or Q/K exact, and each one's share of the simulated squared error."""
    q, k, v = gpu_inputs(torch, batch, seqlen, heads, d, seed)
    ref = attention_fp64(torch, q, k, v, budget_bytes=budget)
    kernel = rmse_t(hopattn.attention_fp8(q, k, v, seed=seed, rotate_v=False), ref)
    m = rotation(torch, d, seed).double()
    qr, kr = q.double() @ m, k.double() @ m
    qq, kq = quantize_sim(torch, qr, "block"), quantize_sim(torch, kr, "block")
    vq = quantize_sim(torch, v.double(), "head")
    round_p = lambda p: round_p_sim(torch, p)  # noqa: E731
    sim = {
        "simulated both": rmse_t(attention_fp64(torch, qq, kq, vq, round_p, budget), ref),
        "exact V": rmse_t(attention_fp64(torch, qq, kq, v, round_p, budget), ref),
        "exact P": rmse_t(attention_fp64(torch, qq, kq, vq, None, budget), ref),
        "exact Q/K": rmse_t(attention_fp64(torch, qr, kr, vq, round_p, budget), ref),
    }
    total = sim["simulated both"] ** 2
    share = {name: 1.0 - sim[name] ** 2 / total for name in ("exact V", "exact P", "exact Q/K")}
    return dict(head_dim=d, seqlen=seqlen, batch=batch, heads=heads, kernel_both=kernel, rmse=sim, share=share)


def attribution_table(a):
    lines = [f"Attribution at head_dim {a['head_dim']}, seqlen {a['seqlen']}, batch {a['batch']}, heads {a['heads']} "
             f"(FP8 block + incoherent, V not rotated; kernel RMSE {a['kernel_both']:.2e}):",
             "",
             "| simulation (torch fp64) | RMSE | share of the squared error removed |",
             "|:---|---:|---:|",
             f"| all quantised (V per head, P, Q/K rotated + per block) | {a['rmse']['simulated both']:.2e} | — |"]
    for name in ("exact V", "exact P", "exact Q/K"):
        lines.append(f"| {name} | {a['rmse'][name]:.2e} | {100 * a['share'][name]:.0f}% |")
    return "\n".join(lines)


def run_gpu(args):
    try:
        import torch
    except ImportError:
        sys.exit("--gpu needs torch")
    if not torch.cuda.is_available():
        sys.exit("--gpu needs a CUDA GPU")
    if not hasattr(torch, "float8_e4m3fn"):
        sys.exit(f"--gpu needs torch.float8_e4m3fn (torch >= 2.1), found {torch.__version__}")
    import hopattn

    hopattn.check_device()
    seqlens = args.seqlens or GPU_SEQLENS
    batch = args.batch or 2
    budget = args.ref_chunk_mib << 20
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  hopattn {hopattn.version()}  "
          f"fp8 kernels {[i for i in hopattn.build_info()['instantiations'] if i.startswith('fp8:')]}", file=sys.stderr)
    result = dict(mode="gpu (kernels)", device=torch.cuda.get_device_name(), torch=torch.__version__,
                  hopattn_version=hopattn.version(), seed=args.seed, reference="fp64 (torch, GPU) of the bf16 inputs",
                  variants=dict(GPU_VARIANTS), rows=[])
    headers = [h for _, h in GPU_VARIANTS]
    lines = ["| head_dim | seqlen | batch | heads | " + " | ".join(headers) + " | per-tensor / both |",
             "|---:|---:|---:|---:|" + "---:|" * (len(headers) + 1)]
    if not args.no_grid:
        for d in args.head_dims:
            heads = args.heads or max(1, GPU_HIDDEN // d)
            for s in seqlens:
                t0 = time.time()
                try:
                    err = measure_point(torch, hopattn, batch, s, heads, d, args.seed, budget)
                except Exception as exc:  # e.g. a head_dim not built: keep the rest of the grid
                    print(f"head_dim {d} seqlen {s}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    err = {key: None for key, _ in GPU_VARIANTS}
                torch.cuda.empty_cache()
                ratio = err["tensor"] / err["both"] if err["tensor"] and err["both"] else None
                result["rows"].append(dict(head_dim=d, seqlen=s, batch=batch, heads=heads, rmse=err, ratio=ratio))
                cells = ["n/a" if err[key] is None else f"{err[key]:.2e}" for key, _ in GPU_VARIANTS]
                cells.append("n/a" if ratio is None else f"{ratio:.2f}x")
                lines.append(f"| {d} | {s} | {batch} | {heads} | " + " | ".join(cells) + " |")
                print(lines[-1] + f"  ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    text = []
    if args.attribution:
        d, s = args.attr_head_dim, args.attr_seqlen
        heads = args.heads or max(1, GPU_HIDDEN // d)
        t0 = time.time()
        a = attribution(torch, hopattn, batch, s, heads, d, args.seed, budget)
        print(f"  attribution ({time.time() - t0:.0f} s)", file=sys.stderr)
        result["attribution"] = a
        text.append(attribution_table(a))
    if not args.no_grid:
        text.append("RMSE against fp64, paper protocol (non-causal, bf16 inputs):\n\n" + "\n".join(lines))
    return result, "\n\n".join(text)


def main(argv=None):
    args = parse_args(argv)
    result, table = run_gpu(args) if args.gpu else run_cpu(args)
    if args.gpu:
        print(table)  # the CPU mode printed its rows as it went
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
