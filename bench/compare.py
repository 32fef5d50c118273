# Side-by-side forward benchmark in one process: hopattn vs torch SDPA (FlashAttention-2 and cuDNN
# backends) vs FlashAttention-3 when importable, over a 16k-token / hidden-2048 grid. Writes JSON,
# PNG and a markdown table (also printed last) for docs/BENCHMARKS.md. GPU machine only.
import argparse
import datetime
import json
import math
import statistics
import sys
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

# An installed hopattn wins; otherwise this checkout's python/ (with $HOPATTN_LIBRARY set).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))

CHECK_REL_L2 = 2e-2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="hopattn vs SDPA flash / cuDNN / FA3 forward benchmark")
    p.add_argument("--hdims", default=None, help="comma list, e.g. 64,128 (default 64,128,256)")
    p.add_argument("--seqlens", default=None, help="comma list, e.g. 512,1k,16k (default 512..16k)")
    p.add_argument("--causal", choices=["0", "1", "both"], default="both")
    p.add_argument("--quick", action="store_true", help=f"hdims {common.QUICK_HEAD_DIMS}, seqlens {common.QUICK_SEQLENS}")
    p.add_argument("--out-dir", default=str(REPO_ROOT / "docs" / "bench"))
    p.add_argument("--tag", default=None, help="appended to the output file names")
    p.add_argument("--no-plot", action="store_true")
    return p.parse_args(argv)


# --- timing -----------------------------------------------------------------------------------------


def make_timer(torch):
    """Median milliseconds of fn: triton's do_bench (flushes L2 between runs) if triton imports,
    else CUDA events around each of 30 runs after warm-up, with the same L2 flush."""
    try:
        from triton.testing import do_bench

        return (lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median")), "triton.testing.do_bench median"
    except ImportError:
        pass
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def events_median(fn):
        for _ in range(5):
            fn()
        times = []
        for _ in range(30):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    return events_median, "CUDA events, median of 30 after 5 warm-up runs"


# --- implementations --------------------------------------------------------------------------------
# Each make_* returns fn() -> out in (b, s, h, d) layout, plus a context manager factory to time
# it under (the SDPA backend choice must be active while the timed calls run).


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def make_impls(torch):
    import hopattn

    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def build(q, k, v, causal):
            # Transposed views of the (b, s, h, d) buffers: SDPA's flash/cuDNN kernels read this
            # layout without a copy, so every implementation sees the same memory.
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

            # is_causal is top-left aligned in SDPA; with seqlen_q == seqlen_k (always, here) that
            # equals hopattn's bottom-right alignment.
            def fn():
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)

            return fn, lambda: sdpa_kernel(backend)

        return build

    def hop(q, k, v, causal):
        return (lambda: hopattn.attention(q, k, v, causal=causal)), _NoContext

    impls = {"hopattn": hop, "fa2": sdpa(SDPBackend.FLASH_ATTENTION), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    try:
        import flash_attn_interface  # FlashAttention-3 (hopper/ build of flash-attention)

        def fa3(q, k, v, causal):
            def fn():
                result = flash_attn_interface.flash_attn_func(q, k, v, causal=causal)
                return result[0] if isinstance(result, tuple) else result  # some versions return (out, lse)

            return fn, _NoContext

        impls["fa3"] = fa3
    except ImportError:
        pass
    return impls


def rel_l2(got, want):
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm()).item()


def short_error(exc):
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


# --- the run ------------------------------------------------------------------------------------------


