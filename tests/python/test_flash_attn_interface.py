# hopattn.flash_attn_interface, the drop-in for FlashAttention-3's flash_attn_interface module.
#  - Everywhere (no torch, no library): the signatures equal FA3's (names, order, defaults); every
#    unsupported argument raises NotImplementedError naming it, before any tensor is looked at
#    (every function hands softcap on, the KV-cache call too since C ABI 8; softcap's values are
#    tested in test_softcap.py); every function hands window_size on with FA3's causal rule (the KV-cache
#    call too, since C ABI 7);
#    flash_attn_combine is merge.combine_partials (test_merge.py tests its maths);
#    get_scheduler_metadata raises; importing it imports no torch;
#    flash_attn_varlen_func and flash_attn_with_kvcache hand every supported argument to
#    hopattn.varlen_attention / attention_with_kvcache (an int cache_seqlens broadcast to int32).
#    (varlen results and gradients are tested with hopattn.varlen_attention in test_varlen.py.)
#  - With the library (numpy, CPU reference): the supported functions return what hopattn.attention
#    returns, in FA3's return conventions; flash_attn_with_kvcache equals attention_with_kvcache
#    bitwise (contiguous and paged, with and without the append, the caches mutated alike, with
#    and without a sliding window).
#  - With torch on the CPU: unsupported arguments are reported before the CUDA-device check.
#  - With torch, the library and an sm_90 GPU: flash_attn_func / flash_attn_qkvpacked_func against
#    hopattn.attention (bitwise, forward and gradients) and against torch SDPA; flash_attn_with_kvcache
#    against hopattn.attention_with_kvcache (bitwise, out, lse and the appended caches; with a window).
import inspect
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hopattn
from hopattn import flash_attn_interface as fai
from hopattn import merge, ops
from hopattn_test_support import gpu_kernel_pair, gpu_qkv, optional_torch, rel_l2, require_library_or_skip_module

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()

# FlashAttention-3's signatures (Dao-AILab/flash-attention, hopper/flash_attn_interface.py, 2025),
# as (name, default) in order; REQUIRED marks a parameter without a default.
REQUIRED = object()
FA3_SIGNATURES = {
    "flash_attn_func": [
        ("q", REQUIRED), ("k", REQUIRED), ("v", REQUIRED), ("softmax_scale", None), ("causal", False),
        ("qv", None), ("q_descale", None), ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
        ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1), ("pack_gqa", None),
        ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False),
    ],
    "flash_attn_qkvpacked_func": [
        ("qkv", REQUIRED), ("softmax_scale", None), ("causal", False), ("q_descale", None),
        ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)), ("attention_chunk", 0),
        ("softcap", 0.0), ("deterministic", False), ("num_heads_q", None), ("sm_margin", 0),
        ("return_attn_probs", False),
    ],
    "flash_attn_varlen_func": [
        ("q", REQUIRED), ("k", REQUIRED), ("v", REQUIRED), ("cu_seqlens_q", REQUIRED), ("cu_seqlens_k", REQUIRED),
        ("max_seqlen_q", REQUIRED), ("max_seqlen_k", REQUIRED), ("seqused_q", None), ("seqused_k", None),
        ("softmax_scale", None), ("causal", False), ("qv", None), ("q_descale", None), ("k_descale", None),
        ("v_descale", None), ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
        ("num_splits", 1), ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0),
        ("return_attn_probs", False),
    ],
    "flash_attn_with_kvcache": [
        ("q", REQUIRED), ("k_cache", REQUIRED), ("v_cache", REQUIRED), ("k", None), ("v", None), ("qv", None),
        ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None), ("cache_batch_idx", None),
        ("cache_leftpad", None), ("page_table", None), ("cu_seqlens_q", None), ("cu_seqlens_k_new", None),
        ("max_seqlen_q", None), ("rotary_seqlens", None), ("q_descale", None), ("k_descale", None),
        ("v_descale", None), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
        ("attention_chunk", 0), ("softcap", 0.0), ("rotary_interleaved", True), ("scheduler_metadata", None),
        ("num_splits", 0), ("pack_gqa", None), ("sm_margin", 0), ("return_softmax_lse", False),
    ],
    "flash_attn_combine": [("out_partial", REQUIRED), ("lse_partial", REQUIRED), ("out", None), ("out_dtype", None)],
}


@pytest.mark.parametrize("name", list(FA3_SIGNATURES))
def test_signature_matches_flash_attention_3(name):
    params = inspect.signature(getattr(fai, name)).parameters.values()
    got = [(p.name, REQUIRED if p.default is inspect.Parameter.empty else p.default) for p in params]
    assert got == FA3_SIGNATURES[name]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)


