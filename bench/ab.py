"""A/B timing of hopattn libraries on the GPU: each library in its own process, in alternating rounds.

Why processes and rounds: a library is bound once per process (ctypes), and the card's power
controller moves single readings by a few percent (docs/perf-notes.md, "The run-to-run spread is the
power controller's"), so a change of 1-3% is only visible as the same sign over alternating rounds.
Each point is warmed for --warm seconds of its own calls, then timed with triton's do_bench (median).
hopattn alone: the peers are compare.py's job.

    PYTHONPATH=.gpu/python python3 .gpu/bench/ab.py --lib main=.gpu/lib/libhopattn.so \
        --lib new=.gpu-exp/ab/libhopattn-new.so.xz --op backward --points 128:2048:1,128:4096:0 --rounds 3

A library given as .xz is decompressed beside itself once. `--env name:VAR=VALUE` sets a variable
for one library's processes only, so one library under two names A/B's a run-time knob. Points are head_dim:seqlen:causal on the
paper grid's shapes (16k tokens, hidden 2048; bench/common.probe_inputs). Ops:
  attention      the bf16 forward
  attention_softcap  the same with softcap=SOFTCAP (the local kernels with the cap compiled in)
  attention_fp8  the one-call FP8 path (pre-passes, then the FP8 kernel)
  forward_fp8    the FP8 kernel on pre-quantised inputs (bench/ncu_shape.py's)
  backward       torch.autograd.grad of hopattn.attention alone (the forward is outside the timing)
  backward_softcap  the same with softcap=SOFTCAP (the softcap kernels; the FLOPs counted as without)
Prints one `AB tag op d s c us tflops` line per point and round, then a table: the mean of each
library's rounds and its ratio to the first library's.
"""
import argparse
import collections
import lzma
import os
import shutil
import subprocess
import sys

import common  # bench/common.py, beside this script

OPS = ("attention", "attention_softcap", "attention_fp8", "forward_fp8", "backward", "backward_softcap")
SOFTCAP = 30.0  # the softcap ops' cap (Gemma 2's attention softcap is 50, its logit softcap 30)


def parse_points(text):
    """'d:s:c,...' -> [(head_dim, seqlen, causal)]; ValueError naming the bad point."""
    points = []
    for item in text.split(","):
        parts = item.strip().split(":")
        try:
            d, s, c = (int(x) for x in parts)
        except ValueError:
            raise ValueError(f"point {item!r}: want head_dim:seqlen:causal, e.g. 128:4096:1") from None
        if d not in (64, 128, 256):
            raise ValueError(f"point {item!r}: head_dim must be 64, 128 or 256")
        if s <= 0 or common.TOTAL_TOKENS % s:
            raise ValueError(f"point {item!r}: seqlen must divide the grid's {common.TOTAL_TOKENS} tokens")
        if c not in (0, 1):
            raise ValueError(f"point {item!r}: causal must be 0 or 1")
        points.append((d, s, c))
    return points


