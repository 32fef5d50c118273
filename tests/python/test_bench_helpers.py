# Checks the pure helpers of bench/compare.py (forward and backward FLOP counts, shape grid, table,
# report header, gradient-check summary, file names, arguments) without torch or a GPU, so a broken
# benchmark script is caught on CI before it reaches the GPU machine.
import importlib.util
import sys

import pytest

import common  # bench/common.py; conftest.py puts bench/ on sys.path


def test_flops_formula():
    # 4 * b * h * s^2 * d, halved when causal.
    assert common.attention_flops(2, 16, 1024, 1024, 128, causal=False) == 4 * 2 * 16 * 1024 * 1024 * 128
    assert common.attention_flops(2, 16, 1024, 1024, 128, causal=True) == 2 * 2 * 16 * 1024 * 1024 * 128
    assert common.attention_flops(1, 1, 3, 5, 7, causal=False) == 4 * 3 * 5 * 7


def test_bwd_flops_are_two_and_a_half_forward():
    fwd = common.attention_flops(2, 16, 1024, 1024, 128, causal=False)
    assert common.attention_bwd_flops(2, 16, 1024, 1024, 128, causal=False) == 10 * 2 * 16 * 1024 * 1024 * 128
    assert common.attention_bwd_flops(2, 16, 1024, 1024, 128, causal=False) == 2.5 * fwd
    # Causal halves it, as it does the forward; the count stays an exact integer.
    causal = common.attention_bwd_flops(2, 16, 1024, 1024, 128, causal=True)
    assert causal * 2 == common.attention_bwd_flops(2, 16, 1024, 1024, 128, causal=False)
    assert isinstance(causal, int)
    assert common.attention_bwd_flops(1, 1, 3, 5, 7, causal=True) == 5 * (4 * 3 * 5 * 7 // 2) // 2
    assert common.BWD_FLOPS_FACTOR == 2.5
    assert common.direction_flops("fwd", 1, 2, 64, 64, 64, False) == common.attention_flops(1, 2, 64, 64, 64, False)
    assert common.direction_flops("bwd", 1, 2, 64, 64, 64, True) == common.attention_bwd_flops(1, 2, 64, 64, 64, True)
    # 16k tokens, hidden 2048, seqlen 16k non-causal: 2.5 x 4 * 16384^2 * 2048 FLOPs.
    assert common.attention_bwd_flops(1, 16, 16384, 16384, 128, False) == 10 * 16384 * 16384 * 2048


def test_directions_from_arg():
    assert common.directions_from_arg("fwd") == ["fwd"]
    assert common.directions_from_arg("bwd") == ["bwd"]
    assert common.directions_from_arg("both") == ["fwd", "bwd"]
    with pytest.raises(KeyError):
        common.directions_from_arg("up")


def test_reference_chunk_slices_bounds_the_score_matrices():
    gib = 1 << 30
    # seqlen 512: 1 MiB of fp32 scores per slice; 1024 slices fit a GiB.
    assert common.reference_chunk_slices(1024, 512, 512, gib) == 1024
    assert common.reference_chunk_slices(4096, 512, 512, gib) == 1024
    assert common.reference_chunk_slices(8, 512, 512, gib) == 8
    # seqlen 16k: one slice is already a GiB; 64k: over budget, but never fewer than one slice.
    assert common.reference_chunk_slices(32, 16384, 16384, gib) == 1
    assert common.reference_chunk_slices(32, 65536, 65536, gib) == 1
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        for d in (64, 128, 256):
            slices = (16384 // s) * (2048 // d)
            chunk = common.reference_chunk_slices(slices, s, s, gib)
            assert 1 <= chunk <= slices and chunk * s * s * 4 <= gib


def test_summarize_grad_check():
    ok = {"dq": 3e-3, "dk": 4e-3, "dv": 2e-3}
    assert common.summarize_grad_check({}, 2e-2) == "unchecked"
    assert common.summarize_grad_check({"hopattn": ok, "fa2": ok, "cudnn": ok}, 2e-2) == "ok"
    assert common.summarize_grad_check({"hopattn": ok, "fa2": ok}, 2e-2, against="cudnn") == "ok vs cuDNN"
    assert common.summarize_grad_check({"hopattn": dict(ok, dk=2e-2)}, 2e-2) == "ok"  # the bound itself passes
    bad = common.summarize_grad_check({"hopattn": dict(ok, dk=3.1e-2, dv=5e-2), "cudnn": ok}, 2e-2)
    assert bad == "MISMATCH hopattn dv 5.0e-02"
    nan = common.summarize_grad_check({"hopattn": ok, "fa2": dict(ok, dq=float("nan"), dv=1.0)}, 2e-2, against="cudnn")
    assert nan == "MISMATCH FA2 (SDPA flash) dq nan vs cuDNN"
    two = common.summarize_grad_check({"hopattn": dict(ok, dq=0.1), "fa3": dict(ok, dv=float("inf"))}, 2e-2)
    assert two == "MISMATCH hopattn dq 1.0e-01, FA3 dv inf"


def test_check_passed():
    for passing in ("ok", "ok vs cuDNN", "ok vs FA2 (SDPA flash)", "unchecked", "hopattn bwd not built"):
        assert common.check_passed(passing), passing
    for failing in ("MISMATCH (3.0e-02)", "MISMATCH hopattn dq 3.0e-02", "hopattn failed", "error",
                    "hopattn bwd not built; MISMATCH FA3 dv 1.0e-01", "hopattn failed; MISMATCH FA3 dv 1.0e-01"):
        assert not common.check_passed(failing), failing


ENV = dict(device="NVIDIA H200", torch="2.11.0+cu130", cuda="13.0", cudnn=91900, hopattn_version="0.1.0+abc")


def test_markdown_report_forward_is_unchanged():
    text = common.markdown_report("fwd", "triton.testing.do_bench median", ENV, "| t |")
    assert text == (
        "Forward, bf16, 16384 tokens, hidden 2048; TFLOP/s (triton.testing.do_bench median).\n"
        "NVIDIA H200, torch 2.11.0+cu130, CUDA 13.0, cuDNN 91900, hopattn 0.1.0+abc.\n\n| t |\n"
    )


def test_markdown_report_backward_names_direction_flops_and_check():
    note = common.bwd_check_note(16384, 16384, 2e-2)
    assert "fp32" in note and "at every point" in note and "0.02" in note
    partial = common.bwd_check_note(4096, 16384, 2e-2)
    assert "seqlen <= 4k" in partial and "cuDNN" in partial
    lines = common.markdown_report("bwd", "T", ENV, "| t |", note).splitlines()
    assert lines[0].startswith("Backward") and "2.5 x forward FLOPs" in lines[0] and "(T)" in lines[0]
    assert lines[1] == note
    assert lines[2].startswith("NVIDIA H200, torch 2.11.0+cu130")
    assert lines[3:] == ["", "| t |"]


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
    assert common.output_stem(tmp_path, date="2025-01-02", direction="fwd").name == "fwd-2025-01-02"
    assert common.output_stem(tmp_path, date="2025-01-02", direction="bwd").name == "bwd-2025-01-02"
    assert common.output_stem(tmp_path, date="2025-01-02", tag="h200", direction="bwd").name == "bwd-2025-01-02-h200"
    with pytest.raises(ValueError):
        common.output_stem(tmp_path, date="2025-01-02", direction="both")


def test_git_commit_prefers_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOPATTN_COMMIT", "abc123")
    assert common.git_commit(tmp_path) == "abc123"


def _load_bench(script, name=None):
    """bench/<script> as a module, without running its main (the scripts import torch only inside it)."""
    spec = importlib.util.spec_from_file_location(name or script[:-3], common.__file__.replace("common.py", script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_parses_args_without_torch():
    compare = _load_bench("compare.py", "bench_compare")  # must not import torch at module level
    args = compare.parse_args(["--quick", "--causal", "1", "--tag", "x"])
    assert args.quick and args.causal == "1" and args.tag == "x"
    assert args.direction == "fwd"  # the default keeps existing (forward-only) runs unchanged
    assert compare.parse_args(["--direction", "bwd"]).direction == "bwd"
    assert compare.parse_args(["--direction", "both"]).direction == "both"
    assert compare.parse_args([]).bwd_ref_max_seqlen == common.ALL_SEQLENS[-1]
    assert compare.parse_args(["--bwd-ref-max-seqlen", "4k"]).bwd_ref_max_seqlen == 4096
    for bad in (["--direction", "sideways"], ["--bwd-ref-max-seqlen", "1k,2k"], ["--warm-seconds", "x"]):
        with pytest.raises(SystemExit):
            compare.parse_args(bad)
    # Every timing follows a second of the same calls unless switched off (the pre-2026-12-02 protocol).
    assert compare.parse_args([]).warm_seconds == 1.0
    assert compare.parse_args(["--warm-seconds", "0"]).warm_seconds == 0.0


def test_warm_up_and_burn_off_touch_no_gpu():
    compare = _load_bench("compare.py", "bench_compare")

    class NoTorch:
        def __getattr__(self, name):
            raise AssertionError(f"power_burn(0) used torch.{name}")

    compare.power_burn(NoTorch(), 0)
    compare.power_burn(NoTorch(), -1.0)
    with pytest.raises(AssertionError):
        compare.power_burn(NoTorch(), 0.1)

    calls = []
    compare.warm_up(NoTorch(), lambda: calls.append(1), 0)
    assert not calls

    class SyncOnly:
        class cuda:
            @staticmethod
            def synchronize():
                pass

    ran = compare.warm_up(SyncOnly(), lambda: calls.append(1), 0.01)
    assert len(calls) >= 4 and len(calls) % 4 == 0  # back to back, synchronised every four calls
    assert ran == len(calls)  # spread.py's sustained rate counts on it


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    import plot

    rows = [dict(head_dim=128, causal=c, seqlen=s, tflops={"hopattn": 100.0 + s / 100, "cudnn": None})
            for c in (False, True) for s in (512, 1024)]
    plot.plot_rows(rows, ["hopattn", "cudnn"], tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 0


def _check_parses_without_torch(script, option, bad_args, capsys):
    """--help lists `option` and exits 0; `bad_args` are refused with exit code 2."""
    module = _load_bench(script)
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    assert option in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        module.main(bad_args)
    assert bad.value.code == 2


@pytest.mark.parametrize("script", ["spread.py", "kernel_split.py", "protocol.py"])
def test_timing_scripts_parse_without_torch(script, capsys):
    # They import torch only after parsing: --help must work on a machine without it, and a bad
    # argument must be refused there too.
    _check_parses_without_torch(script, "--warm-seconds", ["--direction", "sideways"], capsys)


def test_decode_parses_without_torch(capsys):
    # --warm-seconds warms each implementation at each shape (compare.warm_up); torch is imported only
    # after parsing, so --help and a refused value work without it.
    _check_parses_without_torch("decode.py", "--warm-seconds", ["--warm-seconds", "long"], capsys)
    _check_parses_without_torch("decode.py", "--page-order", ["--page-order", "sorted"], capsys)
    _check_parses_without_torch("decode_ncu.py", "--pre-alloc-gb", ["--batch", "all"], capsys)
    _check_parses_without_torch("decode_ncu.py", "--pre-alloc-gb", ["--cache-len", "1000"], capsys)  # not whole pages


def test_decode_warms_each_implementation_by_default(capsys):
    # Session 65: without a warm-up, the implementation timed first at a shape ran at the clock the
    # previous, heavier shape left (batch 64 1k contiguous 117 against 104 us warmed), so the records'
    # protocol warms each implementation 0.3 s at each shape unless told otherwise.
    module = _load_bench("decode.py")
    with pytest.raises(SystemExit):
        module.main(["--help"])
    assert "(default 0.3;" in " ".join(capsys.readouterr().out.split())


def test_decode_to_pages_scatters_whole_pages_to_their_slots():
    # bench/decode.py's paged caches (decode_ncu.py builds the same): page j of sequence b lands at
    # pool slot perm[b * pages + j], so page_table[b][j] = perm[...] reads it back. numpy stands in
    # for torch (new_empty is the one tensor method to_pages needs beyond numpy's).
    import numpy as np

    decode = _load_bench("decode.py", "bench_decode_pages")

    class Tensor(np.ndarray):
        def new_empty(self, *shape):
            return np.full(shape, np.nan).view(Tensor)

    batch, length, heads, dim, page = 2, 12, 3, 4, 4
    x = np.random.default_rng(0).standard_normal((batch, length, heads, dim)).view(Tensor)
    perm = np.random.default_rng(1).permutation(batch * length // page)
    pool = decode.to_pages(x, perm, page)
    assert pool.shape == (batch * length // page, page, heads, dim) and not np.isnan(pool).any()
    table = perm.reshape(batch, length // page)
    for b in range(batch):
        for key in range(length):
            assert np.array_equal(pool[table[b, key // page], key % page], x[b, key])


def test_varlen_same_work_parses_without_torch(capsys):
    # Imports torch only after parsing: --help works without it, a bad value is refused there too.
    _check_parses_without_torch("varlen_same_work.py", "--seqlen", ["--batch", "many"], capsys)


def test_varlen_parses_without_torch(capsys):
    # --gpu-time is how the mixed-length bar is timed (docs/BENCHMARKS.md 2026-12-03); torch is
    # imported only after parsing.
    _check_parses_without_torch("varlen.py", "--gpu-time", ["--dtype", "fp64"], capsys)


def test_protocol_union_of_kernel_intervals():
    import protocol

    assert protocol.union_length([]) == 0
    assert protocol.union_length([(0, 10), (20, 25)]) == 15  # back to back: the sum
    assert protocol.union_length([(20, 30), (0, 10), (5, 12)]) == 22  # overlapping kernels count once
    assert protocol.union_length([(0, 10), (2, 3)]) == 10  # one inside another


def test_flushed_call_times_flushes_before_every_call():
    import compare

    log = []

    class Event:
        def __init__(self, enable_timing):
            self.t = None

        def record(self):
            self.t = len(log)

        def elapsed_time(self, end):
            return float(end.t - self.t)

    class Cuda:
        @staticmethod
        def synchronize():
            log.append("sync")

    Cuda.Event = Event

    class FakeTorch:
        cuda = Cuda

    times = compare.flushed_call_times(FakeTorch(), lambda: log.append("call"), 3, lambda: log.append("flush"))
    assert log == ["flush", "call"] * 3 + ["sync"]
    assert times == [1.0, 1.0, 1.0]  # the events bracket the call alone, not the flush


def test_bwd_launch_model_order_and_prediction():
    # bench/bwd_launch_model.py mirrors sm90/bwd/launch_order.hpp: every (key block, head) once, in
    # sections; section 1 and section = heads are the two older orders. Its prediction for d128 causal
    # (perf-notes, backward v13): the per-head order wastes over 5% at 1k-8k, the L2 sections under 2%.
    import bwd_launch_model as m

    for n_blocks, heads, section in [(5, 6, 4), (16, 13, 8), (3, 7, 7), (4, 5, 1)]:
        units = [m.launch_unit(i, n_blocks, heads, section) for i in range(n_blocks * heads)]
        assert sorted(units) == [(n, h) for n in range(n_blocks) for h in range(heads)]
    assert [m.launch_unit(i, 3, 2, 1) for i in range(6)] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert [m.launch_unit(i, 3, 2, 2) for i in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert m.l2_section(2048 * 128 * 8, 128) == 16
    for s in (1024, 2048, 4096, 8192):
        sec = m.l2_section(s * 128 * 8, 16384 // s * 16)
        assert m.efficiency(s, 128, 1, 132, 2.4, 5.0) < 0.95
        assert m.efficiency(s, 128, sec, 132, 2.4, 5.0) > 0.98


def test_ncu_shape_arguments_and_shape():
    ncu_shape = importlib.import_module("ncu_shape")
    args = ncu_shape.parse_args([])
    assert (args.op, args.hdim, args.seqlen, args.causal, args.warmup, args.calls) == ("attention_fp8", 128, 4096, False, 2, 1)
    assert ncu_shape.shape(args) == (4, 4096, 16, 128)  # 16k tokens, hidden 2048
    args = ncu_shape.parse_args(["--op", "backward", "--hdim", "64", "--seqlen", "1024", "--causal"])
    assert ncu_shape.shape(args) == (16, 1024, 32, 64) and args.causal
    for bad in (["--seqlen", "3000"], ["--seqlen", "0"], ["--calls", "0"], ["--op", "nope"], ["--hdim", "96"]):
        with pytest.raises(SystemExit):
            ncu_shape.parse_args(bad)


def test_ncu_shape_peer_ops_call_sdpa_with_their_backend(monkeypatch):
    import types

    ncu_shape = importlib.import_module("ncu_shape")

    class T:  # a tensor that records its transposes
        def __init__(self, name, dims=(0, 1, 2, 3)):
            self.name, self.dims = name, dims

        def transpose(self, a, b):
            d = list(self.dims)
            d[a], d[b] = d[b], d[a]
            return T(self.name, tuple(d))

    monkeypatch.setattr(ncu_shape.common, "probe_inputs",
                        lambda torch, direction, d, s, causal, seed: (1, 1, 0.0, T("q"), T("k"), T("v")))
    calls, active = [], []

    class Backend:  # the context sdpa_kernel returns: which backend is on while SDPA runs
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            active.append(self.name)

        def __exit__(self, *exc):
            active.pop()

    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(CUDNN_ATTENTION="cudnn-backend", FLASH_ATTENTION="flash-backend")
    attention.sdpa_kernel = Backend
    monkeypatch.setitem(sys.modules, "torch.nn.attention", attention)
    monkeypatch.setitem(sys.modules, "hopattn", types.ModuleType("hopattn"))  # make_impls imports it

    def sdpa(q, k, v, is_causal):
        calls.append((list(active), [(t.name, t.dims) for t in (q, k, v)], is_causal))
        return T("out")

    torch = types.SimpleNamespace(nn=types.SimpleNamespace(functional=types.SimpleNamespace(scaled_dot_product_attention=sdpa)))
    for op, backend in (("cudnn", "cudnn-backend"), ("fa2", "flash-backend")):
        calls.clear()
        ncu_shape.make_call(torch, None, ncu_shape.parse_args(["--op", op, "--causal"]))()
        # (b, h, s, d) views of the (b, s, h, d) buffers, inside that backend's context, causal passed on
        assert calls == [([backend], [("q", (0, 2, 1, 3)), ("k", (0, 2, 1, 3)), ("v", (0, 2, 1, 3))], True)]


def test_ncu_raw_prints_each_kernels_headline_counters():
    import ncu_raw  # bench/ncu_raw.py

    head = ["ID", "Kernel Name", "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_gmma_cycles_active.avg", "dram__bytes.sum"]
    units = ["", "", "us", "%", "%", "cycle", "byte"]
    rows = [head, units, ["0", "fwd_ws_kernel<...>", "143.6", "71.2", "68.9", "1234", "99"],
            ["1", "cudnn_fprop", "130.1", "80.0", "77.5", "1300", "98"]]
    lines = ncu_raw.summarize(rows)
    # Duration, SM throughput and the tensor pipe's active share per kernel; raw cycles and bytes left out.
    assert lines == ["kernel fwd_ws_kernel<...>", "   gpu__time_duration.sum = 143.6 us",
                     "   sm__throughput.avg.pct_of_peak_sustained_elapsed = 71.2 %",
                     "   sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active = 68.9 %",
                     "kernel cudnn_fprop", "   gpu__time_duration.sum = 130.1 us",
                     "   sm__throughput.avg.pct_of_peak_sustained_elapsed = 80.0 %",
                     "   sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active = 77.5 %"]
    assert ncu_raw.summarize(rows[:2]) == ["no kernel in the report"]


def test_ncu_raw_main_skips_ncus_notes(tmp_path, capsys):
    import ncu_raw

    f = tmp_path / "raw.csv"
    f.write_text('==PROF== Connected\n"Kernel Name","gpu__time_duration.sum"\n"","us"\n"k","5"\n')
    ncu_raw.main([str(f)])
    assert capsys.readouterr().out.splitlines() == ["kernel k", "   gpu__time_duration.sum = 5 us"]


def test_ncu_sass_summary_groups_samples_by_opcode():
    import ncu_sass  # bench/ncu_sass.py

    lines = [
        '"Kernel Name","void k()",\n',
        '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_wait","stall_barrier","stall_wait (Not Issued)"\n',
        '"0x10","      MUFU.EX2 R1, R1","7","32","6","1","5"\n',
        '"0x20","@!P0  MUFU.EX2 R2, R2","3","32","3","0","3"\n',
        '"0x30","      WARPGROUP.DEPBAR.LE gsb0, 0x0","9","4","0","9","0"\n',
    ]
    kernel, rows = ncu_sass.read_rows(lines)
    assert kernel == "void k()" and len(rows) == 3
    assert ncu_sass.opcode("@!P0  BRA 0x7f") == "BRA" and ncu_sass.opcode("MUFU.EX2 R1, R1") == "MUFU"
    summary = ncu_sass.summarise(rows)
    assert list(summary) == ["MUFU", "WARPGROUP"]  # 10 samples before 9
    samples, executed, reasons = summary["MUFU"]
    assert (samples, executed) == (10, 64)
    assert reasons["wait"] == 9 and reasons["barrier"] == 1 and "wait (Not Issued)" not in reasons


def test_ncu_sass_rejects_a_top_below_one(tmp_path, capsys):
    import ncu_sass

    with pytest.raises(SystemExit):
        ncu_sass.main([str(tmp_path / "none.csv"), "--top", "0"])
    assert "--top" in capsys.readouterr().err


def test_bwd_trace_summary():
    import bwd_trace  # bench/bwd_trace.py: its ctypes record and the wave summary, without a GPU

    def rec(kernel, sm, start_us, end_us):
        return bwd_trace.Record(kernel, 0, sm, 0, int(start_us * 1000), int(end_us * 1000))

    # Two SMs: three equal main CTAs (the last alone from 10 to 20 us), one postprocess CTA on the idle SM.
    records = [rec(0, 0, 0, 10), rec(0, 1, 0, 10), rec(0, 0, 10, 20), rec(1, 1, 12, 14)]
    assert bwd_trace.idle_after([r for r in records if r.kernel == 0], 10_000, 20_000, 2) == 10.0
    lines = bwd_trace.summarize(records, 2)
    assert lines[0].startswith("main  3 CTAs on 2 SMs, span 20.0 us, median CTA 10.0 us, last CTA started at 10.0 us")
    assert "idle after it 10 SM-us of 20" in lines[0]
    assert lines[1] == "waves 2 CTAs on 1 SMs, 1 CTAs on 1 SMs; next CTA on an SM after 0.00 us (max 0.00); median CTA by wave first 10.0, middle 10.0, last 10.0 us"
    assert lines[2] == "post  1 CTAs, first start 12.0 us, 1 started and 1 ended before the main kernel's end, last end -6.0 us past it"
    # Waves: SM 0 runs CTAs of 12, 10, 8 us with gaps of 1 and 3 us; SM 1 two of 10 us back to back.
    main = [rec(0, 0, 0, 12), rec(0, 0, 13, 23), rec(0, 0, 26, 34), rec(0, 1, 0, 10), rec(0, 1, 10, 20)]
    counts, gap, medians = bwd_trace.waves(main)
    assert counts == {3: 1, 2: 1}
    assert gap == (1.0, 3.0)
    assert medians == [11.0, 10.0, 8.0]
    assert bwd_trace.waves([rec(0, 0, 0, 5), rec(0, 1, 0, 7)]) == ({1: 2}, None, [6.0])
    assert bwd_trace.summarize([rec(1, 0, 0, 1)], 2) == ["no main-kernel records"]
    # --dump's CSV: a header, then one line per record in recorded order, times in ns.
    csv = bwd_trace.records_csv([rec(0, 3, 1.5, 2.25), rec(1, 0, 4, 5)]).splitlines()
    assert csv == ["kernel,block,smid,start_ns,end_ns", "0,0,3,1500,2250", "1,0,0,4000,5000"]
    # --csv reads it back: the same summary as the records it was written from.
    back = bwd_trace.read_csv(bwd_trace.records_csv(records))
    assert bwd_trace.summarize(back, 2) == lines
    with pytest.raises(ValueError, match="header"):
        bwd_trace.read_csv("a,b\n1,2\n")


def test_fwd_trace_summary():
    import bwd_trace
    import fwd_trace  # bench/fwd_trace.py: the forward tiles' fit and balance, without a GPU

    def rec(sm, blocks, start_us, end_us, kernel=fwd_trace.FWD_KERNEL):
        return bwd_trace.Record(kernel, 0, sm, blocks, int(start_us * 1000), int(end_us * 1000))

    # Tiles of exactly 0.5 us a block + 2 us: SM 0 runs 4 and 8 blocks (4, 6 us) with a 1 us gap,
    # SM 1 runs 12 blocks (8 us) and ends 3 us before SM 0. A backward record is ignored.
    records = [rec(0, 4, 0, 4), rec(0, 8, 5, 11), rec(1, 12, 0, 8), rec(1, 9, 0, 50, kernel=0)]
    tiles = fwd_trace.tiles_of(records)
    assert tiles == [(0, 4, 0, 4000), (0, 8, 5000, 11000), (1, 12, 0, 8000)]
    slope, intercept, r2 = fwd_trace.fit(tiles)
    assert (round(slope, 9), round(intercept, 9), round(r2, 9)) == (0.5, 2.0, 1.0)
    span, share, gap, end_spread, sms = fwd_trace.balance(tiles)
    assert (span, gap, end_spread, sms) == (11.0, (1.0, 1.0), 3.0, 2)
    assert share == pytest.approx(18 / 22)
    lines = fwd_trace.summarize(tiles)
    assert lines == [
        "tiles 3 on 2 SMs, key blocks 4-12 (mean 8.0), span 11.0 us",
        "fit   tile = 0.500 us x blocks + 2.00 us (R^2 1.000); the intercept is 4.0 blocks' worth",
        "SMs   busy 81.8% of the span, last tile ends spread over 3.0 us; gap before an SM's next tile median 1.00 us (max 1.00)",
        "rounds SMs x tiles: 1 x 2, 1 x 1; the uneven last round idles 27.3% of the SM time; an SM's first tile "
        "6.00 us against 6.00 us (median)",
    ]
    # rounds: SM 1 ran one tile fewer, worth the median tile (6 us) of 2 SMs x 11 us; first tiles
    # (4 and 8 us) against the one later tile (6 us).
    counts, idle, first, rest = fwd_trace.rounds(tiles)
    assert (dict(counts), first, rest) == ({2: 1, 1: 1}, 6.0, 6.0) and idle == pytest.approx(6 / 22)
    assert fwd_trace.rounds([(0, 4, 0, 4000), (1, 4, 0, 6000)])[1:] == (0.0, 5.0, None)
    # cross_fit: 4-block tiles of 4 us and 8-block tiles of 6 us, each with a 1 us gap: a tile plus
    # its gap costs 0.5 us a block + 3 us.
    four = [(0, 4, 0, 4000), (0, 4, 5000, 9000)]
    eight = [(0, 8, 0, 6000), (0, 8, 7000, 13000)]
    slope, intercept, r2 = fwd_trace.cross_fit([four, eight])
    assert (round(slope, 9), round(intercept, 9), round(r2, 9)) == (0.5, 3.0, 1.0)
    # Noisy times: the fit is the least-squares line, R^2 below 1.
    noisy = [(0, 2, 0, 2000), (0, 4, 0, 2500), (0, 6, 0, 5000)]
    slope, intercept, r2 = fwd_trace.fit(noisy)
    assert slope == pytest.approx(0.75) and intercept == pytest.approx(1 / 6) and 0.8 < r2 < 1
    # One key-block count (non-causal): no slope, the mean tile time.
    assert fwd_trace.fit([(0, 32, 0, 9000), (1, 32, 0, 11000)]) == (None, 10.0, None)
    assert fwd_trace.summarize([(0, 32, 0, 9000)])[1] == "fit   every tile 32 blocks: mean tile 9.00 us"
    assert fwd_trace.summarize([])[0].startswith("no forward-tile records")
    # --dump's CSV and --csv's reading of it.
    text = fwd_trace.tiles_csv(tiles)
    assert text.splitlines()[:2] == ["smid,key_blocks,start_ns,end_ns", "0,4,0,4000"]
    assert fwd_trace.read_csv(text) == tiles
    with pytest.raises(ValueError, match="header"):
        fwd_trace.read_csv("kernel,block,smid,start_ns,end_ns\n")


def test_fwd_trace_start_split():
    import bwd_trace
    import fwd_trace

    def start(setup_ns, load_ns, total_ns, kernel=fwd_trace.FWD_START_KERNEL, top=1000):
        return bwd_trace.Record(kernel, load_ns, 0, setup_ns, top, top + total_ns if total_ns else 0)

    # Three stamped starts (setup, Q/K wait, first S: 100/400/500, 300/200/700, 200/600/600 ns), one
    # without its first-S stamp (end 0) and a tile record: only the three count.
    records = [start(100, 400, 1000), start(300, 200, 1200), start(200, 600, 1400), start(50, 50, 0),
               bwd_trace.Record(fwd_trace.FWD_KERNEL, 0, 0, 4, 0, 4000)]
    starts = fwd_trace.starts_of(records)
    assert starts == [(100, 400, 500), (300, 200, 700), (200, 600, 600)]
    assert fwd_trace.start_line(starts) == (
        "start median (p90): setup 0.20 (0.30) us, then Q and first K 0.40 (0.60) us, then the first S 0.60 (0.70) us")
    assert fwd_trace.start_line([]) is None
    tiles = fwd_trace.tiles_of(records)
    assert fwd_trace.summarize(tiles, starts)[-1].startswith("start median")
    assert len(fwd_trace.summarize(tiles)) == 4  # no start line without start records


def test_fwd_trace_end_split():
    import bwd_trace
    import fwd_trace  # bench/fwd_trace.py: the tile's end and walk records, without a GPU

    def end(last_pv_ns, finalize_ns, start_ns, end_ns):
        return bwd_trace.Record(fwd_trace.FWD_END_KERNEL, last_pv_ns, 0, finalize_ns, start_ns, end_ns)

    def walk(blocks, start_ns, end_ns, atomic_ns=0):
        return bwd_trace.Record(fwd_trace.FWD_WALK_KERNEL, atomic_ns, 1, blocks, start_ns, end_ns)

    # Ends: last P V 300 / 500 ns, finalize 100 / 200 ns, spans of 1000 / 1500 ns, so the store is
    # 600 / 800 ns; an unstamped end (start 0) does not count.
    records = [end(300, 100, 5000, 6000), end(500, 200, 9000, 10500), end(0, 0, 0, 7000),
               walk(4, 0, 3000), walk(8, 0, 5000), walk(6, 0, 0)]
    ends = fwd_trace.ends_of(records)
    assert ends == [(300, 100, 600), (500, 200, 800)]
    # Walks of 4 and 8 blocks in 3 and 5 us: 0.5 us a block + 1 us; an unstamped one (end 0) is out.
    walks = fwd_trace.walks_of(records)
    assert walks == [(1, 4, 0, 3000), (1, 8, 0, 5000)]
    assert fwd_trace.end_line(ends, walks) == (
        "end   walk = 0.500 us x blocks + 1.00 us (R^2 1.000); then the last P V 0.50 (0.50) us, "
        "the finalize 0.20 (0.20) us, the O store's issue 0.80 (0.80) us")
    assert fwd_trace.end_line([], [(1, 4, 0, 3000), (1, 4, 0, 5000)]) == (
        "end   walk (first S done to the last softmax done) mean 4.00 us over 4 blocks")
    assert fwd_trace.end_line([], []) is None
    tiles = [(0, 4, 0, 4000)]
    assert fwd_trace.summarize(tiles, None, ends, walks)[-1].startswith("end   walk = 0.500")
    # The trace's own atomic (walk records' `block`, from session 59's libraries on): 400 and 600 ns;
    # a record without it (0, older libraries) is left out.
    atomics = fwd_trace.atomics_of([walk(4, 0, 3000, 400), walk(4, 0, 3000, 600), walk(4, 0, 3000)])
    assert atomics == [(400,), (600,)]
    assert fwd_trace.end_line(ends, walks, atomics).endswith(
        "the O store's issue 0.80 (0.80) us, then the trace's atomic 0.60 (0.60) us")
    assert fwd_trace.summarize(tiles, None, ends, walks, atomics)[-1].endswith("the trace's atomic 0.60 (0.60) us")


def test_decode_ab_table_compares_best_rounds(tmp_path):
    import json

    import decode_ab  # bench/decode_ab.py

    def write(lib, rnd, contig_ms, paged_ms):
        rows = [{"batch": 32, "cache_len": 8192, "hopattn_ms": contig_ms, "hopattn_paged_ms": paged_ms},
                {"batch": 1, "cache_len": 1024, "hopattn_ms": None, "hopattn_paged_ms": None}]
        (tmp_path / f"dec-{lib}-r{rnd}.json").write_text(json.dumps({"rows": rows}))

    write("base", 1, 0.400, 0.500)
    write("base", 2, 0.380, 0.520)
    write("new", 1, 0.200, None)
    write("new", 2, 0.190, None)
    runs = decode_ab.collect(tmp_path)
    assert runs[(32, 8192, "hopattn")] == {"base": pytest.approx([400.0, 380.0]), "new": pytest.approx([200.0, 190.0])}
    assert (1, 1024, "hopattn") not in runs  # rows without a time are left out
    lines = decode_ab.table(runs, "base", "new")
    assert lines[0].startswith("| batch | cache | cache kind | base µs (rounds) | new µs (rounds) |")
    contig = next(line for line in lines if "contig" in line)
    assert contig == "| 32 | 8192 | contig | 400.0 / 380.0 | 200.0 / 190.0 | 2.000 |"  # best 380 / best 190
    paged = next(line for line in lines if "paged64" in line)
    assert paged.endswith("| 500.0 / 520.0 | - | - |")  # one library only: no ratio


def test_l2_flush_modes(capsys):
    # compare.make_l2_flush: "memset" writes the buffer (zero_), "read" reduces it (sum) so that L2 is
    # left without dirty lines; anything else is refused by name. decode.py exposes it as --flush.
    import compare

    calls = []

    class Buffer:
        def zero_(self):
            calls.append("zero_")

        def sum(self):
            calls.append("sum")

    class FakeTorch:
        float32 = "float32"

        @staticmethod
        def zeros(n, dtype, device):
            assert n * 4 == 256 << 20 and dtype == "float32" and device == "cuda"
            return Buffer()

    compare.make_l2_flush(FakeTorch, "memset")()
    compare.make_l2_flush(FakeTorch, "read")()
    assert calls == ["zero_", "sum"]
    with pytest.raises(ValueError, match="'write'"):
        compare.make_l2_flush(FakeTorch, "write")
    _check_parses_without_torch("decode.py", "--flush", ["--flush", "write"], capsys)
    _check_parses_without_torch("decode.py", "--flush", ["--flush", "read", "--timer", "do_bench"], capsys)