def test_import_does_not_import_torch():
    code = "import sys, hopattn.flash_attn_interface; assert 'torch' not in sys.modules, 'torch imported'"
    python_dir = str(Path(hopattn.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([python_dir, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# --- unsupported arguments: no torch, no library --------------------------------------------------------

SENTINEL = object()  # stands for any tensor: the checks must not look at tensors at all

UNSUPPORTED = {
    "qv": SENTINEL,
    "q_descale": SENTINEL,
    "k_descale": SENTINEL,
    "v_descale": SENTINEL,
    "attention_chunk": 256,
    "num_splits": 2,
    "pack_gqa": "yes",
    "sm_margin": 8,
}
QKVPACKED_UNSUPPORTED = [a for a in UNSUPPORTED if a in dict(FA3_SIGNATURES["flash_attn_qkvpacked_func"])]


@pytest.mark.parametrize("argument", list(UNSUPPORTED))
def test_flash_attn_func_names_each_unsupported_argument(argument):
    with pytest.raises(NotImplementedError, match=rf"^flash_attn_func: {argument}="):
        fai.flash_attn_func(SENTINEL, SENTINEL, SENTINEL, **{argument: UNSUPPORTED[argument]})


@pytest.mark.parametrize("argument", QKVPACKED_UNSUPPORTED)
def test_flash_attn_qkvpacked_func_names_each_unsupported_argument(argument):
    with pytest.raises(NotImplementedError, match=rf"^flash_attn_qkvpacked_func: {argument}="):
        fai.flash_attn_qkvpacked_func(SENTINEL, **{argument: UNSUPPORTED[argument]})


@pytest.mark.parametrize("argument", list(UNSUPPORTED))
def test_flash_attn_varlen_func_names_each_unsupported_argument(argument):
    with pytest.raises(NotImplementedError, match=rf"^flash_attn_varlen_func: {argument}="):
        fai.flash_attn_varlen_func(SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL, 8, 8,
                                   **{argument: UNSUPPORTED[argument]})


class FakeE4m3:
    """Stands for a torch.float8_e4m3fn tensor: the drop-in tells FP8 inputs by the dtype's name.
    Indexing gives the view's shape (backed by an empty byte array), as qkv's unpacking needs."""

    dtype = "torch.float8_e4m3fn"

    def __init__(self, *shape, array=None):
        self.array = np.empty(shape, np.uint8) if array is None else array
        self.shape = self.array.shape

    def __getitem__(self, index):
        return FakeE4m3(array=self.array[index])


def test_flash_attn_func_on_e4m3_runs_forward_fp8_with_fa3s_descales(monkeypatch):
    # FA3's descales are (batch, nheads_k) for each of q, k, v; hopattn's q_descale is per query head
    # (each kv head's scale repeated over its group of 3) and q's and k's get a block axis of 1.
    from hopattn import fp8

    calls = []
    monkeypatch.setattr(fp8, "forward_fp8", lambda *args, **kw: calls.append((args, kw)) or "out")
    q, k, v = FakeE4m3(2, 64, 6, 128), FakeE4m3(2, 80, 2, 128), FakeE4m3(2, 80, 2, 128)
    qd = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    kd, vd = qd + 10, qd + 20
    assert fai.flash_attn_func(q, k, v, softmax_scale=0.25, causal=True, q_descale=qd, k_descale=kd, v_descale=vd,
                               return_attn_probs=True) == "out"
    (args, kw), = calls
    assert args[:3] == (q, k, v)
    np.testing.assert_array_equal(args[3][..., 0], [[1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4]])
    assert args[3].shape == (2, 6, 1) and args[4].shape == (2, 2, 1) and args[5].shape == (2, 2)
    assert args[3].flags.c_contiguous and args[4].flags.c_contiguous
    np.testing.assert_array_equal(args[4][..., 0], kd)
    np.testing.assert_array_equal(args[5], vd)
    assert kw == dict(causal=True, softmax_scale=0.25, return_lse=True)
    calls.clear()
    fai.flash_attn_func(q, k, v)  # no descales: 1, as in FA3
    assert calls[0][0][3:] == (None, None, None) and calls[0][1]["return_lse"] is False
    with pytest.raises(NotImplementedError, match=r"^flash_attn_func: window_size=\(128, 0\) with e4m3 inputs"):
        fai.flash_attn_func(q, k, v, causal=True, window_size=(128, 128))
    with pytest.raises(NotImplementedError, match=r"^flash_attn_func: softcap=30.0 with e4m3 inputs"):
        fai.flash_attn_func(q, k, v, softcap=30.0)
    with pytest.raises(NotImplementedError, match=r"^flash_attn_func: qv="):
        fai.flash_attn_func(q, k, v, qv=SENTINEL)


def test_flash_attn_qkvpacked_func_on_e4m3_runs_forward_fp8(monkeypatch):
    from hopattn import fp8

    calls = []
    monkeypatch.setattr(fp8, "forward_fp8", lambda *args, **kw: calls.append((args, kw)) or "out")
    qd = np.array([[1.0, 2.0]], dtype=np.float32)
    qkv = FakeE4m3(1, 16, 8, 64)  # GQA packing: 4 query heads, then 2 k heads, then 2 v heads
    assert fai.flash_attn_qkvpacked_func(qkv, q_descale=qd, k_descale=qd, num_heads_q=4) == "out"
    (args, kw), = calls
    assert [a.shape for a in args[:3]] == [(1, 16, 4, 64), (1, 16, 2, 64), (1, 16, 2, 64)]
    np.testing.assert_array_equal(args[3][..., 0], [[1, 1, 2, 2]])
    assert args[4].shape == (1, 2, 1) and args[5] is None
    calls.clear()
    fai.flash_attn_qkvpacked_func(FakeE4m3(1, 16, 3, 4, 64), causal=True)  # (b, s, 3, h, d), no descales
    assert [a.shape for a in calls[0][0][:3]] == [(1, 16, 4, 64)] * 3 and calls[0][1]["causal"] is True
    with pytest.raises(NotImplementedError, match=r"^flash_attn_qkvpacked_func: window_size=\(8, 8\) with e4m3"):
        fai.flash_attn_qkvpacked_func(qkv, window_size=(8, 8), num_heads_q=4)


def test_flash_attn_varlen_func_on_e4m3_runs_forward_fp8_varlen(monkeypatch):
    # Packed: heads are dim 1; the descales are (batch, nheads_k) as in flash_attn_func.
    from hopattn import fp8

    calls = []
    monkeypatch.setattr(fp8, "forward_fp8_varlen", lambda *args, **kw: calls.append((args, kw)) or "out")
    q, k, v = FakeE4m3(300, 4, 64), FakeE4m3(250, 2, 64), FakeE4m3(250, 2, 64)
    cu_q, cu_k, used_k = (np.zeros(3, np.int32) for _ in range(3))
    qd = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 200, 150, seqused_k=used_k, causal=True, q_descale=qd,
                                      v_descale=qd + 1) == "out"
    (args, kw), = calls
    assert args[:5] == (q, k, v, cu_q, cu_k) and args[5:7] == (200, 150)
    np.testing.assert_array_equal(args[7][..., 0], [[1, 1, 2, 2], [3, 3, 4, 4]])
    assert args[8] is None and args[9].shape == (2, 2)
    assert kw == dict(seqused_q=None, seqused_k=used_k, causal=True, softmax_scale=None, return_lse=False)
    with pytest.raises(NotImplementedError, match=r"^flash_attn_varlen_func: softcap=5.0 with e4m3 inputs"):
        fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 200, 150, softcap=5.0)


@pytest.mark.parametrize("deterministic", [False, True])
def test_flash_attn_varlen_func_passes_its_arguments_through(monkeypatch, deterministic):
    # deterministic reaches varlen_attention (and so the varlen backward), as every mapped argument.
    from hopattn import varlen

    calls = []
    monkeypatch.setattr(varlen, "varlen_attention", lambda *args, **kw: calls.append((args, kw)) or "out")
    q, k, v, cu_q, cu_k, used_q, used_k = (np.zeros(1) for _ in range(7))
    assert fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 9, seqused_q=used_q, seqused_k=used_k,
                                      softmax_scale=0.5, causal=True, deterministic=deterministic,
                                      return_attn_probs=True) == "out"
    (args, kw), = calls
    assert all(a is b for a, b in zip(args, (q, k, v, cu_q, cu_k))) and args[5:] == (8, 9)
    assert kw == dict(causal=True, softmax_scale=0.5, seqused_q=used_q, seqused_k=used_k, return_lse=True,
                      deterministic=deterministic, window_size=(-1, -1), softcap=0.0)


# (window_size, causal, what hopattn gets): FA3 sets the right bound to 0 under causal (mha_fwd:
# `if (is_causal) { window_size_right = 0; }`), which callers such as Transformers rely on.
FA3_WINDOWS = [
    ((-1, -1), False, (-1, -1)),
    ((-1, -1), True, (-1, -1)),
    ((4, 4), False, (4, 4)),
    ([4, 4], True, (4, 0)),
    ((0, 0), False, (0, 0)),
    ((-1, 7), True, (-1, 0)),
    ((np.int64(3), 2), False, (3, 2)),
]


@pytest.mark.parametrize("window_size, causal, want", FA3_WINDOWS)
def test_window_size_is_handed_on_with_fa3s_causal_rule(monkeypatch, window_size, causal, want):
    from hopattn import kvcache, varlen

    calls = []
    monkeypatch.setattr(ops, "attention", lambda *args, **kw: calls.append(kw["window_size"]) or "out")
    monkeypatch.setattr(varlen, "varlen_attention", lambda *args, **kw: calls.append(kw["window_size"]) or "out")
    monkeypatch.setattr(kvcache, "attention_with_kvcache", lambda *args, **kw: calls.append(kw["window_size"]) or "out")
    assert fai.flash_attn_func(SENTINEL, SENTINEL, SENTINEL, causal=causal, window_size=window_size) == "out"
    qkv = np.zeros((1, 2, 3, 1, 8))
    assert fai.flash_attn_qkvpacked_func(qkv, causal=causal, window_size=window_size) == "out"
    assert fai.flash_attn_varlen_func(SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL, 8, 8, causal=causal,
                                      window_size=window_size) == "out"
    # The KV-cache call (C ABI 7) takes the window with the same rule.
    assert fai.flash_attn_with_kvcache(SENTINEL, SENTINEL, SENTINEL, cache_seqlens=SENTINEL, causal=causal,
                                       window_size=window_size) == "out"
    assert calls == [want] * 4
    assert all(type(w) is tuple and all(type(x) is int for x in w) for w in calls)


@pytest.mark.parametrize("window_size", [None, 5, (1, 2, 3), ("a", 1), (1.5, 2), (True, 2), "ab"])
def test_window_size_must_be_a_pair_of_ints(window_size):
    # Checked before any tensor is looked at, as hopattn.attention checks it.
    for call in (lambda: fai.flash_attn_func(SENTINEL, SENTINEL, SENTINEL, window_size=window_size),
                 lambda: fai.flash_attn_varlen_func(SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL, 8, 8,
                                                    window_size=window_size),
                 lambda: fai.flash_attn_with_kvcache(SENTINEL, SENTINEL, SENTINEL, cache_seqlens=SENTINEL,
                                                     window_size=window_size)):
        with pytest.raises(TypeError, match="window_size"):
            call()


def test_flash_attn_with_kvcache_checks_the_window_then_softcap():
    # As flash_attn_func: the window's form first, then softcap's value, before any tensor.
    with pytest.raises(TypeError, match="window_size"):
        fai.flash_attn_with_kvcache(SENTINEL, SENTINEL, SENTINEL, cache_seqlens=SENTINEL, window_size="ab",
                                    softcap=-1.0)
    with pytest.raises(ValueError, match="softcap must be a finite float >= 0"):
        fai.flash_attn_with_kvcache(SENTINEL, SENTINEL, SENTINEL, cache_seqlens=SENTINEL, softcap=-1.0)


def test_tensor_arguments_are_named_by_shape_not_contents():
    value = np.zeros((2, 3, 4, 5), dtype=np.float32)
    with pytest.raises(NotImplementedError, match=r"qv=<ndarray of shape \(2, 3, 4, 5\)>"):
        fai.flash_attn_func(SENTINEL, SENTINEL, SENTINEL, qv=value)


# flash_attn_func's unsupported arguments that flash_attn_with_kvcache has too, and its own (its
# window_size and softcap are mapped).
KVCACHE_UNSUPPORTED = {
    **{name: UNSUPPORTED[name] for name in ("qv", "q_descale", "k_descale", "v_descale", "attention_chunk",
                                            "pack_gqa", "sm_margin")},
    "rotary_cos": SENTINEL,
    "rotary_sin": SENTINEL,
    "cache_batch_idx": SENTINEL,
    "cache_leftpad": SENTINEL,
    "cu_seqlens_q": SENTINEL,
    "cu_seqlens_k_new": SENTINEL,
    "max_seqlen_q": 4,
    "rotary_seqlens": SENTINEL,
    "rotary_interleaved": False,
    "scheduler_metadata": SENTINEL,
}


@pytest.mark.parametrize("argument", list(KVCACHE_UNSUPPORTED))
def test_flash_attn_with_kvcache_names_each_unsupported_argument(argument):
    with pytest.raises(NotImplementedError, match=rf"^flash_attn_with_kvcache: {argument}="):
        fai.flash_attn_with_kvcache(SENTINEL, SENTINEL, SENTINEL, cache_seqlens=SENTINEL,
                                    **{argument: KVCACHE_UNSUPPORTED[argument]})


@pytest.mark.parametrize("pack_gqa", [None, True, False])
@pytest.mark.parametrize("num_splits", [0, 1, 5])
def test_flash_attn_with_kvcache_passes_its_arguments_through(monkeypatch, pack_gqa, num_splits):
    from hopattn import kvcache

    calls = []
    monkeypatch.setattr(kvcache, "attention_with_kvcache", lambda *args, **kw: calls.append((args, kw)) or "out")
    q, k_cache, v_cache, k, v, seqlens, page_table = (np.zeros((3, 1)) for _ in range(7))
    assert fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens, page_table=page_table,
                                       softmax_scale=0.5, causal=True, num_splits=num_splits, pack_gqa=pack_gqa,
                                       return_softmax_lse=True, softcap=2) == "out"
    (args, kw), = calls
    assert all(a is b for a, b in zip(args, (q, k_cache, v_cache, seqlens)))
    assert kw.pop("k") is k and kw.pop("v") is v and kw.pop("page_table") is page_table
    assert kw == dict(causal=True, softmax_scale=0.5, num_splits=num_splits, return_lse=True, window_size=(-1, -1),
                      softcap=2.0)