def bench_point(torch, impls, timer, point):
    b, s, h, d, causal = point["batch"], point["seqlen"], point["heads"], point["head_dim"], point["causal"]
    flops = common.attention_flops(b, h, s, s, d, causal)
    gen = torch.Generator(device="cuda").manual_seed(1234 + s + d)
    q, k, v = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    row = dict(point, flops=flops, ms={}, tflops={}, errors={})
    runnable, outputs = {}, {}
    # 1. One untimed call each: a peer that cannot run this shape is recorded, not fatal.
    for name, build in impls.items():
        try:
            fn, context = build(q, k, v, causal)
            with context():
                outputs[name] = fn()
            torch.cuda.synchronize()  # surfaces asynchronous launch errors here, inside the try
            runnable[name] = (fn, context)
        except Exception as exc:
            row["errors"][name] = short_error(exc)
            outputs.pop(name, None)

    # 2. hopattn's output against FA2's (cuDNN's, then FA3's, if FA2 failed) on the same inputs.
    ref_name = next((n for n in ("fa2", "cudnn", "fa3") if n in outputs), None)
    if "hopattn" not in outputs:
        row["check"] = "hopattn failed"
    elif ref_name is None:
        row["check"] = "unchecked"
    else:
        err = rel_l2(outputs["hopattn"], outputs[ref_name])
        row["check_rel_l2"], row["check_against"] = err, ref_name
        row["check"] = "ok" if math.isfinite(err) and err < CHECK_REL_L2 else f"MISMATCH ({err:.1e})"
    outputs.clear()

    # 3. Timing, with the SDPA backend choice active while the timed calls run.
    for name in impls:
        ms = None
        if name in runnable:
            fn, context = runnable[name]
            try:
                with context():
                    ms = timer(fn)
            except Exception as exc:
                row["errors"][name] = short_error(exc)
        row["ms"][name] = ms
        row["tflops"][name] = common.tflops_per_s(flops, ms)
    del q, k, v
    return row


def environment(torch, timer_name, impl_names):
    import hopattn

    env = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "hopattn_version": hopattn.version(),
        "hopattn_build": hopattn.build_info()["instantiations"],
        "commit": common.git_commit(REPO_ROOT),
        "timing": timer_name,
        "dtype": "bf16",
        "total_tokens": common.TOTAL_TOKENS,
        "hidden": common.HIDDEN,
        "impls": impl_names,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if "fa3" in impl_names:
        import flash_attn_interface

        env["fa3"] = getattr(flash_attn_interface, "__version__", "unknown")
    return env


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/compare.py needs a CUDA GPU")
    head_dims = common.parse_int_list(args.hdims) if args.hdims else (common.QUICK_HEAD_DIMS if args.quick else common.ALL_HEAD_DIMS)
    seqlens = common.parse_int_list(args.seqlens) if args.seqlens else (common.QUICK_SEQLENS if args.quick else common.ALL_SEQLENS)
    grid = common.shape_grid(head_dims, seqlens, common.causal_modes_from_arg(args.causal))

    impls = make_impls(torch)
    timer, timer_name = make_timer(torch)
    env = environment(torch, timer_name, list(impls))
    print(f"# {env['device']}  torch {env['torch']}  cuDNN {env['cudnn']}  hopattn {env['hopattn_version']}  "
          f"impls {list(impls)}  timing: {timer_name}", flush=True)

    rows = []
    for point in grid:
        try:
            row = bench_point(torch, impls, timer, point)
        except Exception as exc:  # e.g. input allocation failed: keep the rest of the grid
            traceback.print_exc()
            row = dict(point, flops=None, ms={}, tflops={n: None for n in impls}, errors={"all": short_error(exc)}, check="error")
        rows.append(row)
        cells = "  ".join(f"{n}={common.format_tflops(row['tflops'].get(n))}" for n in impls)
        print(f"hdim={point['head_dim']:<3} causal={int(point['causal'])} seqlen={point['seqlen']:<5} "
              f"{cells}  TFLOP/s  check={row['check']}", flush=True)
        for name, err in row.get("errors", {}).items():
            print(f"    {name}: {err}", flush=True)

    stem = common.output_stem(args.out_dir, tag=args.tag)
    stem.parent.mkdir(parents=True, exist_ok=True)
    table = common.markdown_table(rows, list(impls))
    Path(f"{stem}.json").write_text(json.dumps(dict(env, rows=rows), indent=1) + "\n")
    Path(f"{stem}.md").write_text(
        f"Forward, bf16, {common.TOTAL_TOKENS} tokens, hidden {common.HIDDEN}; TFLOP/s ({timer_name}).\n"
        f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
        f"hopattn {env['hopattn_version']}.\n\n{table}\n"
    )
    written = [f"{stem}.json", f"{stem}.md"]
    if not args.no_plot:
        try:
            from plot import plot_rows

            plot_rows(rows, list(impls), f"{stem}.png", title=f"{env['device']}, bf16 forward")
            written.append(f"{stem}.png")
        except Exception as exc:  # matplotlib missing must not lose the measurements
            print(f"plot skipped: {short_error(exc)}", file=sys.stderr)
    print("wrote " + ", ".join(written), flush=True)
    print()
    print(table)
    return 0 if all(r["check"] in ("ok", "unchecked") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
