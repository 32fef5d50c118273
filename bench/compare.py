# Side-by-side forward and/or backward benchmark in one process: hopattn vs torch SDPA
# (FlashAttention-2 and cuDNN backends) vs FlashAttention-3 when importable, over a 16k-token /
# hidden-2048 grid. Writes JSON, PNG and a markdown table (also printed last) per direction
# (fwd-<date>[-tag].* and bwd-<date>[-tag].*) for docs/BENCHMARKS.md. GPU machine only.
#   --direction fwd (default): times the forward; checks hopattn's output against a peer's.
#   --direction bwd: runs each forward once with autograd, then times only
#     torch.autograd.grad(out, (q, k, v), dout, retain_graph=True); TFLOP/s from 2.5x the forward
#     FLOPs; checks every implementation's dq, dk, dv against an fp32 math reference.
#   --direction both: the two, one after the other, each with its own files.
#   --direction fp8: hopattn's FP8 forward (fp8-<date>[-tag].*): attention_fp8 end to end (rotate and
#     quantise Q, K, V, then the kernel), forward_fp8 on pre-quantised inputs (V re-layout + kernel),
#     quantize_fp8 alone (GB/s), hopattn's bf16 forward and the bf16 peers (and FA3's FP8 path when
#     importable); TFLOP/s with FP8 FLOPs counted as bf16 ones; checks the FP8 outputs against a peer.
import argparse
import datetime
import gc
import json
import math
import statistics
import sys
import time
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
# Score-sized fp32 tensor budget of the chunked backward reference (it peaks at about five of them).
REF_CHUNK_BYTES = 1 << 30


def _one_int(text):
    values = common.parse_int_list(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one integer (1k-style suffix allowed), got {text!r}")
    return values[0]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="hopattn vs SDPA flash / cuDNN / FA3 forward and backward benchmark")
    p.add_argument("--direction", choices=["fwd", "bwd", "both", "fp8"], default="fwd",
                   help="time the forward (default), the backward (autograd.grad only), or both; "
                        "each direction writes its own fwd-/bwd- files; fp8: hopattn's FP8 forward "
                        "against the bf16 forwards (fp8- files)")
    p.add_argument("--hdims", default=None, help="comma list, e.g. 64,128 (default 64,128,256)")
    p.add_argument("--seqlens", default=None, help="comma list, e.g. 512,1k,16k (default 512..16k)")
    p.add_argument("--causal", choices=["0", "1", "both"], default="both")
    p.add_argument("--quick", action="store_true", help=f"hdims {common.QUICK_HEAD_DIMS}, seqlens {common.QUICK_SEQLENS}")
    p.add_argument("--out-dir", default=str(REPO_ROOT / "docs" / "bench"))
    p.add_argument("--tag", default=None, help="appended to the output file names")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--warm-seconds", type=float, default=1.0,
                   help="each implementation runs back to back this long before it is timed, so it is timed "
                        "in the power-capped state it sustains (default %(default)s; 0: off, the protocol "
                        "before 2026-12-02)")
    p.add_argument("--bwd-ref-max-seqlen", type=_one_int, default=common.ALL_SEQLENS[-1],
                   help="backward check: fp32 math reference up to this seqlen (default %(default)s, i.e. the "
                        "whole grid; it is chunked, a few GiB at most); above it, against cuDNN's (or FA2's) gradients")
    return p.parse_args(argv)


# --- timing -----------------------------------------------------------------------------------------