def test_flash_attn_with_kvcache_int_and_missing_cache_seqlens(monkeypatch):
    # FA3 broadcasts an int cache_seqlens to int32 (batch,); None means the whole cache is valid.
    from hopattn import kvcache

    calls = []
    monkeypatch.setattr(kvcache, "attention_with_kvcache", lambda *args, **kw: calls.append(args[3]) or "out")
    q, cache = np.zeros((3, 1, 4, 8), np.float32), np.zeros((3, 10, 2, 8), np.float32)
    fai.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=7)
    fai.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=np.int64(6))
    fai.flash_attn_with_kvcache(q, cache, cache)
    fai.flash_attn_with_kvcache(q, cache, cache, page_table=np.zeros((3, 4), np.int32))  # 4 pages of 10
    for got, want in zip(calls, (7, 6, 10, 40)):
        assert got.dtype == np.int32 and got.tolist() == [want] * 3
    with pytest.raises(NotImplementedError, match="cache_seqlens=None"):
        fai.flash_attn_with_kvcache(q, cache, cache, k=cache[:, :1], v=cache[:, :1])


def test_combine_is_merge_combine_partials_and_scheduler_metadata_is_not_implemented_yet():
    rng = np.random.default_rng(0)
    out_partial = rng.standard_normal((3, 2, 5, 4, 8)).astype(np.float32)
    lse_partial = rng.standard_normal((3, 2, 4, 5)).astype(np.float32).swapaxes(2, 3)
    out, lse = fai.flash_attn_combine(out_partial, lse_partial, out_dtype=np.float16)
    want, want_lse = merge.combine_partials(out_partial, lse_partial, out_dtype=np.float16)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(lse, want_lse)
    assert out.dtype == np.float16 and lse.shape == (2, 5, 4)
    with pytest.raises(TypeError, match="out_partial: dtype must be float32"):
        fai.flash_attn_combine(out_partial.astype(np.float64), lse_partial)
    with pytest.raises(NotImplementedError, match="get_scheduler_metadata"):
        fai.get_scheduler_metadata(1, 1, 1, 1, 1, 64, SENTINEL)


