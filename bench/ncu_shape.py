# One hopattn call at one benchmark shape, for ncu or nsys: --warmup calls, a synchronise, then
# --calls more. Pick the kernel with ncu's --kernel-name / --launch-skip / --launch-count. The shape
# is the paper grid's (bench/common.py): batch = tokens / seqlen, heads = 2048 / head_dim.
# Ops:
#   attention      the 16-bit forward (dtype bf16 or fp16)
#   attention_fp8  the one-call FP8 path (pre-passes, then the FP8 kernel)
#   forward_fp8    the FP8 kernel on pre-quantised inputs, as compare.py's "FP8 kernel" column
#   backward       the forward, then the backward of sum(out * dout) through autograd
# Per-instruction stall sampling of the FP8 d128 kernel (docs/gpu.md, "Profiling one kernel"):
#   ncu --kernel-name regex:fwd_ws_kernel --launch-skip 2 --launch-count 1 \
#       --section WarpStateStats --section SourceCounters --print-details all \
#       python3 bench/ncu_shape.py --op forward_fp8 --hdim 128 --seqlen 4096
import argparse

from common import HIDDEN, TOTAL_TOKENS  # bench/common.py, beside this script

OPS = ("attention", "attention_fp8", "forward_fp8", "backward")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--op", choices=OPS, default="attention_fp8")
    p.add_argument("--hdim", type=int, choices=(64, 128, 256), default=128)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=TOTAL_TOKENS, help="batch x seqlen")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--warmup", type=int, default=2, help="calls before the synchronise")
    p.add_argument("--calls", type=int, default=1, help="calls after it")
    args = p.parse_args(argv)
    if args.seqlen <= 0 or args.tokens % args.seqlen:
        p.error(f"--tokens {args.tokens} is not a positive multiple of --seqlen {args.seqlen}")
    if args.warmup < 0 or args.calls < 1:
        p.error("--warmup must be >= 0 and --calls >= 1")
    return args


def shape(args):
    """(batch, seqlen, heads, head_dim) of the call."""
    return args.tokens // args.seqlen, args.seqlen, HIDDEN // args.hdim, args.hdim


def make_call(torch, hopattn, args):
    b, s, h, d = shape(args)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    if args.op == "attention":
        return lambda: hopattn.attention(q, k, v, causal=args.causal)
    if args.op == "attention_fp8":
        return lambda: hopattn.attention_fp8(q, k, v, causal=args.causal)
    if args.op == "forward_fp8":
        q8, qd = hopattn.quantize_fp8(q)
        k8, kd = hopattn.quantize_fp8(k)
        amax = v.float().abs().amax(dim=(1, 3)).clamp_min(torch.finfo(torch.float32).tiny)
        v8 = (v.float() * (448.0 / amax)[:, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        vd = (amax / 448.0).contiguous()
        return lambda: hopattn.forward_fp8(q8, k8, v8, qd, kd, vd, causal=args.causal)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)

    def fwd_bwd():
        out = hopattn.attention(q, k, v, causal=args.causal)
        torch.autograd.backward(out, dout)

    return fwd_bwd


def main(argv=None):
    args = parse_args(argv)
    import torch

    import hopattn

    call = make_call(torch, hopattn, args)
    for _ in range(args.warmup):
        call()
    torch.cuda.synchronize()
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()
    print(f"{args.op} {'x'.join(map(str, shape(args)))} causal={int(args.causal)} {args.dtype}: "
          f"{args.warmup} + {args.calls} calls")


if __name__ == "__main__":
    main()
