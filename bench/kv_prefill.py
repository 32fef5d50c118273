#!/usr/bin/env python3
# Chunked prefill against a KV cache (issue 6): hopattn.attention_with_kvcache with seqlen_q >> 1 on a
# contiguous and on paged caches (64- and 256-token pages, random page tables), against
# hopattn.attention on the same q and keys as fixed-length tensors (the warp-specialised WGMMA
# kernel). From kKvForwardMinSeqlenQ query rows up a contiguous cache runs that forward kernel
# (src/api/kvcache_route.hpp), and so does a paged one whose pages hold whole key tiles (128 keys
# at causal d128: 256-token pages yes, 64 no); the others run the split-KV decode kernel, which the
# "decode kernel" column forces (HOPATTN_KV_KERNEL=decode) on the contiguous call
# (docs/design-kvcache-prefill.md).
# TFLOP/s count the (query, key) pairs each row sees; compare.make_timer (triton do_bench median). GPU machine
# only.
#   python3 bench/kv_prefill.py [--shapes 4x8192x1,4x8192x128,...] (batch x cache x seqlen_q)
#                               [--page-sizes 64,256] [--hdim 128] [--heads 32 --heads-kv 8]
import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))

DEFAULT_SHAPES = "4x8192x1,4x8192x16,4x8192x32,4x8192x64,4x8192x128,4x8192x512,4x8192x2048,1x32768x4096"


def timed_with_kernel(timer, fn, kernel):
    """timer(fn) with HOPATTN_KV_KERNEL set to `kernel` (None: unset); the library reads it per call."""
    saved = os.environ.pop("HOPATTN_KV_KERNEL", None)
    if kernel is not None:
        os.environ["HOPATTN_KV_KERNEL"] = kernel
    try:
        return fn(), timer(fn)
    finally:
        os.environ.pop("HOPATTN_KV_KERNEL", None)
        if saved is not None:
            os.environ["HOPATTN_KV_KERNEL"] = saved


def visible_pairs(batch, heads, seqlen_q, cache_len, causal):
    """(query, key) pairs over batch x heads: every cached key, minus the bottom-right causal triangle."""
    per_head = seqlen_q * cache_len - (seqlen_q * (seqlen_q - 1) // 2 if causal else 0)
    return batch * heads * per_head


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="batch x cache length x seqlen_q, comma separated")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--page-sizes", default="64,256", help="paged-cache columns, comma separated")
    args = p.parse_args(argv)

    import torch
    from compare import make_timer

    import hopattn

    timer, timer_name = make_timer(torch)

    dt = torch.bfloat16
    hq, hk, d = args.heads, args.heads_kv, args.hdim
    pages = [int(x) for x in args.page_sizes.split(",")]
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"timer: {timer_name}; TFLOP/s from the (query, key) pairs each row sees")
    print("| batch | cache | seqlen_q | causal | KV call, contiguous | KV call, contiguous, decode kernel | "
          + "".join(f"KV call, paged{page} | " for page in pages) + "hopattn.attention | check |")
    print("|---:|---:|---:|---|---:|---:|" + "---:|" * len(pages) + "---:|---|")
    for shape in args.shapes.split(","):
        b, cache_len, sq = (int(x) for x in shape.split("x"))
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
        kc = torch.randn(b, cache_len, hk, d, device="cuda", dtype=dt, generator=gen)
        vc = torch.randn(b, cache_len, hk, d, device="cuda", dtype=dt, generator=gen)
        seqlens = torch.full((b,), cache_len, dtype=torch.int32, device="cuda")
        paged_caches = []  # (page_table, k pages, v pages) per page size
        for page in pages:
            perm = torch.randperm(b * cache_len // page, device="cuda", generator=gen)
            kp = torch.empty(b * cache_len // page, page, hk, d, device="cuda", dtype=dt)
            kp[perm] = kc.view(-1, page, hk, d)
            vp = torch.empty_like(kp)
            vp[perm] = vc.view(-1, page, hk, d)
            paged_caches.append((perm.view(b, -1).to(torch.int32), kp, vp))
        for causal in (False, True):
            contig = lambda: hopattn.attention_with_kvcache(q, kc, vc, seqlens, causal=causal)  # noqa: E731
            dense = lambda: hopattn.attention(q, kc, vc, causal=causal)  # noqa: E731
            runs = [timed_with_kernel(timer, contig, None), timed_with_kernel(timer, contig, "decode")]
            for table, kp, vp in paged_caches:
                paged = lambda: hopattn.attention_with_kvcache(  # noqa: E731
                    q, kp, vp, seqlens, page_table=table, causal=causal)
                runs.append(timed_with_kernel(timer, paged, None))
            runs.append(timed_with_kernel(timer, dense, None))
            ref = runs[-1][0].float()
            worst = max((out.float() - ref).abs().max().item() for out, _ in runs[:-1])
            flops = 4 * d * visible_pairs(b, hq, sq, cache_len, causal)
            cells = [f"{flops / ms / 1e9:.0f}" for _, ms in runs]
            check = ("ok " if worst < 2e-2 else "BAD ") + f"{worst:.1e}"
            print(f"| {b} | {cache_len} | {sq} | {'yes' if causal else 'no'} | " + " | ".join(cells) + f" | {check} |")
        del q, kc, vc, paged_caches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