# --- numpy through the CPU reference (library) ------------------------------------------------------


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


def numpy_qkv(batch=2, seqlen_q=5, seqlen_k=9, heads_q=4, heads_kv=2, head_dim=32, seed=0):
    rng = np.random.default_rng(seed)

    def rand(s, h):
        return rng.standard_normal((batch, s, h, head_dim)).astype(np.float32)

    return rand(seqlen_q, heads_q), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv)


def test_flash_attn_func_is_hopattn_attention(lib):
    q, k, v = numpy_qkv()
    out = fai.flash_attn_func(q, k, v, softmax_scale=0.2, causal=True, window_size=[-1, -1], num_splits=1)
    np.testing.assert_array_equal(out, hopattn.attention(q, k, v, causal=True, softmax_scale=0.2))
    out, lse = fai.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    want_out, want_lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    assert lse.shape == (2, 4, 5) and lse.dtype == np.float32  # (batch, nheads, seqlen_q)


@pytest.mark.parametrize("hint", [{"num_splits": 0}, {"pack_gqa": True}, {"pack_gqa": False}])
def test_tuning_hints_with_the_same_maths_are_accepted(lib, hint):
    q, k, v = numpy_qkv(seed=3)
    np.testing.assert_array_equal(fai.flash_attn_func(q, k, v, causal=True, **hint), hopattn.attention(q, k, v, causal=True))