def flushed_call_times(torch, fn, reps, flush, sleep=None, sleep_cycles=0):
    """Milliseconds of each of `reps` calls of fn, CUDA events around each call, with flush() (an L2
    flush, make_l2_flush) before each, and then sleep(sleep_cycles) if sleep is given."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush()
        if sleep is not None:
            sleep(sleep_cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


FLUSH_MODES = ("memset", "read")


def make_l2_flush(torch, mode="memset", nbytes=256 << 20):
    """A function that evicts L2 (50 MB on H100 and H200) by touching nbytes of a buffer. "memset"
    writes it (triton's do_bench does): L2 is then full of dirty lines, written back to HBM while the
    next kernel reads, which charges a memory-bound call with up to L2's size of writes (H100
    decode, session 66: 0.8 us at 4 MB read, 4.4 us at 32 MB, 9-15 us from 128 MB). "read" sums it
    instead, leaving L2 full of clean lines: the call then pays for its own traffic only."""
    if mode not in FLUSH_MODES:
        raise ValueError(f"flush mode {mode!r} is not one of {FLUSH_MODES}")
    buf = torch.zeros(nbytes // 4, dtype=torch.float32, device="cuda")
    return buf.zero_ if mode == "memset" else buf.sum


def make_events_timer(torch, reps=30, warmup=5, sleep_cycles=0, flush_mode="memset"):
    """Median ms of fn over `reps` calls after `warmup`, CUDA events around each call, with L2 flushed
    (make_l2_flush: a 256 MB memset, or a 256 MB read) before each. sleep_cycles > 0:
    torch.cuda._sleep that long after the flush, so the GPU stays ahead of the host and the events
    time the call's GPU work alone (for calls shorter than their host cost; bench/decode.py)."""
    flush = make_l2_flush(torch, flush_mode)
    sleep = getattr(torch.cuda, "_sleep", None) if sleep_cycles > 0 else None

    def events_median(fn):
        for _ in range(warmup):
            fn()
        return statistics.median(flushed_call_times(torch, fn, reps, flush, sleep, sleep_cycles))

    name = (f"CUDA events, L2 flush ({flush_mode}){' + sleep' if sleep else ''} before each call, "
            f"median of {reps} after {warmup} warm-up runs")
    if sleep_cycles > 0 and sleep is None:
        name += " (no torch.cuda._sleep)"
    return events_median, name


def power_burn(torch, seconds):
    """Keeps the GPU busy with 8192^3 bf16 matmuls for `seconds`: takes it out of idle before the
    first point."""
    if seconds <= 0:
        return
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    warm_up(torch, lambda: torch.mm(a, a, out=c), seconds)


def warm_up(torch, fn, seconds):
    """Calls fn back to back for `seconds` (synchronising every four calls) and returns how many
    calls ran. The H200 draws its 700 W cap under every attention kernel here, and its power
    controller settles the SM clock only after a few hundred ms of load: a kernel timed right
    after an idle spell runs at the boost clock and reads up to ~10% high, and one timed right
    after a heavier kernel (a matmul burn) starts at that kernel's lower clock and reads low
    (perf-notes "The run-to-run spread is the power controller's"). After its own warm-up each
    implementation is timed in the state it sustains, as in a training or serving job."""
    calls = 0
    if seconds <= 0:
        return calls
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(4):
            fn()
        calls += 4
        torch.cuda.synchronize()
    return calls


