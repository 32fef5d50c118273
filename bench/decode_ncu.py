#!/usr/bin/env python3
"""One decode shape for ncu: the contiguous-cache call and the paged one (64-token pages, random
page table, the same keys) as bench/decode.py builds them, --warmup calls of each, a synchronise,
then one contiguous call and one paged call. Profile those two with
  ncu --kernel-name regex:split_kernel --launch-skip <2 * warmup> --launch-count 2 ...
(at batch >= 32 there is one split, so each call is one split_kernel launch and no combine)."""
import argparse


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cache-len", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--pre-alloc-gb", type=float, default=0,
                    help="allocate and free this many GB first, so the caches are carved from one large "
                         "cached segment, as in a decode.py run after its 128k shapes")
    a = ap.parse_args(argv)
    if a.cache_len <= 0 or a.page_size <= 0 or a.cache_len % a.page_size:
        ap.error(f"--cache-len {a.cache_len} must be a positive multiple of --page-size {a.page_size}")
    import torch  # after parsing: --help and a bad argument need no GPU machine

    import hopattn
    from decode import make_page_table, to_pages  # bench/decode.py, beside this script: the same paged caches
    if a.pre_alloc_gb > 0:
        big = torch.empty(int(a.pre_alloc_gb * 2**30), dtype=torch.uint8, device="cuda")
        del big
    gen = torch.Generator(device="cuda").manual_seed(0)
    dt = torch.bfloat16
    b, n, hq, hk, d, page = a.batch, a.cache_len, a.heads, a.heads_kv, a.hdim, a.page_size
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(b, n, hk, d, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(b, n, hk, d, device="cuda", dtype=dt, generator=gen)
    seqlens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    perm, table = make_page_table(torch, b, n // page, gen)
    kp, vp = to_pages(k, perm, page), to_pages(v, perm, page)

    def contiguous():
        return hopattn.attention_with_kvcache(q, k, v, seqlens)

    def paged():
        return hopattn.attention_with_kvcache(q, kp, vp, seqlens, page_table=table)

    for _ in range(a.warmup):
        contiguous()
    for _ in range(a.warmup):
        paged()
    torch.cuda.synchronize()
    diff = (contiguous().float() - paged().float()).abs().max().item()
    torch.cuda.synchronize()
    print(f"batch {b} cache {n}: contiguous vs paged max diff {diff:.1e}")


if __name__ == "__main__":
    main()