def test_qkvpacked_five_dims(lib):
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((2, 7, 3, 4, 32)).astype(np.float32)
    out, lse = fai.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    want = hopattn.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True, return_lse=True)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(lse, want[1])


def test_qkvpacked_four_dims_with_num_heads_q(lib):
    rng = np.random.default_rng(2)
    qkv = rng.standard_normal((2, 7, 6 + 2 * 2, 32)).astype(np.float32)  # 6 q heads, 2 kv heads
    out = fai.flash_attn_qkvpacked_func(qkv, num_heads_q=6)
    np.testing.assert_array_equal(out, hopattn.attention(qkv[:, :, :6], qkv[:, :, 6:8], qkv[:, :, 8:]))


@pytest.mark.parametrize("shape, num_heads_q", [((2, 7, 4, 4, 32), None), ((2, 7, 9, 32), 4), ((2, 7, 10, 32), None)])
def test_qkvpacked_bad_layout_names_qkv(shape, num_heads_q):
    with pytest.raises(ValueError, match="qkv: "):
        fai.flash_attn_qkvpacked_func(np.zeros(shape, np.float32), num_heads_q=num_heads_q)


def kvcache_problem(page_size, seqlen_new, seed=0):
    """q, k_cache, v_cache, cache_seqlens, page_table (None when contiguous), k, v (None without
    seqlen_new): float32 numpy, a cache of capacity 16 per sequence, ragged lengths with 0."""
    rng = np.random.default_rng(seed)
    batch, heads_q, heads_kv, head_dim, capacity = 3, 4, 2, 16, 16
    if page_size:
        max_pages = capacity // page_size
        page_table = rng.permutation(batch * max_pages + 2)[: batch * max_pages].reshape(batch, max_pages)
        page_table = page_table.astype(np.int32)
        cache_shape = (batch * max_pages + 2, page_size, heads_kv, head_dim)
    else:
        page_table, cache_shape = None, (batch, capacity, heads_kv, head_dim)
    rand = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    k = v = None
    if seqlen_new:
        k, v = rand(batch, seqlen_new, heads_kv, head_dim), rand(batch, seqlen_new, heads_kv, head_dim)
    seqlens = np.array([5, 0, 16 - max(seqlen_new, 1)], np.int32)
    return rand(batch, 2, heads_q, head_dim), rand(*cache_shape), rand(*cache_shape), seqlens, page_table, k, v


@pytest.mark.parametrize("page_size", [0, 4], ids=["contiguous", "paged"])
@pytest.mark.parametrize("seqlen_new", [0, 2], ids=["no-append", "append"])
def test_flash_attn_with_kvcache_is_hopattn_attention_with_kvcache(lib, page_size, seqlen_new):
    q, k_cache, v_cache, seqlens, page_table, k, v = kvcache_problem(page_size, seqlen_new)
    caches = (k_cache.copy(), v_cache.copy())
    out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens,
                                           page_table=page_table, softmax_scale=0.3, causal=True, num_splits=3,
                                           return_softmax_lse=True)
    want_out, want_lse = hopattn.attention_with_kvcache(q, *caches, seqlens, k=k, v=v, page_table=page_table,
                                                        causal=True, softmax_scale=0.3, return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    assert lse.shape == (3, 4, 2) and lse.dtype == np.float32  # (batch, nheads, seqlen_q), as FA3's
    np.testing.assert_array_equal(k_cache, caches[0])  # appended to in place, alike
    np.testing.assert_array_equal(v_cache, caches[1])
    if seqlen_new:  # the append really happened
        assert not np.array_equal(k_cache, kvcache_problem(page_size, seqlen_new)[1])
    alone = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens + seqlen_new,
                                        page_table=page_table)
    assert isinstance(alone, np.ndarray)
    np.testing.assert_array_equal(alone, hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens + seqlen_new,
                                                                        page_table=page_table))


@pytest.mark.parametrize("page_size", [0, 4], ids=["contiguous", "paged"])
@pytest.mark.parametrize("window_size, causal, want", [((3, 1), False, (3, 1)), ((2, 2), True, (2, 0)),
                                                       ((-1, 0), False, (-1, 0)), ((100, 100), True, (100, 0))])
