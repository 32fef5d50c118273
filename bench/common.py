# Pure helpers of the Python benchmark (bench/compare.py): the shape grid, the FLOP counts (forward
# and backward), the gradient-check summary, the file names and the markdown table. No torch here,
# so tests/python/test_bench_helpers.py checks them on any machine.
import datetime
import math
import os
import subprocess
from pathlib import Path

TOTAL_TOKENS = 16384
HIDDEN = 2048
ALL_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
ALL_HEAD_DIMS = [64, 128, 256]
QUICK_SEQLENS = [512, 2048, 8192]
QUICK_HEAD_DIMS = [128]

# Implementation keys in column order, with the table headers. FA3 appears only when importable.
IMPL_HEADERS = {
    "hopattn": "hopattn",
    "fa2": "FA2 (SDPA flash)",
    "cudnn": "cuDNN",
    "fa3": "FA3",
}


def attention_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal):
    """Forward FLOPs: two matmuls (QK^T and PV) of 2*sq*sk*d each per head; causal does half."""
    flops = 4 * batch * heads * seqlen_q * seqlen_k * head_dim
    return flops // 2 if causal else flops


# Backward FLOPs as FlashAttention counts them: 2.5x the forward's (five matmuls against two:
# recomputed QK^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q).
BWD_FLOPS_FACTOR = 2.5
DIRECTIONS = ("fwd", "bwd")
DIRECTION_TITLES = {"fwd": "Forward", "bwd": "Backward"}


def attention_bwd_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal):
    """Backward FLOPs: 2.5 x attention_flops (exact: the forward count is always even)."""
    return 5 * attention_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal) // 2


def direction_flops(direction, batch, heads, seqlen_q, seqlen_k, head_dim, causal):
    count = {"fwd": attention_flops, "bwd": attention_bwd_flops}[direction]
    return count(batch, heads, seqlen_q, seqlen_k, head_dim, causal)


def directions_from_arg(arg):
    """--direction value -> the directions to run, in order."""
    return {"fwd": ["fwd"], "bwd": ["bwd"], "both": ["fwd", "bwd"]}[arg]


