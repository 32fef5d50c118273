# One hopattn call at one benchmark shape, for ncu or nsys: --warmup calls, a synchronise, then
# --calls more. Pick the kernel with ncu's --kernel-name / --launch-skip / --launch-count. The shape
# and inputs are the paper grid's, as the probes make them (common.probe_inputs: bf16, 16k tokens,
# batch = tokens / seqlen, heads = 2048 / head_dim).
# Ops:
#   attention      the bf16 forward
#   attention_fp8  the one-call FP8 path (pre-passes, then the FP8 kernel)
#   forward_fp8    the FP8 kernel on pre-quantised inputs, as compare.py's "FP8 kernel" column
#   backward       the forward, then the backward of sum(out * dout) through autograd
#   cudnn, fa2     the peers' forward (torch SDPA with that backend) on the same buffers
# Per-instruction stall sampling of the FP8 d128 kernel (docs/gpu.md, "Profiling one kernel"):
#   ncu --kernel-name regex:fwd_ws_kernel --launch-skip 2 --launch-count 1 \
#       --section WarpStateStats --section SourceCounters --import-source no -o /tmp/fp8 -f \
#       python3 bench/ncu_shape.py --op forward_fp8 --hdim 128 --seqlen 4096
#   ncu -i /tmp/fp8.ncu-rep --page source --csv --print-source sass > fp8-sass.csv
import argparse

import common  # bench/common.py, beside this script

# cudnn, fa2: the peers' forward at the same shape and on the same buffers, built by compare.py's
# make_impls (torch SDPA), so ncu profiles what compare.py times (pick their kernels with
# --kernel-name, e.g. regex:"fprop|flash_fwd").
PEERS = ("cudnn", "fa2")
OPS = ("attention", "attention_fp8", "forward_fp8", "backward") + PEERS


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--op", choices=OPS, default="attention_fp8")
    p.add_argument("--hdim", type=int, choices=(64, 128, 256), default=128)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--warmup", type=int, default=2, help="calls before the synchronise")
    p.add_argument("--calls", type=int, default=1, help="calls after it")
    args = p.parse_args(argv)
    if args.seqlen <= 0 or common.TOTAL_TOKENS % args.seqlen:
        p.error(f"--seqlen {args.seqlen} does not divide the grid's {common.TOTAL_TOKENS} tokens")
    if args.warmup < 0 or args.calls < 1:
        p.error("--warmup must be >= 0 and --calls >= 1")
    return args


def shape(args):
    """(batch, seqlen, heads, head_dim) of the call."""
    return common.TOTAL_TOKENS // args.seqlen, args.seqlen, common.HIDDEN // args.hdim, args.hdim


def make_call(torch, hopattn, args):
    direction = "bwd" if args.op == "backward" else "fwd"
    _, _, _, q, k, v = common.probe_inputs(torch, direction, args.hdim, args.seqlen, args.causal, seed=0)
    if args.op == "attention":
        return lambda: hopattn.attention(q, k, v, causal=args.causal)
    if args.op in PEERS:
        from compare import make_impls

        fn, backend = make_impls(torch)[args.op](q, k, v, args.causal)

        def peer():
            with backend():
                return fn()

        return peer
    if args.op == "attention_fp8":
        return lambda: hopattn.attention_fp8(q, k, v, causal=args.causal)
    if args.op == "forward_fp8":
        q8, qd = hopattn.quantize_fp8(q)
        k8, kd = hopattn.quantize_fp8(k)
        from compare import quantize_v_per_head  # V as attention_fp8 quantises it, one scale per head

        v8, vd = quantize_v_per_head(torch, v)
        return lambda: hopattn.forward_fp8(q8, k8, v8, qd, kd, vd, causal=args.causal)
    dout = torch.randn_like(q)

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
    print(f"{args.op} {'x'.join(map(str, shape(args)))} causal={int(args.causal)} bf16: "
          f"{args.warmup} + {args.calls} calls")


if __name__ == "__main__":
    main()