def test_flash_attn_with_kvcache_window_is_attention_with_kvcache(lib, page_size, window_size, causal, want):
    # FA3's causal rule: with causal the right bound becomes 0 (Transformers passes (w, w)).
    q, k_cache, v_cache, seqlens, page_table, k, v = kvcache_problem(page_size, 2, seed=4)
    caches = (k_cache.copy(), v_cache.copy())
    out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens,
                                           page_table=page_table, causal=causal, window_size=window_size,
                                           return_softmax_lse=True)
    want_out, want_lse = hopattn.attention_with_kvcache(q, *caches, seqlens, k=k, v=v, page_table=page_table,
                                                        causal=causal, window_size=want, return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    np.testing.assert_array_equal(k_cache, caches[0])
    if want != (100, 0):  # a window narrower than the cache changes the result
        plain = hopattn.attention_with_kvcache(q, k_cache.copy(), v_cache.copy(), seqlens + 2, page_table=page_table,
                                               causal=causal)
        assert not np.array_equal(out, plain)


def test_flash_attn_with_kvcache_int_cache_seqlens(lib):
    q, k_cache, v_cache, _, _, _, _ = kvcache_problem(0, 0, seed=1)
    out = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=9)
    np.testing.assert_array_equal(out, hopattn.attention_with_kvcache(q, k_cache, v_cache, np.full(3, 9, np.int32)))


# --- torch on the CPU ---------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("argument", list(UNSUPPORTED))
def test_unsupported_arguments_are_reported_before_the_device_check(argument):
    # CPU tensors would be refused by hopattn ("expected a CUDA tensor"); the argument comes first.
    q = torch.zeros((1, 4, 2, 64), dtype=torch.bfloat16)
    value = q if UNSUPPORTED[argument] is SENTINEL else UNSUPPORTED[argument]
    with pytest.raises(NotImplementedError, match=rf"flash_attn_func: {argument}="):
        fai.flash_attn_func(q, q, q, **{argument: value})
    with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
        fai.flash_attn_func(q, q, q)


@needs_torch
def test_a_strided_last_dim_is_copied_as_fa3_does_and_other_strides_are_kept():
    base = torch.zeros((2, 5, 4, 128))
    strided_last = base[..., ::2]
    copied = fai._last_dim_contiguous(strided_last)
    assert copied.stride(-1) == 1 and torch.equal(copied, strided_last)
    heads_major = base.transpose(1, 2).contiguous().transpose(1, 2)
    assert fai._last_dim_contiguous(heads_major) is heads_major
    array = np.zeros((2, 5, 4, 8))
    assert fai._last_dim_contiguous(array) is array


@needs_torch
def test_dynamo_traces_the_drop_in_functions_as_one_graph():
    # Fake CUDA tensors: tracing only, no GPU or library needed.
    if not hasattr(torch.library, "custom_op"):
        pytest.skip("needs torch 2.4+")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty((2, 16, 4, 128), dtype=torch.bfloat16, device="cuda")[..., ::2]  # copied, as FA3 does
        kv = torch.empty((2, 16, 2, 64), dtype=torch.bfloat16, device="cuda")
        qkv = torch.empty((2, 16, 3, 4, 64), dtype=torch.bfloat16, device="cuda")
        calls = [
            (lambda q, k, v: fai.flash_attn_func(q, k, v, causal=True, return_attn_probs=True), (q, kv, kv)),
            (lambda qkv: fai.flash_attn_qkvpacked_func(qkv, softmax_scale=0.1), (qkv,)),
            (lambda q, k, v: fai.flash_attn_with_kvcache(q, kv, kv, k=k, v=v, cache_seqlens=3,
                                                         return_softmax_lse=True), (q, kv[:, :1], kv[:, :1])),
        ]
        for fn, args in calls:
            explanation = torch._dynamo.explain(fn)(*args)
            assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


# --- GPU ------------------------------------------------------------------------------------------


def gpu_setup(want_backward):
    return gpu_kernel_pair(want_backward, prefer_head_dim=128)



