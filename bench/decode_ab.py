"""The decode A/B's table: bench/decode.py JSON files named dec-LIB-rROUND.json (one per library
and round, from alternating processes) in one folder, compared library against library.

    python3 bench/decode_ab.py OUT_DIR BASE NEW

One row per (batch, cache length, contiguous or paged cache): each library's microseconds in
every round, and BASE / NEW of the best round of each (above 1: NEW is faster)."""
import json
import pathlib
import sys


def collect(folder):
    """{(batch, cache_len, kind): {lib: [µs per round]}} from folder's dec-*-r*.json."""
    runs = {}
    for f in sorted(pathlib.Path(folder).glob("dec-*-r*.json")):
        lib = f.stem.split("-")[1]
        for row in json.loads(f.read_text())["rows"]:
            for kind in ("hopattn", "hopattn_paged"):
                if row.get(f"{kind}_ms"):
                    runs.setdefault((row["batch"], row["cache_len"], kind), {}).setdefault(lib, []).append(
                        row[f"{kind}_ms"] * 1e3)
    return runs


def table(runs, base, new):
    """Markdown lines comparing library new against base."""
    lines = [f"| batch | cache | cache kind | {base} µs (rounds) | {new} µs (rounds) | {base} / {new} (best of each) |",
             "|---:|---:|---|---|---|---:|"]
    for (batch, cache_len, kind), libs in sorted(runs.items()):
        b, n = libs.get(base, []), libs.get(new, [])
        ratio = f"{min(b) / min(n):.3f}" if b and n else "-"
        fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs) or "-"  # noqa: E731
        lines.append(f"| {batch} | {cache_len} | {'paged64' if kind.endswith('paged') else 'contig'} | "
                     f"{fmt(b)} | {fmt(n)} | {ratio} |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    print("\n".join(table(collect(sys.argv[1]), sys.argv[2], sys.argv[3])))
