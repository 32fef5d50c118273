# Pure helpers of the Python benchmark (bench/compare.py): the shape grid, the FLOP count, and the
# markdown table. No torch here, so tests/python/test_bench_helpers.py checks them on any machine.
import datetime
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


def output_stem(out_dir, date=None, tag=None):
    """docs/bench/fwd-<date>[-<tag>]; the caller appends .json/.md/.png."""
    date = date or datetime.date.today().isoformat()
    name = f"fwd-{date}" + (f"-{tag}" if tag else "")
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