def make_timer(torch, warm_seconds=0.0):
    """Median milliseconds of fn: triton's do_bench (flushes L2 between runs) if triton imports,
    else make_events_timer's CUDA events with the same L2 flush. warm_seconds > 0: fn runs back to
    back that long first (warm_up)."""
    try:
        from triton.testing import do_bench

        timer, name = (lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median")), "triton.testing.do_bench median"
    except ImportError:
        timer, name = make_events_timer(torch)
    if warm_seconds <= 0:
        return timer, name

    def warmed(fn):
        warm_up(torch, fn, warm_seconds)
        return timer(fn)

    return warmed, f"{name}, after {warm_seconds:g} s of the same calls back to back"


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


def time_impls(impls, runnable, timer, flops, row):
    """Times each runnable impl's fn() under its context into row["ms"] / row["tflops"] (None where
    it is not runnable or fails; the error goes to row["errors"])."""
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
    time_impls(impls, runnable, timer, flops, row)
    del q, k, v
    return row


def reference_grads_fp32(torch, q, k, v, dout, causal, budget_bytes=REF_CHUNK_BYTES):
    """dq, dk, dv of exact softmax attention in fp32 (plain matmuls + softmax, torch autograd, TF32
    off) from the bf16 q, k, v, dout in (b, s, h, d) layout; returned as fp32 (b, s, h, d) views.
    Chunked over the batch*heads slices so the (s, s) score matrices stay within budget_bytes each
    (peak about 5x that, at most ~6 GiB at seqlen 16k). seqlen_q == seqlen_k here, so causal's
    top-left and bottom-right alignments agree."""
    b, s, h, d = q.shape
    scale = 1.0 / math.sqrt(d)

    def flat(t):
        return t.detach().transpose(1, 2).reshape(b * h, s, d).float()

    qf, kf, vf, df = (flat(t) for t in (q, k, v, dout))
    dq, dk, dv = (torch.empty_like(qf) for _ in range(3))
    mask = torch.ones((s, s), dtype=torch.bool, device=q.device).triu_(1) if causal else None
    chunk = common.reference_chunk_slices(b * h, s, s, budget_bytes)
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.enable_grad():
            for i in range(0, b * h, chunk):
                j = min(i + chunk, b * h)
                qc, kc, vc = (t[i:j].detach().requires_grad_() for t in (qf, kf, vf))
                scores = torch.matmul(qc, kc.transpose(1, 2)) * scale
                if mask is not None:
                    scores = scores.masked_fill(mask, float("-inf"))
                out = torch.matmul(torch.softmax(scores, dim=-1), vc)
                del scores
                gq, gk, gv = torch.autograd.grad(out, (qc, kc, vc), df[i:j])
                dq[i:j], dk[i:j], dv[i:j] = gq, gk, gv
                del out, gq, gk, gv, qc, kc, vc
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    del qf, kf, vf, df, mask
    return tuple(t.view(b, h, s, d).transpose(1, 2) for t in (dq, dk, dv))


def bench_point_bwd(torch, impls, timer, point, ref_max_seqlen, hopattn_bwd_built=True):
    """One grid point of the backward: each implementation's forward once with autograd, its
    gradients checked, then only torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    timed, under the same SDPA backend context as the forward."""
    b, s, h, d, causal = point["batch"], point["seqlen"], point["heads"], point["head_dim"], point["causal"]
    flops = common.attention_bwd_flops(b, h, s, s, d, causal)
    gen = torch.Generator(device="cuda").manual_seed(4321 + s + d)
    q, k, v, dout = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()

    row = dict(point, flops=flops, ms={}, tflops={}, errors={})
    runnable, grads = {}, {}
    # 1. Forward with autograd (untimed) and one untimed backward each: a peer that cannot run this
    #    shape is recorded, not fatal.
    for name, build in impls.items():
        try:
            fwd, context = build(q, k, v, causal)
            with context(), torch.enable_grad():
                out = fwd()

            def bwd(out=out, inputs=(q, k, v), dout=dout):
                return torch.autograd.grad(out, inputs, dout, retain_graph=True)

            with context():
                grads[name] = bwd()
            torch.cuda.synchronize()  # surfaces asynchronous launch errors here, inside the try
            runnable[name] = (bwd, context)
        except Exception as exc:
            row["errors"][name] = short_error(exc)
            grads.pop(name, None)
        out = fwd = bwd = None  # the graph lives on only in runnable

    # 2. Every implementation's dq, dk, dv against the fp32 reference (or, above ref_max_seqlen or if
    #    the reference fails, against cuDNN's, else FA2's).
    ref, against = None, None
    if grads and s <= ref_max_seqlen:
        try:
            ref = reference_grads_fp32(torch, q, k, v, dout, causal)
            torch.cuda.synchronize()
        except Exception as exc:
            row["errors"]["reference"] = short_error(exc)
            ref = None
            torch.cuda.empty_cache()
    if ref is None:
        against = next((n for n in ("cudnn", "fa2") if n in grads), None)
        ref = grads.get(against)
    errors = {}
    if ref is not None:
        for name, got in grads.items():
            if name != against:
                errors[name] = {g: rel_l2(x, y) for g, x, y in zip(common.GRAD_NAMES, got, ref)}
    row["check_rel_l2"], row["check_against"] = errors, (against or "fp32 reference") if ref is not None else None
    check = common.summarize_grad_check(errors, CHECK_REL_L2, against)
    if "hopattn" not in grads:
        missing = "hopattn failed" if hopattn_bwd_built else "hopattn bwd not built"
        check = missing if check in ("ok", "unchecked") or check.startswith("ok vs ") else f"{missing}; {check}"
    row["check"] = check
    del ref
    grads.clear()

    # 3. Timing of the backward alone, with the SDPA backend choice active.
    time_impls(impls, runnable, timer, flops, row)
    runnable.clear()
    del q, k, v, dout
    return row


# --- FP8 ---------------------------------------------------------------------------------------------
# Column keys of --direction fp8, in order, with their headers. FA3's FP8 path only when importable.
FP8_HEADERS = {
    "fp8_e2e": "hopattn FP8",
    "fp8_kernel": "hopattn FP8 kernel",
    "fp8_pv16": "hopattn FP8 16-bit PV",  # attention_fp8(quantize_v=False): only Q K^T in e4m3
    "hopattn": "hopattn bf16",
    "cudnn": "cuDNN",
    "fa2": "FA2 (SDPA flash)",
    "fa3_fp8": "FA3 FP8",
}
# attention_fp8 against a bf16 peer: FP8 rounding of Q, K, V and P gives about 5% relative L2 on
# N(0, 1) inputs (tests/python/test_fp8.py bounds it by 6e-2 against fp64).
FP8_CHECK_REL_L2 = 1e-1
# forward_fp8 on quantize_fp8's output is judged against the same peer and bound: from 8k keys at
# d128 attention_fp8 quantises K in 224-row blocks (heuristics::fp8_key_tile) and forward_fp8 in
# 128-row ones, so the two round differently (about 4e-2 apart) and neither is the other's reference.
E4M3_MAX = 448.0
FP8_BLOCK_ROWS = 128


def fp8_quantize_bytes(batch, seqlen, heads, head_dim, in_bytes=2, block_quant=True):
    """Bytes quantize_fp8 moves: the 16-bit input read once, e4m3 codes and fp32 descales written."""
    n = batch * seqlen * heads * head_dim
    nblocks = -(-seqlen // FP8_BLOCK_ROWS) if block_quant else 1
    return n * in_bytes + n + 4 * batch * heads * nblocks


def gb_per_s(nbytes, ms):
    return None if ms is None or ms <= 0 else nbytes / (ms * 1e-3) / 1e9


def fp8_markdown_table(rows, impls):
    """rows as bench_point_fp8 returns them; impls: FP8_HEADERS keys that have a column. TFLOP/s
    (FP8 FLOPs counted as bf16 ones), then quantize_fp8's GB/s, the FP8 end-to-end speed against
    cuDNN and against hopattn bf16, and the check."""
    headers = ["hdim", "causal", "seqlen", "batch", "heads"] + [FP8_HEADERS[i] for i in impls]
    headers += ["quantize_fp8 GB/s", "FP8/cuDNN", "FP8/bf16", "check"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers[:-1]) + "|:---|"]
    for r in rows:
        tf = r["tflops"]
        cells = [str(r["head_dim"]), "yes" if r["causal"] else "no", common.format_seqlen(r["seqlen"]), str(r["batch"]),
                 str(r["heads"])]
        cells += [common.format_tflops(tf.get(i)) for i in impls]
        cells.append(common.format_tflops(r.get("quantize_gbps"), digits=0))
        for peer in ("cudnn", "hopattn"):
            rel = common.ratio(tf.get("fp8_e2e"), tf.get(peer))
            cells.append("n/a" if rel is None else f"{rel:.2f}x")
        cells.append(r.get("check", "unchecked"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fp8_report(timer_name, env, table):
    """The .md file of --direction fp8: what was timed, the environment line, the table."""
    head = (f"FP8 forward, bf16 inputs, {common.TOTAL_TOKENS} tokens, hidden {common.HIDDEN}; TFLOP/s with FP8 FLOPs "
            f"counted as bf16 ones ({timer_name}). hopattn FP8 = attention_fp8 end to end (rotate and quantise Q, K, "
            "V, then the kernel); hopattn FP8 kernel = forward_fp8 on pre-quantised inputs (V re-layout + kernel); "
            "quantize_fp8 GB/s = (bf16 read + e4m3 and descales written) / time, for q alone; FP8/cuDNN and "
            "FP8/bf16 compare hopattn FP8 end to end with cuDNN and hopattn bf16.\n")
    head += (f"Check: attention_fp8, and forward_fp8 on quantize_fp8's output, against a bf16 peer, rel L2 <= "
             f"{FP8_CHECK_REL_L2:g} each.\n")
    head += (f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
             f"hopattn {env['hopattn_version']}.\n")
    return f"{head}\n{table}\n"


def fp8_output_stem(out_dir, date=None, tag=None):
    """docs/bench/fp8-<date>[-<tag>]; the caller appends .json/.md/.png."""
    date = date or datetime.date.today().isoformat()
    return Path(out_dir) / (f"fp8-{date}" + (f"-{tag}" if tag else ""))


def fp8_check(errors, ref_name):
    """The check cell from {"fp8_e2e": .., "fp8_kernel": .., "fp8_pv16": ..}, each the rel L2
    against the peer (fp8_pv16 absent when the library predates quantize_v)."""
    bad = []
    for key, call in (("fp8_e2e", "attention_fp8"), ("fp8_kernel", "forward_fp8"),
                      ("fp8_pv16", "attention_fp8(quantize_v=False)")):
        err = errors.get(key)
        if err is not None and not (math.isfinite(err) and err <= FP8_CHECK_REL_L2):
            bad.append(f"{call} {err:.1e} vs {FP8_HEADERS.get(ref_name, ref_name)}")
    if bad:
        return "MISMATCH " + ", ".join(bad)
    return "ok" if errors.get("fp8_e2e") is not None else "unchecked"


def quantize_per_tensor(torch, x):
    """(x_e4m3, descale) with one scale for the whole tensor (|max| -> 448); descale 0-dim fp32."""
    xf = x.float()
    amax = xf.abs().amax().clamp_min(torch.finfo(torch.float32).tiny)
    return (xf * (E4M3_MAX / amax)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), amax / E4M3_MAX


def quantize_v_per_head(torch, v):
    """V as attention_fp8 quantises it: one scale per (batch, kv head); descale (batch, heads_kv)."""
    vf = v.float()
    amax = vf.abs().amax(dim=(1, 3)).clamp_min(torch.finfo(torch.float32).tiny)
    v8 = (vf * (E4M3_MAX / amax)[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return v8, (amax / E4M3_MAX).contiguous()


def make_fp8_impls(torch):
    """FP8_HEADERS keys -> build(q, k, v, causal) -> (fn, context), as make_impls. The FP8 builds
    quantise outside fn (untimed) where the timed call takes pre-quantised inputs."""
    import hopattn

    bf16 = make_impls(torch)

    def e2e(q, k, v, causal):
        return (lambda: hopattn.attention_fp8(q, k, v, causal=causal)), _NoContext

    def kernel(q, k, v, causal):
        q8, qd = hopattn.quantize_fp8(q)  # seed 0, as attention_fp8's default
        k8, kd = hopattn.quantize_fp8(k)
        v8, vd = quantize_v_per_head(torch, v)
        return (lambda: hopattn.forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal)), _NoContext

    def pv16(q, k, v, causal):
        return (lambda: hopattn.attention_fp8(q, k, v, causal=causal, quantize_v=False)), _NoContext

    impls = {"fp8_e2e": e2e, "fp8_kernel": kernel, "fp8_pv16": pv16}
    impls.update({name: bf16[name] for name in ("hopattn", "cudnn", "fa2")})
    try:
        import flash_attn_interface  # FlashAttention-3 (hopper/ build of flash-attention)

        def fa3_fp8(q, k, v, causal):
            b, hkv = k.shape[0], k.shape[2]
            (q8, qd), (k8, kd), (v8, vd) = (quantize_per_tensor(torch, t) for t in (q, k, v))

            def call(shape):
                descales = [d.reshape(1, 1).expand(*shape).contiguous() if len(shape) == 2 else d.reshape(1)
                            for d in (qd, kd, vd)]

                def fn():
                    result = flash_attn_interface.flash_attn_func(
                        q8, k8, v8, causal=causal, q_descale=descales[0], k_descale=descales[1], v_descale=descales[2])
                    return result[0] if isinstance(result, tuple) else result

                return fn

            fn = call((b, hkv))  # descales per (batch, kv head) in current FA3
            try:
                fn()
            except Exception:  # older FA3: one descale per tensor
                fn = call((1,))
            return fn, _NoContext

        impls["fa3_fp8"] = fa3_fp8
    except ImportError:
        pass
    return impls


def bench_point_fp8(torch, impls, timer, point):
    """One grid point of --direction fp8: every implementation once (untimed, outputs kept for the
    check), the checks, then the timings and quantize_fp8's alone."""
    import hopattn

    b, s, h, d, causal = point["batch"], point["seqlen"], point["heads"], point["head_dim"], point["causal"]
    flops = common.attention_flops(b, h, s, s, d, causal)
    gen = torch.Generator(device="cuda").manual_seed(1234 + s + d)
    q, k, v = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    row = dict(point, flops=flops, ms={}, tflops={}, errors={})
    runnable, outputs = {}, {}
    for name, build in impls.items():
        try:
            fn, context = build(q, k, v, causal)
            with context():
                outputs[name] = fn()
            torch.cuda.synchronize()
            runnable[name] = (fn, context)
        except Exception as exc:
            row["errors"][name] = short_error(exc)
            outputs.pop(name, None)

    ref_name = next((n for n in ("cudnn", "fa2", "hopattn") if n in outputs), None)
    errors = {}
    if "fp8_e2e" in outputs and ref_name is not None:
        errors["fp8_e2e"] = rel_l2(outputs["fp8_e2e"], outputs[ref_name])
    for key in ("fp8_kernel", "fp8_pv16"):
        if key in outputs and ref_name is not None:
            errors[key] = rel_l2(outputs[key], outputs[ref_name])
    if "fa3_fp8" in outputs and ref_name is not None:
        errors["fa3_fp8"] = rel_l2(outputs["fa3_fp8"], outputs[ref_name])  # recorded, not judged
    row["check_rel_l2"], row["check_against"] = errors, ref_name
    row["check"] = "hopattn fp8 failed" if "fp8_e2e" not in outputs else fp8_check(errors, ref_name)
    outputs.clear()

    time_impls(impls, runnable, timer, flops, row)
    row["quantize_ms"] = row["quantize_gbps"] = None
    try:
        row["quantize_ms"] = timer(lambda x=q: hopattn.quantize_fp8(x))
        row["quantize_gbps"] = gb_per_s(fp8_quantize_bytes(b, s, h, d), row["quantize_ms"])
    except Exception as exc:
        row["errors"]["quantize_fp8"] = short_error(exc)
    runnable.clear()
    del q, k, v
    return row


def run_fp8(torch, impls, timer, timer_name, env, grid, args):
    """--direction fp8 over the grid; writes fp8-<date>[-tag].json/.md/.png; returns the rows."""
    impl_names = list(impls)
    rows = []
    for point in grid:
        try:
            row = bench_point_fp8(torch, impls, timer, point)
        except Exception as exc:
            traceback.print_exc()
            row = dict(point, flops=None, ms={}, tflops={n: None for n in impls}, errors={"all": short_error(exc)},
                       check="error", quantize_gbps=None)
        rows.append(row)
        gc.collect()
        torch.cuda.empty_cache()
        cells = "  ".join(f"{n}={common.format_tflops(row['tflops'].get(n))}" for n in impls)
        print(f"fp8 hdim={point['head_dim']:<3} causal={int(point['causal'])} seqlen={point['seqlen']:<5} {cells}  "
              f"TFLOP/s  quantize={common.format_tflops(row.get('quantize_gbps'), digits=0)} GB/s  check={row['check']}",
              flush=True)
        for name, err in row.get("errors", {}).items():
            print(f"    {name}: {err}", flush=True)

    stem = fp8_output_stem(args.out_dir, tag=args.tag)
    stem.parent.mkdir(parents=True, exist_ok=True)
    table = fp8_markdown_table(rows, impl_names)
    result = dict(env, direction="fp8", dtype="bf16 inputs, FP8 e4m3 compute",
                  flops="FP8 FLOPs counted as bf16: 4 b h s^2 d, halved when causal",
                  headers={n: FP8_HEADERS[n] for n in impl_names}, rows=rows)
    Path(f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    Path(f"{stem}.md").write_text(fp8_report(timer_name, env, table))
    written = [f"{stem}.json", f"{stem}.md"]
    if not args.no_plot:
        try:
            from plot import plot_rows

            for name in impl_names:  # plot labels come from common.IMPL_HEADERS
                common.IMPL_HEADERS.setdefault(name, FP8_HEADERS[name])
            plot_rows(rows, impl_names, f"{stem}.png", title=f"{env['device']}, FP8 forward (bf16 peers)")
            written.append(f"{stem}.png")
        except Exception as exc:
            print(f"plot skipped: {short_error(exc)}", file=sys.stderr)
    print("wrote " + ", ".join(written), flush=True)
    print()
    print(table)
    return rows


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
    if "fa3" in impl_names or "fa3_fp8" in impl_names:
        import flash_attn_interface

        env["fa3"] = getattr(flash_attn_interface, "__version__", "unknown")
    return env


def run_direction(torch, direction, impls, timer, timer_name, env, grid, args):
    """Runs the grid for one direction and writes its JSON / markdown / PNG; returns the rows."""
    impl_names = list(impls)
    built = set(env.get("hopattn_build") or [])
    grid_max_seqlen = max(p["seqlen"] for p in grid)
    title = common.DIRECTION_TITLES[direction]
    both = args.direction == "both"
    if both:
        print(f"## {title}", flush=True)
    prefix = "" if direction == "fwd" else f"{direction} "  # a forward-only run prints as it always did
    rows = []
    for point in grid:
        try:
            if direction == "fwd":
                row = bench_point(torch, impls, timer, point)
            else:
                row = bench_point_bwd(torch, impls, timer, point, args.bwd_ref_max_seqlen,
                                      hopattn_bwd_built=f"bwd:bf16:{point['head_dim']}" in built)
        except Exception as exc:  # e.g. input allocation failed: keep the rest of the grid
            traceback.print_exc()
            row = dict(point, flops=None, ms={}, tflops={n: None for n in impls}, errors={"all": short_error(exc)}, check="error")
        rows.append(row)
        gc.collect()  # drops any autograd graph left in a traceback before the allocator is trimmed
        torch.cuda.empty_cache()
        cells = "  ".join(f"{n}={common.format_tflops(row['tflops'].get(n))}" for n in impls)
        print(f"{prefix}hdim={point['head_dim']:<3} causal={int(point['causal'])} seqlen={point['seqlen']:<5} "
              f"{cells}  TFLOP/s  check={row['check']}", flush=True)
        for name, err in row.get("errors", {}).items():
            print(f"    {name}: {err}", flush=True)

    stem = common.output_stem(args.out_dir, tag=args.tag, direction=direction)
    stem.parent.mkdir(parents=True, exist_ok=True)
    table = common.markdown_table(rows, impl_names)
    result = dict(env, rows=rows)
    check_note = None
    if direction == "bwd":
        check_note = common.bwd_check_note(args.bwd_ref_max_seqlen, grid_max_seqlen, CHECK_REL_L2)
        result = dict(env, direction="bwd", flops="backward = 2.5 x forward (FlashAttention convention)",
                      timed="torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)",
                      check_reference=check_note, bwd_ref_max_seqlen=args.bwd_ref_max_seqlen, rows=rows)
    Path(f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    Path(f"{stem}.md").write_text(common.markdown_report(direction, timer_name, env, table, check_note))
    written = [f"{stem}.json", f"{stem}.md"]
    if not args.no_plot:
        try:
            from plot import plot_rows

            plot_rows(rows, impl_names, f"{stem}.png", title=f"{env['device']}, bf16 {title.lower()}")
            written.append(f"{stem}.png")
        except Exception as exc:  # matplotlib missing must not lose the measurements
            print(f"plot skipped: {short_error(exc)}", file=sys.stderr)
    print("wrote " + ", ".join(written), flush=True)
    print()
    if check_note:
        print(check_note)
    print(table)
    if both:
        print()
    return rows


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/compare.py needs a CUDA GPU")
    head_dims = common.parse_int_list(args.hdims) if args.hdims else (common.QUICK_HEAD_DIMS if args.quick else common.ALL_HEAD_DIMS)
    seqlens = common.parse_int_list(args.seqlens) if args.seqlens else (common.QUICK_SEQLENS if args.quick else common.ALL_SEQLENS)
    grid = common.shape_grid(head_dims, seqlens, common.causal_modes_from_arg(args.causal))

    impls = make_fp8_impls(torch) if args.direction == "fp8" else make_impls(torch)
    timer, timer_name = make_timer(torch, args.warm_seconds)
    env = environment(torch, timer_name, list(impls))
    print(f"# {env['device']}  torch {env['torch']}  cuDNN {env['cudnn']}  hopattn {env['hopattn_version']}  "
          f"impls {list(impls)}  timing: {timer_name}", flush=True)

    power_burn(torch, 2.0 if args.warm_seconds > 0 else 0.0)  # out of idle before the first point
    if args.direction == "fp8":
        rows = run_fp8(torch, impls, timer, timer_name, env, grid, args)
        return 0 if all(common.check_passed(r["check"]) for r in rows) else 1
    rows = []
    for direction in common.directions_from_arg(args.direction):
        rows += run_direction(torch, direction, impls, timer, timer_name, env, grid, args)
    return 0 if all(common.check_passed(r["check"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
