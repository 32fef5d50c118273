#!/usr/bin/env python3
# KV-cache decoding benchmark (issue 6): one new token per sequence (seqlen_q = 1) against a full cache,
# GQA 32/8 heads, head_dim 128, bf16, over batch x cache length. hopattn.attention_with_kvcache on a
# contiguous cache and on a paged one (64-token pages, random page table), and as peers in the same
# process torch SDPA's cuDNN and FLASH backends with enable_gqa=True on the contiguous cache (q
# (b, 32, 1, 128), k/v (b, 8, L, 128) transposed views), where they run. The decode kernel is bound by
# HBM, so the figure of merit is GB/s: the bytes of K and V in the cache, read once, over the time.
# Prints a markdown table; --json writes the rows. GPU machine only (torch with CUDA).
#
# Timer (--timer gpu, the default; compare.make_events_timer): before each timed call a 256 MB memset
# flushes L2 (--flush read: a 256 MB read, which leaves no dirty lines for the call to write back)
# and a torch.cuda._sleep keeps the GPU busy for ~100 us more, then CUDA events bracket
# the call; median of 100 after 10 warm-up calls, and the clocks are raised by 0.5 s of matmuls
# before the first shape. Since session 65 each implementation also runs back to back for 0.3 s at
# each shape first (--warm-seconds, compare.warm_up): without it the implementation timed first at a
# shape ran at the clock the previous, heavier shape left (H100, right after batch 32 / 64 at 128k:
# hopattn contiguous at batch 32 / 64, 1k read 66.8 / 117.3 us, 60.4 / 103.9 warmed; the paged call
# and cuDNN, timed after it, moved < 1%; docs/BENCHMARKS.md, session 65).
# The sleep makes the figure the call's GPU time: a decode step is ~10-20 us of GPU work at small
# caches, and with do_bench (--timer do_bench) a Python route whose host cost per call (28-70 us,
# depending on the machine) exceeds the GPU's per-iteration work lets the GPU reach the start event
# before the call is enqueued, so the host's time is measured instead (perf-notes, "decode v4").
#
#   python3 bench/decode.py [--batches 1,8,32,64] [--cache-lens 1024,8192,32768,131072] [--json out.json]
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
from compare import FLUSH_MODES  # noqa: E402  (compare imports torch only inside its functions)


def kv_bytes(batch, cache_len, heads_kv, head_dim, item_bytes):
    """Bytes of K and V one decode step reads: every cached key and value once."""
    return 2 * batch * cache_len * heads_kv * head_dim * item_bytes


def make_page_table(torch, batch, pages_per_seq, gen, order="random"):
    """A page table: (perm, table), perm the pool slot of each sequence's pages in order and table =
    perm as (batch, pages_per_seq) int32 (what attention_with_kvcache takes). order "random" scatters
    the pages (as a serving engine's allocator ends up doing); "identity" stores them in order, so
    the pool is the contiguous cache's bytes and a paged call differs from a contiguous one only by
    its page-table reads, not by how far apart in memory consecutive pages sit."""
    n = batch * pages_per_seq
    perm = torch.randperm(n, device="cuda", generator=gen) if order == "random" else torch.arange(n, device="cuda")
    return perm, perm.view(batch, pages_per_seq).to(torch.int32)


def to_pages(x, perm, page):
    """A contiguous cache x (batch, len, heads, dim) as a page pool: its pages of `page` tokens, in
    order, stored at the pool slots `perm` (make_page_table)."""
    pool = x.new_empty(len(perm), page, *x.shape[2:])
    pool[perm] = x.reshape(-1, page, *x.shape[2:])
    return pool


def gbps(nbytes, ms):
    return None if not ms else nbytes / (ms * 1e-3) / 1e9


def fmt(value, digits=0):
    return "-" if value is None else f"{value:.{digits}f}"


