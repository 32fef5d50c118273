#!/usr/bin/env python3
"""Where one call's GPU time goes: each kernel that hopattn's and cuDNN's (torch SDPA) forward or
backward launches, with its mean time per call and share, from torch.profiler over back-to-back
calls (after a warm-up of the same calls, as compare.py's protocol). The backward runs three
kernels (preprocess, main loop, dQ postprocess); this says what the two memory-bound ones cost
against the main loop, shape by shape.

  python3 bench/kernel_split.py --direction bwd --hdim 128 --seqlens 1k,4k,16k [--causal]
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main(argv=None):
    args = common.probe_parser(__doc__.splitlines()[0], calls=20).parse_args(argv)

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile
    from compare import warm_up
    from spread import hopattn_and_cudnn

    d = args.hdim
    for s in common.parse_int_list(args.seqlens):
        b, h, flops, q, k, v = common.probe_inputs(torch, args.direction, d, s, args.causal, seed=99 + s)
        impls = dict(zip(("hopattn", "cudnn"), hopattn_and_cudnn(torch, args.direction, q, k, v, args.causal)))
        print(f"\n{args.direction} d={d} s={s} b={b} h={h} causal={args.causal}")
        for name, fn in impls.items():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                warm_up(torch, fn, args.warm_seconds)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.calls):
                        fn()
                    torch.cuda.synchronize()
            per_kernel = collections.defaultdict(float)
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA:
                    per_kernel[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            total = sum(per_kernel.values()) / args.calls
            if total <= 0:  # this torch names the fields differently: print its own table
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
                continue
            print(f"  {name}: {total:.1f} us of kernels per call = {flops / total / 1e6:.1f} TFLOP/s")
            for kname, us in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:6]:
                print(f"    {us / args.calls:9.1f} us  {100 * us / args.calls / total:5.1f}%  {kname[:110]}")


if __name__ == "__main__":
    main()
