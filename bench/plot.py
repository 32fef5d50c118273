# Plots a bench/compare.py result: one panel per (head_dim, causal), TFLOP/s against seqlen, one
# line per implementation. Usable on its own to re-plot a saved JSON: python bench/plot.py fwd-X.json
# (or a backward result, bwd-X.json).
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import IMPL_HEADERS, format_seqlen  # noqa: E402

MARKERS = {"hopattn": "o", "fa2": "s", "cudnn": "^", "fa3": "D"}


def plot_rows(rows, impls, path, title=""):
    """Write a PNG to path. Missing points (None, i.e. a peer that failed) leave gaps."""
    import matplotlib

    matplotlib.use("Agg")  # headless: the GPU machine has no display
    import matplotlib.pyplot as plt

    head_dims = sorted({r["head_dim"] for r in rows})
    causal_modes = sorted({r["causal"] for r in rows})
    fig, axes = plt.subplots(
        len(causal_modes), len(head_dims), figsize=(4.5 * len(head_dims), 3.6 * len(causal_modes)), squeeze=False
    )
    for row_idx, causal in enumerate(causal_modes):
        for col_idx, head_dim in enumerate(head_dims):
            ax = axes[row_idx][col_idx]
            panel = sorted((r for r in rows if r["head_dim"] == head_dim and r["causal"] == causal), key=lambda r: r["seqlen"])
            seqlens = [r["seqlen"] for r in panel]
            for impl in impls:
                values = [r["tflops"].get(impl) for r in panel]
                ys = [float("nan") if v is None else v for v in values]
                ax.plot(seqlens, ys, marker=MARKERS.get(impl, "x"), label=IMPL_HEADERS[impl])
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens)
            ax.set_xticklabels([format_seqlen(s) for s in seqlens])
            ax.set_ylim(bottom=0)
            ax.set_title(f"head_dim {head_dim}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(loc="lower right", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description="re-plot a bench/compare.py JSON result")
    parser.add_argument("json_path", help="a fwd-<date>.json or bwd-<date>.json written by bench/compare.py")
    parser.add_argument("--out", help="PNG path (default: next to the JSON)")
    args = parser.parse_args()
    result = json.loads(Path(args.json_path).read_text())
    out = args.out or str(Path(args.json_path).with_suffix(".png"))
    title = result.get("device", "")
    if result.get("direction") == "bwd":  # forward results predate the key
        title += ", bf16 backward"
    plot_rows(result["rows"], result["impls"], out, title=title)
    print(out)


if __name__ == "__main__":
    main()