def warm_clocks(torch, seconds=0.5):
    """Matmuls for `seconds`, so the first shape is not timed while the clocks ramp up from idle."""
    import time

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", default="1,8,32,64")
    p.add_argument("--cache-lens", default="1024,8192,32768,131072")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--page-order", choices=["random", "identity"], default="random",
                   help="the paged cache's page table: random slots (default) or in order (the contiguous "
                        "cache's layout; separates address translation from the page-table reads)")
    p.add_argument("--num-splits", type=int, default=0, help="hopattn's num_splits (0: its heuristic)")
    p.add_argument("--no-peers", action="store_true", help="time hopattn only")
    p.add_argument("--timer", choices=["gpu", "do_bench"], default="gpu", help="see the header")
    p.add_argument("--warm-seconds", type=float, default=0.3,
                   help="each implementation runs back to back this long at each shape before it is timed "
                        "(compare.warm_up), so a call is not timed at the clock the previous, heavier shape "
                        "left (default %(default)s; 0: the protocol of the records before session 65)")
    p.add_argument("--flush", choices=FLUSH_MODES, default="memset",
                   help="how L2 is evicted before each timed call (compare.make_l2_flush): a 256 MB memset "
                        "(default, as triton's do_bench and the records so far) leaves ~50 MB of dirty lines that "
                        "the timed call writes back to HBM while it reads; a 256 MB read leaves clean lines")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.timer == "do_bench" and args.flush != "memset":
        p.error("--flush read needs --timer gpu (do_bench flushes with a memset)")

    import torch
    import torch.nn.functional as F

    import hopattn
    from compare import make_events_timer, make_timer, warm_up

    if args.timer == "gpu":
        base_timer, timer_name = make_events_timer(torch, reps=100, warmup=10, sleep_cycles=200_000,
                                                   flush_mode=args.flush)
    else:
        base_timer, timer_name = make_timer(torch)
    if args.warm_seconds > 0:
        timer_name += f"; each implementation warmed {args.warm_seconds:g} s at each shape"

    def timer(fn):
        warm_up(torch, fn, args.warm_seconds)
        return base_timer(fn)
    warm_clocks(torch)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    hq, hk, d, page = args.heads, args.heads_kv, args.hdim, args.page_size
    item = torch.empty((), dtype=dtype).element_size()
    peers = {}
    if not args.no_peers:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            peers = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
        except ImportError as exc:
            print(f"SDPA peers not timed: {exc}", file=sys.stderr)
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for batch in common.parse_int_list(args.batches):
        for cache_len in common.parse_int_list(args.cache_lens):
            if cache_len % page:
                raise SystemExit(f"cache length {cache_len} is not a multiple of --page-size {page}")
            nbytes = kv_bytes(batch, cache_len, hk, d, item)
            row = {"batch": batch, "cache_len": cache_len, "kv_mb": nbytes / 2**20}
            q = torch.randn(batch, 1, hq, d, device="cuda", dtype=dtype, generator=gen)
            k_cache = torch.randn(batch, cache_len, hk, d, device="cuda", dtype=dtype, generator=gen)
            v_cache = torch.randn(batch, cache_len, hk, d, device="cuda", dtype=dtype, generator=gen)
            seqlens = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")

            def contiguous():
                return hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, num_splits=args.num_splits)

            ref = contiguous()
            row["hopattn_ms"] = timer(contiguous)
            # Peers: SDPA on (b, h, s, d) transposed views of the same cache (no copy).
            qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)
            for name, backend in peers.items():
                def sdpa():
                    return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)

                try:
                    with sdpa_kernel(backend):
                        diff = (sdpa().float() - ref.float()).abs().max().item()
                        row[f"{name}_ms"] = timer(sdpa)
                    row[f"{name}_max_diff"] = diff
                except Exception as exc:  # noqa: BLE001 - a peer that does not run is reported, not fatal
                    row[f"{name}_ms"] = None
                    print(f"{name} at batch {batch}, cache {cache_len}: {type(exc).__name__}: {str(exc)[:160]}",
                          file=sys.stderr)
            # Paged: the same keys in 64-token pages, placed by the page table --page-order asks for.
            perm, page_table = make_page_table(torch, batch, cache_len // page, gen, args.page_order)
            k_paged = to_pages(k_cache, perm, page)
            k_cache = kt = None  # free the contiguous copy before the second paged one exists
            v_paged = to_pages(v_cache, perm, page)
            v_cache = vt = None

            def paged():
                return hopattn.attention_with_kvcache(q, k_paged, v_paged, seqlens, page_table=page_table,
                                                      num_splits=args.num_splits)

            row["paged_max_diff"] = (paged().float() - ref.float()).abs().max().item()
            row["hopattn_paged_ms"] = timer(paged)
            k_paged = v_paged = None
            torch.cuda.empty_cache()
            for key in ("hopattn", "hopattn_paged", *peers):
                row[f"{key}_gbps"] = gbps(nbytes, row.get(f"{key}_ms"))
            rows.append(row)

    print(f"timer: {timer_name}; {args.dtype}, head_dim {d}, heads {hq}/{hk}, seqlen_q 1, page {page}; "
          f"device {torch.cuda.get_device_name()}; GB/s = K+V bytes of the cache / time")
    cols = [("hopattn", "hopattn contig"), ("hopattn_paged", f"hopattn paged{page}")] + [(n, f"SDPA {n}") for n in peers]
    print("| batch | cache | K+V MB | " + " | ".join(f"{title} µs | GB/s" for _, title in cols) + " | check |")
    print("|---:|---:|---:|" + "---:|---:|" * len(cols) + "---|")
    for r in rows:
        cells = []
        for key, _ in cols:
            ms = r.get(f"{key}_ms")
            cells += [fmt(None if ms is None else ms * 1e3, 1), fmt(r.get(f"{key}_gbps"))]
        diffs = [r["paged_max_diff"]] + [r[f"{n}_max_diff"] for n in peers if f"{n}_max_diff" in r]
        check = ("ok " if max(diffs) < 2e-2 else "BAD ") + f"{max(diffs):.1e}"
        print(f"| {r['batch']} | {r['cache_len']} | {r['kv_mb']:.0f} | " + " | ".join(cells) + f" | {check} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"timer": timer_name, "device": torch.cuda.get_device_name(),
                                               "dtype": args.dtype, "heads": hq, "heads_kv": hk, "hdim": d,
                                               "page_size": page, "page_order": args.page_order, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