def parse_lib(text):
    """'name=path' -> (name, path); ValueError when either side is missing or the name has a dash."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path or "-" in name:
        raise ValueError(f"--lib {text!r}: want name=path with a name without '-', e.g. main=.gpu/lib/libhopattn.so")
    return name, path


def parse_env(items, names):
    """['name:VAR=VALUE', ...] -> {name: {VAR: VALUE}} for the libraries `names`; ValueError naming the bad item."""
    env = collections.defaultdict(dict)
    for item in items:
        name, sep, assign = item.partition(":")
        var, eq, value = assign.partition("=")
        if not sep or not eq or not var:
            raise ValueError(f"--env {item!r}: want name:VAR=VALUE, e.g. new:HOPATTN_BWD_TAIL_SPLIT=0")
        if name not in names:
            raise ValueError(f"--env {item!r}: no --lib named {name!r}")
        env[name][var] = value
    return env


def parse_line(line):
    """An `AB tag op d s c us tflops` line -> (library, round, (op, d, s, c), tflops), else None."""
    f = line.split()
    if len(f) != 8 or f[0] != "AB":
        return None
    name, _, rnd = f[1].rpartition("-r")
    return name, int(rnd), (f[2], f[3], f[4], f[5]), float(f[7])


def summarize(lines, names):
    """Rows (point, [mean per library], [ratio to names[0] per library]) from the AB lines."""
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in lines:
        parsed = parse_line(line)
        if parsed:
            name, _, point, tf = parsed
            runs[point][name].append(tf)
    rows = []
    for point, by_lib in runs.items():
        means = [sum(by_lib[n]) / len(by_lib[n]) if by_lib[n] else 0.0 for n in names]
        base = means[0]
        rows.append((point, means, [m / base if base else 0.0 for m in means]))
    return rows


def unpacked(path):
    """path, or for path.xz the decompressed file beside it (made once)."""
    if not path.endswith(".xz") or not os.path.isfile(path):
        return path  # a missing file is reported by the caller, by its name
    out = path[:-3]
    if not os.path.exists(out):
        with lzma.open(path) as src, open(out + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(out + ".tmp", out)
    return out


def make_call(torch, hopattn, op, d, s, c):
    direction = "bwd" if op.startswith("backward") else "fwd"
    _, _, flops, q, k, v = common.probe_inputs(torch, direction, d, s, bool(c), seed=0)
    if direction == "bwd":
        out = hopattn.attention(q, k, v, causal=bool(c), softcap=SOFTCAP if op == "backward_softcap" else 0.0)
        dout = torch.randn_like(out)
        return flops, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    if op == "attention_softcap":
        return flops, lambda: hopattn.attention(q, k, v, causal=bool(c), softcap=SOFTCAP)
    import ncu_shape  # bench/ncu_shape.py: the forward ops as its probes make them

    args = ncu_shape.parse_args(["--op", op, "--hdim", str(d), "--seqlen", str(s)] + (["--causal"] if c else []))
    return flops, ncu_shape.make_call(torch, hopattn, args)


def child(args):
    """Time every point with the library this process was started on."""
    import time

    import torch
    import triton

    import hopattn

    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start = time.time()
    while time.time() - start < 1.0:  # leave idle clocks before the first point
        x @ x
    for d, s, c in parse_points(args.points):
        flops, call = make_call(torch, hopattn, args.op, d, s, c)
        start = time.time()
        while time.time() - start < args.warm:
            call()
        ms = triton.testing.do_bench(call, warmup=20, rep=150)
        print(f"AB {args.tag} {args.op} d{d} s{s} c{c} {ms * 1e3:.1f}us {flops / ms / 1e9:.1f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", action="append", default=[], help="name=path of a libhopattn.so (or .so.xz); two or more")
    p.add_argument("--env", action="append", default=[],
                   help="name:VAR=VALUE, an environment variable for library `name`'s processes only; repeatable "
                        "(one library under two names with different knobs)")
    p.add_argument("--op", choices=OPS, default="attention")
    p.add_argument("--points", default="128:1024:0,128:4096:0,128:4096:1")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warm", type=float, default=0.3, help="seconds of a point's own calls before it is timed")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tag", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        parse_points(args.points)
        libs = [parse_lib(x) for x in args.lib]
    except ValueError as e:
        p.error(str(e))
    if args.rounds < 1 or args.warm < 0:
        p.error("--rounds must be >= 1 and --warm >= 0")
    if args.child:
        return child(args)
    try:
        extra_env = parse_env(args.env, [n for n, _ in libs])
    except ValueError as e:
        p.error(str(e))
    if len(libs) < 2 or len({n for n, _ in libs}) != len(libs):
        p.error("give two or more --lib name=path with distinct names")
    lines = []
    for r in range(1, args.rounds + 1):
        for name, path in libs:
            lib = os.path.abspath(unpacked(path))
            if not os.path.isfile(lib):
                p.error(f"--lib {name}: {path} is not a file")
            env = dict(os.environ, HOPATTN_LIBRARY=lib, **extra_env[name])  # the package loads exactly this file
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--tag", f"{name}-r{r}", "--op", args.op,
                   "--points", args.points, "--warm", str(args.warm)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            sys.stdout.write(out.stdout)
            if out.returncode != 0:
                sys.stderr.write(out.stderr[-4000:])
                sys.exit(f"library {name} (round {r}) failed: exit {out.returncode}")
            lines += out.stdout.splitlines()
    names = [n for n, _ in libs]
    print("\n| op | point | " + " | ".join(names) + " | " + " | ".join(f"{n}/{names[0]}" for n in names[1:]) + " |")
    print("|---|---|" + "---:|" * (2 * len(names) - 1))
    for (op, d, s, c), means, ratios in summarize(lines, names):
        print(f"| {op} | {d} {s} {c} | " + " | ".join(f"{m:.1f}" for m in means) + " | "
              + " | ".join(f"{x:.3f}" for x in ratios[1:]) + " |")


if __name__ == "__main__":
    main()
