#!/usr/bin/env python3
# Where decode time goes: kernel durations from torch.profiler (L2 flushed before each call), and the
# per-call time of 10 calls replayed back to back in one CUDA graph, for hopattn and (with --peers)
# torch SDPA's cuDNN backend on the same cache. GPU machine only:
#   python3 bench/decode_profile.py                      # batch 1 at 8k / 32k / 128k, hopattn alone
#   python3 bench/decode_profile.py --batches 1,8,32,64 --cache-lens 1024 --peers
# bf16, head_dim 128, GQA 32 / 8, seqlen_q 1, contiguous cache (bench/decode.py's shapes).
import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# An installed hopattn wins; otherwise this checkout's python/ (with $HOPATTN_LIBRARY set).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import common  # noqa: E402  (bench/common.py: the list parser)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

import hopattn  # noqa: E402
from torch.profiler import profile, ProfilerActivity  # noqa: E402


def profile_call(name, f, gb):
    """Print f's do_bench time, its kernels' mean durations with an L2 flush before each call, and
    the per-call time of 10 back-to-back calls in one CUDA graph."""
    f()
    torch.cuda.synchronize()
    t = triton.testing.do_bench(f, warmup=20, rep=200)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            flush.zero_()
            f()
        torch.cuda.synchronize()
    print(f"  {name}: do_bench {t * 1e3:.1f} us = {gb / (t * 1e-3):.0f} GB/s")
    for e in prof.key_averages():
        if "zero" in e.key or "fill" in e.key:
            continue
        print(f"     {e.key[:90]:90s} n={e.count:3d} avg {e.device_time:.1f} us")
    # Back to back without flush: the steady-state figure
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(10):
            f()
    g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    g.replay()
    e1.record()
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / 10
    print(f"     CUDA graph x10 back to back: {ms * 1e3:.1f} us per call = {gb / (ms * 1e-3):.0f} GB/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", default="1")
    ap.add_argument("--cache-lens", default="8192,32768,131072")
    ap.add_argument("--peers", action="store_true", help="profile SDPA's cuDNN backend on the same cache too")
    args = ap.parse_args()
    for batch in common.parse_int_list(args.batches):
        for L in common.parse_int_list(args.cache_lens):
            q = torch.randn(batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, L, 8, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            seqlens = torch.full((batch,), L, dtype=torch.int32, device="cuda")
            gb = 2 * batch * L * 8 * 128 * 2 / 1e9
            print(f"batch {batch}, cache {L}:")
            profile_call("hopattn", lambda: hopattn.attention_with_kvcache(q, k, v, seqlens, causal=True), gb)
            if args.peers:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

                def cudnn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

                profile_call("cuDNN", cudnn, gb)


if __name__ == "__main__":
    main()