def reference_chunk_slices(slices, seqlen_q, seqlen_k, budget_bytes, item_bytes=4):
    """How many (batch*heads) slices of a (seqlen_q, seqlen_k) fp32 score matrix the chunked math
    reference takes at once: as many as fit budget_bytes per score-sized tensor, at least 1, at
    most slices. (The autograd reference holds about five score-sized tensors at its peak.)"""
    per_slice = seqlen_q * seqlen_k * item_bytes
    return max(1, min(slices, budget_bytes // per_slice))


GRAD_NAMES = ("dq", "dk", "dv")


def summarize_grad_check(errors, bound, against=None):
    """errors: {impl: {"dq": rel_l2, "dk": ..., "dv": ...}} for every implementation checked.
    against: None for the fp32 reference, else the peer implementation key the others were compared
    with. Returns the table's check cell: 'unchecked', 'ok', 'ok vs cuDNN' or
    'MISMATCH hopattn dq 3.1e-02, ...' (each failing implementation with its worst gradient)."""
    if not errors:
        return "unchecked"
    failures = []
    for impl, by_grad in errors.items():
        bad = {g: e for g, e in by_grad.items() if not (isinstance(e, (int, float)) and math.isfinite(e) and e <= bound)}
        if bad:
            # NaN sorts badly: show a non-finite gradient first, else the largest error.
            worst = max(bad, key=lambda g: float("inf") if not math.isfinite(bad[g]) else bad[g])
            failures.append(f"{IMPL_HEADERS.get(impl, impl)} {worst} {bad[worst]:.1e}")
    suffix = "" if against is None else f" vs {IMPL_HEADERS.get(against, against)}"
    return ("MISMATCH " + ", ".join(failures) + suffix) if failures else "ok" + suffix


# Check cells that do not fail the run: ok (also 'ok vs <peer>'), nothing to compare, or a hopattn
# backward kernel for this head_dim that the loaded build does not contain.
_PASSING_CHECKS = ("unchecked", "hopattn bwd not built")


def check_passed(check):
    return check == "ok" or check.startswith("ok vs ") or check in _PASSING_CHECKS


def tflops_per_s(flops, ms):
    return None if ms is None or ms <= 0 else flops / (ms * 1e-3) / 1e12


def shape_grid(head_dims, seqlens, causal_modes, total_tokens=TOTAL_TOKENS, hidden=HIDDEN):
    """One dict per benchmark point: constant tokens (batch = tokens/seqlen) and hidden size
    (heads = hidden/head_dim), so every point moves the same amount of Q/K/V data."""
    grid = []
    for head_dim in head_dims:
        if hidden % head_dim:
            raise ValueError(f"hidden {hidden} is not a multiple of head_dim {head_dim}")
        for causal in causal_modes:
            for seqlen in seqlens:
                if total_tokens % seqlen:
                    raise ValueError(f"{total_tokens} tokens is not a multiple of seqlen {seqlen}")
                grid.append(
                    dict(
                        head_dim=head_dim,
                        causal=bool(causal),
                        seqlen=seqlen,
                        batch=total_tokens // seqlen,
                        heads=hidden // head_dim,
                    )
                )
    return grid


def causal_modes_from_arg(arg):
    return {"0": [False], "1": [True], "both": [False, True]}[arg]


def parse_int_list(text):
    """'64,128' -> [64, 128]; accepts 1k-style suffixes ('1k' -> 1024)."""
    values = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        values.append(int(item[:-1]) * 1024 if item.endswith("k") else int(item))
    return values


def format_seqlen(seqlen):
    return f"{seqlen // 1024}k" if seqlen >= 1024 and seqlen % 1024 == 0 else str(seqlen)


def format_tflops(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def markdown_table(rows, impls):
    """rows: dicts with head_dim, causal, seqlen, batch, heads, tflops {impl: float|None}, check.
    impls: implementation keys (IMPL_HEADERS order) that have a column. Values are TFLOP/s."""
    headers = ["hdim", "causal", "seqlen", "batch", "heads"]
    headers += [IMPL_HEADERS[i] for i in impls]
    headers += ["hopattn/cuDNN", "check"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers[:-1]) + "|:---|"]
    for r in rows:
        tf = r["tflops"]
        cells = [str(r["head_dim"]), "yes" if r["causal"] else "no", format_seqlen(r["seqlen"]), str(r["batch"]), str(r["heads"])]
        cells += [format_tflops(tf.get(i)) for i in impls]
        rel = ratio(tf.get("hopattn"), tf.get("cudnn"))
        cells.append("n/a" if rel is None else f"{rel:.2f}x")
        cells.append(r.get("check", "unchecked"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bwd_check_note(ref_max_seqlen, grid_max_seqlen, bound):
    """The backward table's line saying what each gradient was checked against."""
    where = ("at every point" if ref_max_seqlen >= grid_max_seqlen else
             f"at seqlen <= {format_seqlen(ref_max_seqlen)}; above that against cuDNN "
             "(FA2 (SDPA flash) if cuDNN failed), marked 'vs <peer>' in the check column")
    return (f"Check: dq, dk and dv of every implementation, rel L2 <= {bound:g} each, against an fp32 math "
            f"reference (torch autograd on the GPU, chunked over batch x heads, no TF32) {where}.")


def markdown_report(direction, timer_name, env, table, check_note=None):
    """The .md file: a title line for the direction, check_note if any, the environment line, the table."""
    head = f"{DIRECTION_TITLES[direction]}"
    if direction == "bwd":
        head += " (dq, dk, dv; only torch.autograd.grad is timed)"
    head += f", bf16, {TOTAL_TOKENS} tokens, hidden {HIDDEN}; TFLOP/s"
    if direction == "bwd":
        head += f" with backward FLOPs = {BWD_FLOPS_FACTOR:g} x forward FLOPs"
    head += f" ({timer_name}).\n"
    if check_note:
        head += check_note + "\n"
    head += (f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
             f"hopattn {env['hopattn_version']}.\n")
    return f"{head}\n{table}\n"


def output_stem(out_dir, date=None, tag=None, direction="fwd"):
    """docs/bench/<direction>-<date>[-<tag>] (fwd-... or bwd-...); the caller appends .json/.md/.png."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    date = date or datetime.date.today().isoformat()
    name = f"{direction}-{date}" + (f"-{tag}" if tag else "")
    return Path(out_dir) / name


def git_commit(repo_root):
    """$HOPATTN_COMMIT, else `git rev-parse --short HEAD`, else None."""
    env = os.environ.get("HOPATTN_COMMIT")
    if env:
        return env
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo_root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


# --- the one-shape timing probes (kernel_split.py, protocol.py) -------------------------------------
def probe_parser(description, calls):
    """The arguments both probes take: one direction and head dim, several seqlens, `calls` timed calls."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--direction", choices=("fwd", "bwd"), default="bwd")
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlens", default="1k,4k,16k")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--calls", type=int, default=calls)
    ap.add_argument("--warm-seconds", type=float, default=1.0)
    return ap


def probe_inputs(torch, direction, d, s, causal, seed):
    """(batch, heads, FLOPs, q, k, v) of the grid's shape at seqlen s: bf16 (b, s, h, d) tensors from
    a seeded generator, requiring grad for the backward."""
    b, h = max(1, TOTAL_TOKENS // s), HIDDEN // d
    flops = direction_flops(direction, b, h, s, s, d, causal)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn((b, s, h, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for t in (q, k, v):
        t.requires_grad_(direction == "bwd")
    return b, h, flops, q, k, v