def sdpa(q, k, v, causal, softmax_scale=None):
    """torch SDPA (its default backend) in the (batch, seqlen, heads, head_dim) layout, GQA by
    repeating kv heads; causal needs seqlen_q == seqlen_k here (SDPA's is_causal is top-left)."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    kt, vt = (t.repeat_interleave(group, dim=1) for t in (kt, vt))
    out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=softmax_scale)
    return out.transpose(1, 2)


def grads_of(fn, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(dout)
    return out.detach(), [t.grad for t in leaves]


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)], ids=["mha", "gqa"])
def test_flash_attn_func_equals_hopattn_attention_bitwise(causal, heads):
    dtype, head_dim = gpu_setup(want_backward=True)
    q, k, v, dout = gpu_qkv(2, 200, 333, *heads, head_dim, dtype, seed=1)
    ours = grads_of(lambda *t: fai.flash_attn_func(*t, causal=causal, deterministic=True), q, k, v, dout)
    theirs = grads_of(lambda *t: hopattn.attention(*t, causal=causal, deterministic=True), q, k, v, dout)
    assert torch.equal(ours[0], theirs[0])
    for name, a, b in zip(("dq", "dk", "dv"), ours[1], theirs[1]):
        assert torch.equal(a, b), name
    out, lse = fai.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    want_out, want_lse = hopattn.attention(q, k, v, causal=causal, return_lse=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    assert lse.shape == (2, heads[0], 200) and lse.dtype == torch.float32


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)], ids=["mha", "gqa"])
def test_flash_attn_func_matches_torch_sdpa(causal, heads):
    dtype, head_dim = gpu_setup(want_backward=True)
    q, k, v, dout = gpu_qkv(2, 256, 256, *heads, head_dim, dtype, seed=2)
    scale = 0.7 / math.sqrt(head_dim)
    ours = grads_of(lambda *t: fai.flash_attn_func(*t, softmax_scale=scale, causal=causal), q, k, v, dout)
    ref = grads_of(lambda *t: sdpa(*t, causal, scale), *(t.double() for t in (q, k, v, dout)))  # float64
    theirs = grads_of(lambda *t: sdpa(*t, causal, scale), q, k, v, dout)
    assert rel_l2(ours[0], ref[0]) <= max(2 * rel_l2(theirs[0], ref[0]), 1e-2)
    for name, a, r, s in zip(("dq", "dk", "dv"), ours[1], ref[1], theirs[1]):
        err, sdpa_err = rel_l2(a, r), rel_l2(s, r)
        assert err <= max(2 * sdpa_err, 2e-2), f"{name}: rel-L2 {err:.3e} vs SDPA's {sdpa_err:.3e}"


@needs_gpu
def test_flash_attn_func_takes_a_strided_last_dim():
    dtype, head_dim = gpu_setup(want_backward=False)
    q, k, v, _ = gpu_qkv(1, 64, 64, 2, 2, 2 * head_dim, dtype, seed=4)
    q, k, v = (t[..., ::2] for t in (q, k, v))  # hopattn.attention alone raises "last dim" here
    out = fai.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(out, hopattn.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True))


@needs_gpu
def test_qkvpacked_gradient_lands_in_the_packed_tensor():
    dtype, head_dim = gpu_setup(want_backward=True)
    gen = torch.Generator(device="cuda").manual_seed(3)
    qkv = torch.randn((2, 150, 3, 4, head_dim), generator=gen, device="cuda").to(dtype).requires_grad_()
    dout = torch.randn((2, 150, 4, head_dim), generator=gen, device="cuda").to(dtype)
    fai.flash_attn_qkvpacked_func(qkv, causal=True, deterministic=True).backward(dout)
    _, want = grads_of(lambda *t: hopattn.attention(*t, causal=True, deterministic=True),
                       qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dout)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert torch.equal(qkv.grad[:, :, i], want[i]), name


@needs_gpu
def test_forward_only_head_dims_still_run_forward():
    # A head_dim with a forward kernel but no backward one (if the build has such) works without grad.
    kernels = hopattn.build_info()["kernels"]
    backward = {(d, h) for kind, d, h in kernels if kind == "bwd"}
    fwd_only = sorted({(d, h) for kind, d, h in kernels if kind == "fwd"} - backward)
    if not fwd_only:
        pytest.skip("every forward kernel has a backward kernel in this build")
    dtype_name, head_dim = fwd_only[0]
    q, k, v, _ = gpu_qkv(1, 64, 64, 2, 2, head_dim, {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name])
    out = fai.flash_attn_func(q, k, v, causal=True)
    assert rel_l2(out, sdpa(q, k, v, True)) < 2e-2


@needs_gpu
@pytest.mark.parametrize("page_size", [0, 16], ids=["contiguous", "paged"])
@pytest.mark.parametrize("seqlen_new", [0, 1], ids=["no-append", "append"])
def test_flash_attn_with_kvcache_equals_attention_with_kvcache_bitwise(page_size, seqlen_new):
    dtype, head_dim = gpu_setup(want_backward=False)
    arrays = kvcache_problem(page_size, seqlen_new, seed=2)
    q, k_cache, v_cache, seqlens, page_table, k, v = (
        None if a is None else torch.from_numpy(a).cuda() if a.dtype == np.int32 else
        torch.from_numpy(np.ascontiguousarray(np.resize(a, a.shape[:-1] + (head_dim,)))).to("cuda", dtype)
        for a in arrays
    )
    caches = (k_cache.clone(), v_cache.clone())
    out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens,
                                           page_table=page_table, causal=True, return_softmax_lse=True)
    want_out, want_lse = hopattn.attention_with_kvcache(q, *caches, seqlens, k=k, v=v, page_table=page_table,
                                                        causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    assert torch.equal(k_cache, caches[0]) and torch.equal(v_cache, caches[1])
    out = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=int(seqlens.max()), page_table=page_table)
    want = hopattn.attention_with_kvcache(q, k_cache, v_cache, torch.full_like(seqlens, int(seqlens.max())),
                                          page_table=page_table)
    assert torch.equal(out, want)
    # A sliding window with FA3's causal rule: (3, 3) with causal is hopattn's (3, 0).
    out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, page_table=page_table,
                                           causal=True, window_size=(3, 3), return_softmax_lse=True)
    want_out, want_lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table,
                                                        causal=True, window_size=(3, 0), return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


def fp8_head_dim_or_skip():
    """A head dim with a bf16-output FP8 kernel in this build (128 if there), else skip."""
    require_library_or_skip_module()
    built = {hd for kind, dt, hd in hopattn.build_info()["kernels"] if kind == "fp8" and dt == "bf16"}
    if not built:
        pytest.skip("no bf16 FP8 kernel in this build")
    return 128 if 128 in built else min(built)


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attn_func_on_e4m3_is_forward_fp8(causal):
    """FA3's FP8 call: e4m3 q, k, v with (batch, nheads_k) descales. The drop-in's output is
    forward_fp8's on the same codes with q's descale repeated over each group (bitwise), and within
    FP8 error of bf16 attention on the dequantised inputs."""
    head_dim = fp8_head_dim_or_skip()
    q, k, v, _ = gpu_qkv(2, 200, 333, 8, 2, head_dim, torch.bfloat16, seed=4)

    def quantise(x):  # one scale per (batch, kv head): for q, over the kv head's group of query heads
        b, s, h, d = x.shape
        groups = x.float().reshape(b, s, 2, h // 2, d)
        amax = groups.abs().amax(dim=(1, 3, 4)).clamp_min(1e-12)  # (batch, 2)
        codes = (groups / (amax / 448)[:, None, :, None, None]).to(torch.float8_e4m3fn).reshape(b, s, h, d)
        return codes, (amax / 448).contiguous()

    (q8, qd), (k8, kd), (v8, vd) = (quantise(t) for t in (q, k, v))
    out, lse = fai.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                                   return_attn_probs=True)
    want, want_lse = hopattn.forward_fp8(q8, k8, v8, qd.repeat_interleave(4, dim=1)[:, :, None].contiguous(),
                                         kd[:, :, None].contiguous(), vd, causal=causal, return_lse=True)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want) and torch.equal(lse, want_lse)
    dequant = [(c.float().reshape(2, -1, 2, c.shape[2] // 2, head_dim) * d[:, None, :, None, None]).reshape(c.shape)
               for c, d in ((q8, qd), (k8, kd), (v8, vd))]
    if not causal:  # SDPA's causal is top-left: compare the full mask only
        ref = sdpa(*(t.to(torch.bfloat16) for t in dequant), causal=False).float()
        assert ((out.float() - ref).norm() / ref.norm()).item() < 6e-2


@needs_gpu
def test_flash_attn_varlen_func_on_e4m3_is_forward_fp8_varlen():
    """The packed FP8 call: bitwise forward_fp8_varlen's output with q's descale expanded by hand."""
    head_dim = fp8_head_dim_or_skip()
    gen = torch.Generator(device="cuda").manual_seed(6)
    lens_q, lens_k = [100, 37], [150, 90]
    cu_q = torch.tensor([0, 100, 137], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 150, 240], dtype=torch.int32, device="cuda")
    q8, k8, v8 = (torch.randn((n, h, head_dim), generator=gen, device="cuda").to(torch.float8_e4m3fn)
                  for n, h in ((sum(lens_q), 8), (sum(lens_k), 2), (sum(lens_k), 2)))
    qd, kd, vd = (torch.rand((2, 2), generator=gen, device="cuda") + 0.5 for _ in range(3))
    for causal in (False, True):
        out = fai.flash_attn_varlen_func(q8, k8, v8, cu_q, cu_k, 100, 150, causal=causal, q_descale=qd, k_descale=kd,
                                         v_descale=vd)
        want = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 100, 150,
                                          qd.repeat_interleave(4, dim=1)[:, :, None].contiguous(),
                                          kd[:, :, None].contiguous(), vd, causal=causal)
        assert out.dtype == torch.bfloat16 and torch.equal(out, want)


@needs_gpu
def test_flash_attn_qkvpacked_func_on_e4m3_is_flash_attn_func_on_its_views():
    head_dim = fp8_head_dim_or_skip()
    gen = torch.Generator(device="cuda").manual_seed(8)
    qkv = torch.randn((2, 150, 3, 4, head_dim), generator=gen, device="cuda").to(torch.float8_e4m3fn)
    qd, kd, vd = (torch.rand((2, 4), generator=gen, device="cuda") + 0.5 for _ in range(3))
    out = fai.flash_attn_qkvpacked_func(qkv, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    want = fai.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True, q_descale=qd, k_descale=kd,
                               v_descale=vd)
    assert torch.equal(out, want)


@needs_gpu
def test_flash_attn_combine_of_key_splits_is_attention_over_all_keys():
    """Split-KV by hand: hopattn.attention over three key chunks of unequal length, their outputs
    and LSEs in FA3's partial layout, combined on the GPU: equal to attention over all keys, and to
    the same combine on the CPU (numpy)."""
    dtype, head_dim = gpu_setup(want_backward=False)
    q, k, v, _ = gpu_qkv(2, 150, 300, 8, 2, head_dim, dtype, seed=9)
    cuts = [0, 90, 200, 300]
    outs, lses = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        o, l = hopattn.attention(q, k[:, a:b], v[:, a:b], return_lse=True)
        outs.append(o.float())
        lses.append(l)  # (batch, heads, seqlen_q)
    out_partial = torch.stack(outs)  # (splits, batch, seqlen, heads, head_dim)
    lse_partial = torch.stack(lses).transpose(2, 3)  # FA3's: (splits, batch, seqlen, heads), seqlen stride 1
    want, want_lse = hopattn.attention(q, k, v, return_lse=True)
    out = torch.full_like(want, float("nan"))
    got, lse = fai.flash_attn_combine(out_partial, lse_partial, out=out, out_dtype=dtype)
    assert got is out and out.dtype == dtype and lse.shape == (2, 150, 8) and lse.device == q.device
    assert rel_l2(out.float(), want.float()) < 1e-2
    assert (lse.transpose(1, 2) - want_lse).abs().max().item() < 1e-4
    cpu_out, cpu_lse = merge.combine_partials(out_partial.cpu().numpy(), lse_partial.cpu().numpy())
    fp32, fp32_lse = fai.flash_attn_combine(out_partial, lse_partial)
    assert fp32.dtype == torch.float32
    assert np.abs(fp32.cpu().numpy() - cpu_out).max() < 1e-5
    assert np.abs(fp32_lse.cpu().numpy() - cpu_lse).max() < 1e-5
