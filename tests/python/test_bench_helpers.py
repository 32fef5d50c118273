# Checks the pure helpers of bench/compare.py (FLOP count, shape grid, table, file names) without
# torch or a GPU, so a broken benchmark script is caught on CI before it reaches the GPU machine.
import importlib.util

import pytest

import common  # bench/common.py; conftest.py puts bench/ on sys.path


def test_flops_formula():
    # 4 * b * h * s^2 * d, halved when causal.
    assert common.attention_flops(2, 16, 1024, 1024, 128, causal=False) == 4 * 2 * 16 * 1024 * 1024 * 128
    assert common.attention_flops(2, 16, 1024, 1024, 128, causal=True) == 2 * 2 * 16 * 1024 * 1024 * 128
    assert common.attention_flops(1, 1, 3, 5, 7, causal=False) == 4 * 3 * 5 * 7


def test_tflops():
    assert common.tflops_per_s(1e12, 1000.0) == pytest.approx(1.0)
    assert common.tflops_per_s(1e12, None) is None


def test_shape_grid_keeps_tokens_and_hidden_constant():
    grid = common.shape_grid(common.ALL_HEAD_DIMS, common.ALL_SEQLENS, [False, True])
    assert len(grid) == 3 * 6 * 2
    for p in grid:
        assert p["batch"] * p["seqlen"] == 16384
        assert p["heads"] * p["head_dim"] == 2048
    assert {"head_dim": 256, "causal": True, "seqlen": 16384, "batch": 1, "heads": 8} in grid
    with pytest.raises(ValueError):
        common.shape_grid([96], [1024], [False])


def test_arg_parsing():
    assert common.parse_int_list("512,1k, 16k") == [512, 1024, 16384]
    assert common.causal_modes_from_arg("both") == [False, True]
    assert common.format_seqlen(16384) == "16k" and common.format_seqlen(512) == "512"


def test_markdown_table_marks_failed_peers_na():
    rows = [
        dict(head_dim=128, causal=True, seqlen=4096, batch=4, heads=16,
             tflops={"hopattn": 500.0, "fa2": 350.25, "cudnn": 400.0}, check="ok"),
        dict(head_dim=256, causal=False, seqlen=512, batch=32, heads=8,
             tflops={"hopattn": 300.0, "fa2": 200.0, "cudnn": None}, check="MISMATCH (3.0e-02)"),
    ]
    table = common.markdown_table(rows, ["hopattn", "fa2", "cudnn"]).splitlines()
    assert table[0] == "| hdim | causal | seqlen | batch | heads | hopattn | FA2 (SDPA flash) | cuDNN | hopattn/cuDNN | check |"
    assert table[1].count("|") == table[0].count("|")
    assert table[2] == "| 128 | yes | 4k | 4 | 16 | 500.0 | 350.2 | 400.0 | 1.25x | ok |"
    assert table[3] == "| 256 | no | 512 | 32 | 8 | 300.0 | 200.0 | n/a | n/a | MISMATCH (3.0e-02) |"
    with_fa3 = common.markdown_table(rows, ["hopattn", "fa2", "cudnn", "fa3"]).splitlines()
    assert "| FA3 |" in with_fa3[0] and with_fa3[2].endswith("| 400.0 | n/a | 1.25x | ok |")


def test_output_stem(tmp_path):
    assert common.output_stem(tmp_path, date="2025-01-02").name == "fwd-2025-01-02"
    assert common.output_stem(tmp_path, date="2025-01-02", tag="h200").name == "fwd-2025-01-02-h200"


def test_git_commit_prefers_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOPATTN_COMMIT", "abc123")
    assert common.git_commit(tmp_path) == "abc123"


def test_compare_parses_args_without_torch():
    spec = importlib.util.spec_from_file_location("bench_compare", common.__file__.replace("common.py", "compare.py"))
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)  # must not import torch at module level
    args = compare.parse_args(["--quick", "--causal", "1", "--tag", "x"])
    assert args.quick and args.causal == "1" and args.tag == "x"


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    import plot

    rows = [dict(head_dim=128, causal=c, seqlen=s, tflops={"hopattn": 100.0 + s / 100, "cudnn": None})
            for c in (False, True) for s in (512, 1024)]
    plot.plot_rows(rows, ["hopattn", "cudnn"], tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 0
