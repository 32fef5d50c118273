# hopattn.attention_with_kvcache (python/hopattn/kvcache.py): decoding against a contiguous or paged
# KV cache with an optional in-place append, over the C ABI's hopattn_attention_with_kvcache(_cpu).
#  - Everywhere: the signature, the C struct's layout (by hand and, with a C compiler, against
#    hopattn_c.h), argument types checked before the library is loaded.
#  - With the library (numpy, the CPU reference): each sequence against a float64 formula on its
#    keys gathered by hand, contiguous and paged (random page tables), GQA/MQA, causal with
#    seqlen_q > 1, ragged lengths with 0, the append (new rows written, all else untouched), lse;
#    the library's errors reach the exception with the argument named. Sliding windows (C ABI 7):
#    left only, right only, both, causal with a left bound, the diagonal, wider than the cache,
#    seqlen_q 1 and 4, GQA/MQA, contiguous and paged, with an append, rows that see no key; against
#    the float64 formula and bitwise against hopattn.attention (the CPU reference) on each
#    sequence's gathered keys; bad windows named (window.left / window.right / window_size).
#  - With torch, no GPU: CPU tensors refused by attention_with_kvcache. The custom op
#    hopattn::fwd_kvcache (torch_ops.py): its schema (k_cache, v_cache mutated), its CPU kernel (the
#    CPU reference) equal to the numpy binding bitwise, caches appended alike, torch.library.opcheck,
#    torch.compile(fullgraph=True, aot_eager) equal to eager with the same cache mutation, the fake
#    implementation, and attention_with_kvcache traced by dynamo into one graph holding the op
#    (fake CUDA tensors); the window (window_left / window_right, last in the schema) through all of it.
#  - With torch, the library and an sm_90 GPU: bf16/fp16 against the float64 formula for page sizes
#    16/64/256 and contiguous caches, the append, split counts, determinism, check_index_values,
#    the workspace on a side stream; the op route equal to the direct one bitwise;
#    torch.compile(fullgraph=True) equal to eager (out, lse, the appended caches); a decode step
#    captured in a CUDA graph and replayed equal to eager. With sliding windows: against the float64
#    formula and against hopattn.attention on the gathered keys, split counts, determinism, the op
#    route, torch.compile and CUDA graphs.
import ctypes
import functools
import inspect
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hopattn
from hopattn import _lib
from hopattn_test_support import naive_attention, optional_torch, require_library_or_skip_module

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


# --- no library needed ----------------------------------------------------------------------------


def test_signature():
    params = list(inspect.signature(hopattn.attention_with_kvcache).parameters)
    assert params == ["q", "k_cache", "v_cache", "cache_seqlens", "k", "v", "page_table", "causal", "softmax_scale",
                      "num_splits", "return_lse", "check_index_values", "window_size", "softcap"]
    window = inspect.signature(hopattn.attention_with_kvcache).parameters["window_size"].default
    assert window == (-1, -1) and window is hopattn.ops.NO_WINDOW
    last = list(inspect.signature(hopattn.attention_with_kvcache).parameters.values())[-1]
    assert (last.name, last.default) == ("softcap", 0.0)  # C ABI 8
    assert "attention_with_kvcache" in hopattn.__all__


# 9 tensors of 80 bytes (720) + causal, has_softmax_scale, softmax_scale, num_splits,
# check_index_values, has_window (744) + int64 window_left, window_right (ABI 7) + float softcap
# (ABI 8, 764) -> padded to 768.
KV_SIZE = 768
KV_OFFSETS = {"q": 0, "k_cache": 80, "v_cache": 160, "cache_seqlens": 240, "page_table": 320, "k_new": 400,
              "v_new": 480, "out": 560, "lse": 640, "causal": 720, "has_softmax_scale": 724, "softmax_scale": 728,
              "num_splits": 732, "check_index_values": 736, "has_window": 740, "window_left": 744,
              "window_right": 752, "softcap": 760}


def test_struct_layout():
    cls = _lib.HopattnKvcacheArgs
    assert ctypes.sizeof(cls) == KV_SIZE
    for field, offset in KV_OFFSETS.items():
        assert getattr(cls, field).offset == offset, field
    header = (REPO_ROOT / "include" / "hopattn" / "hopattn_c.h").read_text()
    body = re.search(r"typedef struct hopattn_kvcache_args \{(.*?)\} hopattn_kvcache_args;", header, re.DOTALL).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.DOTALL)
    names = [n.strip() for decl in body.split(";") if decl.strip() for n in decl.split(None, 1)[1].split(",")]
    assert names == [name for name, _ in cls._fields_]


def test_struct_layout_matches_the_c_compiler(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ['printf("size %zu\\n", sizeof(hopattn_kvcache_args));']
    lines += [f'printf("{f} %zu\\n", offsetof(hopattn_kvcache_args, {f}));' for f in KV_OFFSETS]
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "hopattn/hopattn_c.h"\nint main(void) {\n'
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-I", str(REPO_ROOT / "include"), str(src), "-o", str(exe)], check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                       text=True).stdout.splitlines())
    assert int(got.pop("size")) == KV_SIZE
    assert {k: int(v) for k, v in got.items()} == KV_OFFSETS


def test_pack_helper_fills_every_field():
    t = [_lib.make_tensor(0x1000 * (i + 1), _lib.DTYPE_BF16, (1, 2, 3, 16), (96, 48, 16, 1)) for i in range(9)]
    a = _lib.make_kvcache_args(t[0], t[1], t[2], t[3], None, None, None, t[7], None, True, 0.5, 7, True)
    assert (a.causal, a.has_softmax_scale, a.softmax_scale, a.num_splits, a.check_index_values) == (1, 1, 0.5, 7, 1)
    assert a.page_table.data is None and a.k_new.ndim == 0 and a.v_new.ndim == 0 and a.lse.ndim == 0
    assert a.out.data == 0x8000 and a.cache_seqlens.data == 0x4000
    assert (a.has_window, a.window_left, a.window_right) == (0, -1, -1)  # no window_size: none
    b = _lib.make_kvcache_args(*t[:4], t[4], t[5], t[6], t[7], t[8], False, None, 0, False)
    assert (b.page_table.data, b.k_new.data, b.v_new.data, b.lse.data) == (0x5000, 0x6000, 0x7000, 0x9000)
    assert (b.causal, b.has_softmax_scale, b.num_splits, b.check_index_values) == (0, 0, 0, 0)
    for window, fields in [((-1, -1), (0, -1, -1)), (None, (0, -1, -1)), ((5, -1), (1, 5, -1)), ((-1, 0), (1, -1, 0)),
                           ([3, 2], (1, 3, 2)), ((1 << 40, 0), (1, 1 << 40, 0)), ((-2, 7), (1, -2, 7))]:
        c = _lib.make_kvcache_args(*t[:4], None, None, None, t[7], None, False, None, 0, False, window)
        assert (c.has_window, c.window_left, c.window_right) == fields, window


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"num_splits": True}, TypeError, "num_splits must be an int"),
        ({"num_splits": 1.5}, TypeError, "num_splits must be an int"),
        ({"num_splits": 1 << 40}, hopattn.InvalidArgumentError, "does not fit in int32"),
        ({"softmax_scale": "x"}, TypeError, "softmax_scale"),
        ({"k": np.zeros((1, 1, 1, 8), np.float32)}, hopattn.InvalidArgumentError, "only k is"),
        ({"v": np.zeros((1, 1, 1, 8), np.float32)}, hopattn.InvalidArgumentError, "only v is"),
        ({"window_size": None}, TypeError, "window_size must be a"),
        ({"window_size": 4}, TypeError, "window_size must be a"),
        ({"window_size": (1, 2, 3)}, TypeError, "window_size must be a"),
        ({"window_size": (1.5, 0)}, TypeError, r"window_size\[0\] \(left\) must be an int"),
        ({"window_size": (2, True)}, TypeError, r"window_size\[1\] \(right\) must be an int"),
        ({"window_size": ("a", 0)}, TypeError, r"window_size\[0\]"),
        ({"window_size": (1 << 70, 0)}, hopattn.InvalidArgumentError, "does not fit in int64"),
    ],
)
def test_arguments_checked_before_the_library(kw, exc, match):
    q = np.zeros((1, 1, 1, 8), np.float32)
    with pytest.raises(exc, match=match):
        hopattn.attention_with_kvcache(q, q, q, np.zeros(1, np.int32), **kw)


def test_q_type():
    with pytest.raises(TypeError, match="q: expected a torch.Tensor"):
        hopattn.attention_with_kvcache([1.0], None, None, None)


# --- numpy: the CPU reference ------------------------------------------------------------------------


def gather(cache, page_table, b, length):
    """Sequence b's first `length` cached rows, (length, heads_kv, head_dim)."""
    if page_table is None:
        return cache[b, :length]
    page_size = cache.shape[1]
    pages = page_table[b, : -(-length // page_size)]
    return cache[pages].reshape(-1, *cache.shape[2:])[:length]


def make_problem(batch_lens, seqlen_q, heads_q, heads_kv, head_dim, capacity, page_size, seqlen_new, dtype=np.float32,
                 seed=0, extra_pages=3):
    """Random q, k_cache, v_cache, cache_seqlens, page_table (None when contiguous), k, v (None
    without seqlen_new)."""
    rng = np.random.default_rng(seed)
    batch = len(batch_lens)

    def rand(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    if page_size:
        max_pages = capacity // page_size
        num_pages = batch * max_pages + extra_pages
        page_table = rng.permutation(num_pages)[: batch * max_pages].reshape(batch, max_pages).astype(np.int32)
        shape = (num_pages, page_size, heads_kv, head_dim)
    else:
        page_table = None
        shape = (batch, capacity, heads_kv, head_dim)
    q = rand(batch, seqlen_q, heads_q, head_dim, scale=1.5)
    k_cache, v_cache = rand(*shape), rand(*shape)
    seqlens = np.array(batch_lens, dtype=np.int32)
    k = v = None
    if seqlen_new:
        k, v = rand(batch, seqlen_new, heads_kv, head_dim), rand(batch, seqlen_new, heads_kv, head_dim)
    return q, k_cache, v_cache, seqlens, page_table, k, v


def expected(q, k_cache, v_cache, seqlens, page_table, k, v, causal, softmax_scale=None, window_size=(-1, -1),
             softcap=0.0):
    """(out, lse, k_cache_after, v_cache_after) in float64 from the formula on gathered keys; the
    window is bottom-right aligned per sequence over its keys after the append."""
    kc, vc = k_cache.astype(np.float64), v_cache.astype(np.float64)
    batch = q.shape[0]
    new = 0 if k is None else k.shape[1]
    for b in range(batch):
        for t in range(new):
            pos = seqlens[b] + t
            if page_table is None:
                kc[b, pos], vc[b, pos] = k[b, t], v[b, t]
            else:
                page, row = page_table[b, pos // kc.shape[1]], pos % kc.shape[1]
                kc[page, row], vc[page, row] = k[b, t], v[b, t]
    outs, lses = [], []
    for b in range(batch):
        length = int(seqlens[b]) + new
        o, l = naive_attention(q[b : b + 1], gather(kc, page_table, b, length)[None], gather(vc, page_table, b, length)[None],
                               causal=causal, softmax_scale=softmax_scale, window_size=window_size, softcap=softcap)
        outs.append(o[0])
        lses.append(l[0])
    return np.stack(outs), np.stack(lses), kc, vc


CPU_CASES = {
    # (lens, seqlen_q, heads_q, heads_kv, head_dim, capacity, page_size, seqlen_new, causal)
    "contig": ([5, 0, 1, 30], 1, 4, 2, 16, 32, 0, 0, False),
    "contig-append-causal": ([5, 0, 1, 28], 3, 4, 2, 16, 32, 0, 2, True),
    "paged4-gqa": ([7, 0, 19, 32], 1, 8, 2, 8, 32, 4, 0, False),
    "paged16-append-causal": ([0, 1, 17, 45], 4, 4, 4, 16, 48, 16, 3, True),
    "paged1-mqa": ([3, 9], 2, 4, 1, 8, 12, 1, 1, True),
    "paged5-odd": ([0, 24, 11], 2, 6, 3, 8, 25, 5, 1, False),
}


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_numpy_against_float64_on_gathered_keys(lib, name):
    lens, sq, hq, hkv, d, capacity, page, new, causal = CPU_CASES[name]
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem(lens, sq, hq, hkv, d, capacity, page, new)
    want_out, want_lse, want_k, want_v = expected(q, k_cache, v_cache, seqlens, page_table, k, v, causal)
    out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=causal, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (len(lens), hq, sq)
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)
    assert np.all(out[np.isinf(lse).transpose(0, 2, 1)] == 0)  # rows without keys: exactly 0
    # The append is in place and touches nothing else (float32 rows copied bit for bit).
    np.testing.assert_array_equal(k_cache, want_k.astype(np.float32))
    np.testing.assert_array_equal(v_cache, want_v.astype(np.float32))


def test_numpy_float16_and_scale(lib):
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem([3, 20], 2, 4, 2, 16, 24, 8, 2, dtype=np.float16)
    want_out, _, _, _ = expected(q, k_cache, v_cache, seqlens, page_table, k, v, True, softmax_scale=0.3)
    out = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table, causal=True,
                                         softmax_scale=0.3)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=2e-3, atol=2e-3)


def test_numpy_num_splits_is_ignored_on_the_cpu(lib):
    args = make_problem([9, 2], 1, 4, 2, 8, 16, 0, 0)
    outs = [hopattn.attention_with_kvcache(*args[:4], num_splits=s) for s in (0, 1, 7)]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: a["seqlens"].__setitem__(1, 31), r"cache_seqlens\[1\]=31 plus seqlen_new=2 exceeds the cache capacity 32"),
        (lambda a: a["seqlens"].__setitem__(0, -1), r"cache_seqlens\[0\]=-1 is negative"),
        (lambda a: a["page_table"].__setitem__((0, 0), 99), r"page_table\[0\]\[0\]=99 is outside \[0, num_pages="),
        (lambda a: a.__setitem__("seqlens", a["seqlens"][:1].copy()), r"cache_seqlens.sizes\[0\]=1 but q has batch 2"),
        (lambda a: a.__setitem__("page_table", a["page_table"].astype(np.int64)), "page_table: dtype must be int32"),
        (lambda a: a.__setitem__("k", a["k"][:, :, :1].copy()), r"k_new.sizes\[2\] \(heads_kv\)=1"),
        (lambda a: a.__setitem__("num_splits", -3), "num_splits=-3 is negative"),
    ],
)
def test_library_errors_name_the_argument(lib, mutate, match):
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem([3, 20], 1, 4, 2, 8, 32, 8, 2)
    a = {"seqlens": seqlens, "page_table": page_table, "k": k, "num_splits": 0}
    mutate(a)
    with pytest.raises(hopattn.InvalidArgumentError, match=match):
        hopattn.attention_with_kvcache(q, k_cache, v_cache, a["seqlens"], k=a["k"], v=v, page_table=a["page_table"],
                                       num_splits=a["num_splits"])


def test_numpy_read_only_cache_refused_for_append(lib):
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem([3], 1, 2, 2, 8, 8, 0, 1)
    k_cache.flags.writeable = False
    with pytest.raises(hopattn.InvalidArgumentError, match="k_cache is read-only"):
        hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v)
    hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens)  # no append: fine


# --- numpy: sliding windows (C ABI 7) -------------------------------------------------------------------

HUGE = 1 << 40  # wider than any cache: the library compares int64 bounds before any arithmetic

WINDOW_CASES = {
    # (lens, seqlen_q, heads_q, heads_kv, head_dim, capacity, page_size, seqlen_new, causal, window)
    "left-sq1-contig": ([5, 0, 1, 30], 1, 4, 2, 16, 32, 0, 0, False, (3, -1)),
    "left-sq4-paged4-append-gqa": ([7, 0, 19, 28], 4, 8, 2, 8, 32, 4, 2, False, (5, -1)),
    "right-sq4-contig-append": ([5, 0, 1, 26], 4, 4, 2, 16, 32, 0, 3, False, (-1, 1)),
    "right0-sq4-paged5": ([0, 24, 11], 4, 6, 3, 8, 25, 5, 0, False, (-1, 0)),
    "both-sq4-paged16-append": ([0, 1, 17, 45], 4, 4, 4, 16, 48, 16, 3, False, (2, 1)),
    "diagonal-sq4-contig": ([6, 2, 0, 3], 4, 4, 2, 8, 8, 0, 0, False, (0, 0)),
    "causal-left-sq1-paged5-append-mqa": ([3, 9, 20], 1, 4, 1, 8, 25, 5, 1, True, (4, -1)),
    "causal-left0-sq4-contig-append-gqa": ([5, 0, 1, 28], 4, 8, 2, 16, 32, 0, 2, True, (2, 0)),
    "causal-wider-than-cache-sq4-paged4": ([5, 0, 11], 4, 4, 2, 16, 16, 4, 1, True, (1000, -1)),
    "wider-than-cache-sq1-contig": ([5, 0, 30], 1, 4, 2, 16, 32, 0, 0, False, (HUGE, HUGE)),
}


def attention_on_gathered_keys(q, k_cache, v_cache, seqlens, page_table, new, causal, window, **kw):
    """(out, lse): hopattn.attention (the dense CPU reference) on each sequence's keys gathered by
    hand from the caches (after the append), sequence by sequence."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        length = int(seqlens[b]) + new
        keys = gather(k_cache, page_table, b, length)[None]
        values = gather(v_cache, page_table, b, length)[None]
        o, l = hopattn.attention(q[b : b + 1], np.ascontiguousarray(keys), np.ascontiguousarray(values),
                                 causal=causal, return_lse=True, window_size=window, **kw)
        outs.append(o[0])
        lses.append(l[0])
    return np.stack(outs), np.stack(lses)


@pytest.mark.parametrize("name", list(WINDOW_CASES))
def test_numpy_window_against_float64_and_attention_on_gathered_keys(lib, name):
    lens, sq, hq, hkv, d, capacity, page, new, causal, window = WINDOW_CASES[name]
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem(lens, sq, hq, hkv, d, capacity, page, new, seed=11)
    want_out, want_lse, want_k, want_v = expected(q, k_cache, v_cache, seqlens, page_table, k, v, causal,
                                                  window_size=window)
    out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=causal, return_lse=True, window_size=window)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (len(lens), hq, sq)
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)
    assert np.all(out[np.isinf(lse).transpose(0, 2, 1)] == 0)  # rows whose window holds no key: exactly 0
    np.testing.assert_array_equal(k_cache, want_k.astype(np.float32))  # the append, as without a window
    np.testing.assert_array_equal(v_cache, want_v.astype(np.float32))
    # The KV-cache CPU reference runs the dense one on each sequence's gathered keys: the same bits.
    gathered_out, gathered_lse = attention_on_gathered_keys(q, k_cache, v_cache, seqlens, page_table, new, causal,
                                                            window)
    np.testing.assert_array_equal(out, gathered_out)
    np.testing.assert_array_equal(lse, gathered_lse)


def test_numpy_window_changes_what_is_seen(lib):
    # Guards against a window silently dropped: a narrow window differs from none, a huge one does not.
    args = make_problem([20, 9], 4, 4, 2, 16, 24, 0, 0, seed=12)
    plain = hopattn.attention_with_kvcache(*args[:4], causal=True)
    assert not np.array_equal(hopattn.attention_with_kvcache(*args[:4], causal=True, window_size=(3, 0)), plain)
    np.testing.assert_array_equal(hopattn.attention_with_kvcache(*args[:4], causal=True, window_size=(HUGE, 0)), plain)
    np.testing.assert_array_equal(hopattn.attention_with_kvcache(*args[:4], causal=True, window_size=[-1, -1]), plain)
    # causal is the window's right bound 0, so (-1, 0) without causal equals causal.
    np.testing.assert_array_equal(hopattn.attention_with_kvcache(*args[:4], window_size=(-1, 0)), plain)


def test_numpy_window_float16_scale_and_splits(lib):
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem([3, 20], 2, 4, 2, 16, 24, 8, 2, dtype=np.float16)
    want_out, _, _, _ = expected(q, k_cache, v_cache, seqlens, page_table, k, v, True, softmax_scale=0.3,
                                 window_size=(4, 0))
    caches = (k_cache.copy(), v_cache.copy())
    out = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table, causal=True,
                                         softmax_scale=0.3, window_size=(4, 0))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=2e-3, atol=2e-3)
    again = hopattn.attention_with_kvcache(q, *caches, seqlens, k=k, v=v, page_table=page_table, causal=True,
                                           softmax_scale=0.3, window_size=(4, 0), num_splits=5)
    np.testing.assert_array_equal(out, again)  # num_splits is ignored on the CPU, the window is not


# (lens, seqlen_q, heads_q, heads_kv, head_dim, capacity, page_size, seqlen_new, causal, window, softcap)
SOFTCAP_CASES = {
    "cap0.5-sq1-contig": ([5, 0, 1, 30], 1, 4, 2, 16, 32, 0, 0, False, (-1, -1), 0.5),
    "cap2-sq4-paged4-append-gqa-causal": ([7, 0, 19, 28], 4, 8, 2, 8, 32, 4, 2, True, (-1, -1), 2.0),
    "cap30-sq4-paged5-window": ([0, 24, 11], 4, 6, 3, 8, 25, 5, 0, False, (3, 1), 30.0),
}


@pytest.mark.parametrize("name", list(SOFTCAP_CASES))
def test_numpy_softcap_against_float64_and_attention_on_gathered_keys(lib, name):
    # C ABI 8: softcap through the KV-cache call, against the float64 formula and, bit for bit, the
    # dense CPU reference on each sequence's gathered keys with the same cap; and it is not dropped.
    lens, sq, hq, hkv, d, capacity, page, new, causal, window, cap = SOFTCAP_CASES[name]
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem(lens, sq, hq, hkv, d, capacity, page, new, seed=13)
    q = q * 4  # scores well past the small caps
    caches = (k_cache.copy(), v_cache.copy())
    want_out, want_lse, _, _ = expected(q, k_cache, v_cache, seqlens, page_table, k, v, causal, window_size=window,
                                        softcap=cap)
    out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=causal, return_lse=True, window_size=window, softcap=cap)
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)
    finite = np.isfinite(want_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)
    gathered_out, gathered_lse = attention_on_gathered_keys(q, k_cache, v_cache, seqlens, page_table, new, causal,
                                                            window, softcap=cap)
    np.testing.assert_array_equal(out, gathered_out)
    np.testing.assert_array_equal(lse, gathered_lse)
    if cap <= 2.0:
        plain = hopattn.attention_with_kvcache(q, *caches, seqlens, k=k, v=v, page_table=page_table, causal=causal,
                                               window_size=window)
        assert not np.allclose(plain, out, atol=1e-3)


def test_numpy_bad_softcap_values_name_softcap(lib):
    args = make_problem([3, 5], 1, 4, 2, 16, 8, 0, 0, seed=14)[:4]
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(hopattn.InvalidArgumentError, match="softcap must be a finite float >= 0"):
            hopattn.attention_with_kvcache(*args, softcap=bad)


@pytest.mark.parametrize(
    "window, causal, match",
    [
        ((-2, -1), False, r"window.left=-2 must be >= 0, or -1 for unbounded"),
        ((3, -5), False, r"window.right=-5 must be >= 0, or -1 for unbounded"),
        ((4, 3), True, r"window.right=3 with causal: causal is window.right = 0 \(pass -1 or 0\)"),
        ((-1, 1), True, r"window.right=1 with causal"),
    ],
)
def test_numpy_bad_window_values_name_the_window(lib, window, causal, match):
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem([3, 20], 1, 4, 2, 8, 32, 8, 2)
    before = k_cache.copy()
    with pytest.raises(hopattn.InvalidArgumentError, match=match):
        hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table, causal=causal,
                                       window_size=window)
    np.testing.assert_array_equal(k_cache, before)  # refused before the append


# --- torch ----------------------------------------------------------------------------------------------


@needs_torch
def test_torch_cpu_tensors_refused():
    q = torch.zeros(1, 1, 2, 64, dtype=torch.bfloat16)
    cache = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(hopattn.InvalidArgumentError, match="expected a CUDA tensor"):
        hopattn.attention_with_kvcache(q, cache, cache, torch.zeros(1, dtype=torch.int32))


def to_numpy64(t):
    return None if t is None else t.detach().double().cpu().numpy()


def gpu_problem(lens, sq, hq, hkv, d, capacity, page, new, dtype, seed=0):
    q, k_cache, v_cache, seqlens, page_table, k, v = make_problem(lens, sq, hq, hkv, d, capacity, page, new, seed=seed)
    conv = lambda a: None if a is None else torch.from_numpy(a).to("cuda", dtype)  # noqa: E731
    idx = lambda a: None if a is None else torch.from_numpy(a).cuda()  # noqa: E731
    return conv(q), conv(k_cache), conv(v_cache), idx(seqlens), idx(page_table), conv(k), conv(v)


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def check_call_against_float64(problem, causal):
    """One attention_with_kvcache call (with lse) against expected(): out, lse, and the cache after
    the append bit for bit (NaN equal to NaN: unused rows untouched). Returns (out, lse)."""
    q, k_cache, v_cache, seqlens, page_table, k, v = problem
    want_out, want_lse, want_k, want_v = expected(*(to_numpy64(t) for t in (q, k_cache, v_cache)), seqlens.cpu().numpy(),
                                                  None if page_table is None else page_table.cpu().numpy(),
                                                  to_numpy64(k), to_numpy64(v), causal)
    out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=causal, return_lse=True)
    torch.cuda.synchronize()
    assert rel_l2(to_numpy64(out), want_out) < (1e-2 if q.dtype == torch.bfloat16 else 3e-3)
    got_lse = lse.cpu().numpy()
    np.testing.assert_array_equal(np.isinf(got_lse), np.isinf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(got_lse[finite], want_lse[finite], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(to_numpy64(k_cache), want_k)  # the appended rows, all else untouched
    np.testing.assert_array_equal(to_numpy64(v_cache), want_v)
    return out, lse


@needs_gpu
@pytest.mark.parametrize("dtype_name", ["bf16", "fp16"])
@pytest.mark.parametrize("page", [0, 16, 64, 256])
@pytest.mark.parametrize("sq, causal", [(1, False), (3, True)])
def test_gpu_against_float64(lib, dtype_name, page, sq, causal):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    lens = [0, 1, 300, 509, 77]
    problem = gpu_problem(lens, sq, 16, 4, 128, 512, page, 3, dtype)
    out, lse = check_call_against_float64(problem, causal)
    assert out.dtype == dtype and out.shape == problem[0].shape and lse.shape == (5, 16, sq)


@needs_gpu
@pytest.mark.parametrize("page", [0, 64, 128, 256])
@pytest.mark.parametrize("sq, causal", [(32, False), (200, True)])
def test_gpu_chunked_prefill_against_float64(lib, page, sq, causal):
    # Many query rows: a contiguous cache runs the forward kernel (kvcache_route.hpp), and so does a
    # paged one whose pages hold whole key tiles (causal d128: 128 keys, so pages 128 and 256); other
    # pages (64; 128 and 256 against non-causal d128's 176-key tile) keep the decode kernel. Cache
    # rows past each sequence's keys are NaN; reading one would poison the output.
    lens = [0, 1, 300, 509, 77, 129]
    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_problem(lens, sq, 16, 4, 128, 512, page, 3, torch.bfloat16,
                                                                 seed=5)
    pos = torch.arange(512, device="cuda")
    for b, n in enumerate(lens):
        tail = pos[n + 3:]
        if page_table is None:
            k_cache[b, tail] = float("nan")
            v_cache[b, tail] = float("nan")
        else:
            pages, rows = page_table[b, tail // page].long(), tail % page
            k_cache[pages, rows] = float("nan")
            v_cache[pages, rows] = float("nan")
    out, _ = check_call_against_float64((q, k_cache, v_cache, seqlens, page_table, k, v), causal)
    assert torch.isfinite(out).all()


@needs_gpu
def test_gpu_split_counts_and_determinism(lib):
    q, k_cache, v_cache, seqlens, page_table, _, _ = gpu_problem([4000, 0, 1500], 2, 32, 8, 128, 4096, 64, 0,
                                                                 torch.bfloat16, seed=3)
    one = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table, causal=True, num_splits=1)
    for splits in (0, 2, 7, 64):
        out = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table, causal=True,
                                             num_splits=splits)
        again = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table, causal=True,
                                               num_splits=splits)
        assert torch.equal(out, again), f"num_splits={splits} is not bitwise reproducible"
        # P is rounded to bf16 relative to each split's running max, so splits agree with one split
        # to bf16 precision overall (relative L2 <= 2 * 2^-8), not element by element.
        rel = ((out.float() - one.float()).norm() / one.float().norm().clamp_min(1e-30)).item()
        assert rel <= 2 * 2**-8, (splits, rel)


@needs_gpu
def test_gpu_check_index_values_and_side_stream(lib):
    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_problem([10, 20], 1, 8, 2, 64, 64, 16, 1, torch.float16)
    bad = seqlens.clone()
    bad[1] = 64
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cache_seqlens\[1\]=64 plus seqlen_new=1 exceeds"):
        hopattn.attention_with_kvcache(q, k_cache, v_cache, bad, k=k, v=v, page_table=page_table,
                                       check_index_values=True)
    ref = hopattn.attention_with_kvcache(q, k_cache.clone(), v_cache.clone(), seqlens, k=k, v=v, page_table=page_table)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                             num_splits=4)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert rel_l2(to_numpy64(out), to_numpy64(ref)) < 3e-3


@needs_gpu
def test_gpu_gradient_refused(lib):
    q, k_cache, v_cache, seqlens, _, _, _ = gpu_problem([3], 1, 2, 2, 64, 16, 0, 0, torch.bfloat16)
    with pytest.raises(NotImplementedError, match="forward only"):
        hopattn.attention_with_kvcache(q.requires_grad_(), k_cache, v_cache, seqlens)


# --- GPU: sliding windows ------------------------------------------------------------------------------

# (seqlen_q, causal, window): each side alone, both, causal with a left bound, the diagonal, wider
# than the cache, on the ragged lengths of gpu_problem (0, 1 and a few hundred keys).
GPU_WINDOWS = {
    "left-sq1": (1, False, (64, -1)),
    "left-sq4": (4, False, (100, -1)),
    "right-sq4": (4, False, (-1, 1)),
    "both-sq4": (4, False, (37, 2)),
    "diagonal-sq4": (4, False, (0, 0)),
    "causal-left-sq1": (1, True, (128, -1)),
    "causal-left-sq4": (4, True, (200, 0)),
    "causal-wider-than-cache-sq4": (4, True, (5000, 0)),
    "wider-than-cache-sq1": (1, False, (HUGE, HUGE)),
}


def gather_torch(cache, page_table, b, length):
    """gather() on torch tensors: sequence b's first `length` cached rows, contiguous."""
    if page_table is None:
        return cache[b, :length].contiguous()
    page_size = cache.shape[1]
    pages = page_table[b, : -(-length // page_size)].long()
    return cache[pages].reshape(-1, *cache.shape[2:])[:length].contiguous()


@needs_gpu
@pytest.mark.parametrize("dtype_name", ["bf16", "fp16"])
@pytest.mark.parametrize("page", [0, 16, 64])
@pytest.mark.parametrize("name", list(GPU_WINDOWS))
def test_gpu_window_against_float64_and_attention_on_gathered_keys(lib, name, page, dtype_name):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    sq, causal, window = GPU_WINDOWS[name]
    lens, new = [0, 1, 300, 509, 77], 3
    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_problem(lens, sq, 16, 4, 128, 512, page, new, dtype, seed=21)
    want_out, want_lse, want_k, want_v = expected(*(to_numpy64(t) for t in (q, k_cache, v_cache)), seqlens.cpu().numpy(),
                                                  None if page_table is None else page_table.cpu().numpy(),
                                                  to_numpy64(k), to_numpy64(v), causal, window_size=window)
    out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=causal, return_lse=True, window_size=window)
    torch.cuda.synchronize()
    tol = 1e-2 if dtype == torch.bfloat16 else 3e-3
    assert rel_l2(to_numpy64(out), want_out) < tol
    got_lse = lse.cpu().numpy()
    np.testing.assert_array_equal(np.isinf(got_lse), np.isinf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(got_lse[finite], want_lse[finite], rtol=1e-4, atol=1e-4)
    assert torch.all(out.transpose(1, 2)[lse.isinf()] == 0)  # rows whose window holds no key: exactly 0
    np.testing.assert_array_equal(to_numpy64(k_cache), want_k)  # the append, as without a window
    np.testing.assert_array_equal(to_numpy64(v_cache), want_v)
    # hopattn.attention (the dense sm90 forward) on each sequence's gathered keys, with the same window.
    for b, length in enumerate(l + new for l in lens):
        keys, values = gather_torch(k_cache, page_table, b, length), gather_torch(v_cache, page_table, b, length)
        dense_out, dense_lse = hopattn.attention(q[b : b + 1], keys[None], values[None], causal=causal,
                                                 return_lse=True, window_size=window)
        assert rel_l2(to_numpy64(out[b]), to_numpy64(dense_out[0])) < 2 * tol, b
        np.testing.assert_array_equal(lse[b].isinf().cpu().numpy(), dense_lse[0].isinf().cpu().numpy())
        seen = dense_lse[0].isfinite()
        torch.testing.assert_close(lse[b][seen], dense_lse[0][seen], rtol=1e-4, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize("dtype_name", ["bf16", "fp16"])
@pytest.mark.parametrize("page", [0, 64])
@pytest.mark.parametrize("sq, causal, window, cap", [(1, False, (-1, -1), 50.0), (4, True, (-1, -1), 2.0),
                                                     (4, False, (100, 1), 2.0)])
def test_gpu_softcap_against_float64_and_attention_on_gathered_keys(lib, dtype_name, page, sq, causal, window, cap):
    # The sm90 decode kernel's softcap (C ABI 8) against the float64 formula and, per sequence, the
    # dense sm90 forward's softcap on the gathered keys; splits forced and not give the same answer.
    if ("fwd", dtype_name, 128) not in hopattn.build_info()["kernels"]:  # a restricted build (gpu-pack -D...)
        pytest.skip(f"fwd:{dtype_name}:128 not in this build: the dense comparison needs it")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    lens, new = [0, 1, 300, 509, 77], 2
    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_problem(lens, sq, 16, 4, 128, 512, page, new, dtype, seed=23)
    q = q * 4
    want_out, want_lse, _, _ = expected(*(to_numpy64(t) for t in (q, k_cache, v_cache)), seqlens.cpu().numpy(),
                                        None if page_table is None else page_table.cpu().numpy(),
                                        to_numpy64(k), to_numpy64(v), causal, window_size=window, softcap=cap)
    out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=causal, return_lse=True, window_size=window, softcap=cap)
    torch.cuda.synchronize()
    tol = 1e-2 if dtype == torch.bfloat16 else 3e-3
    assert rel_l2(to_numpy64(out), want_out) < tol
    got_lse = lse.cpu().numpy()
    finite = np.isfinite(want_lse)
    np.testing.assert_array_equal(np.isfinite(got_lse), finite)
    np.testing.assert_allclose(got_lse[finite], want_lse[finite], rtol=1e-4, atol=1e-4)
    for b, length in enumerate(l + new for l in lens):
        keys, values = gather_torch(k_cache, page_table, b, length), gather_torch(v_cache, page_table, b, length)
        dense_out = hopattn.attention(q[b : b + 1], keys[None], values[None], causal=causal, window_size=window,
                                      softcap=cap)
        assert rel_l2(to_numpy64(out[b]), to_numpy64(dense_out[0])) < 2 * tol, b
    # Again with the same k/v (the append rewrites the same rows), so every sequence has the same keys.
    split = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                           causal=causal, window_size=window, softcap=cap, num_splits=7)
    assert rel_l2(to_numpy64(split), to_numpy64(out)) < tol
    if cap <= 2.0:
        plain = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                               causal=causal, window_size=window)
        assert rel_l2(to_numpy64(plain), to_numpy64(out)) > 5 * tol


@needs_gpu
def test_gpu_window_split_counts_and_determinism(lib):
    # A 4k window over a 9k cache: the splits cover only the keys the window reaches.
    q, k_cache, v_cache, seqlens, page_table, _, _ = gpu_problem([9000, 0, 1500, 9], 2, 16, 4, 128, 9216, 64, 0,
                                                                 torch.bfloat16, seed=22)
    window = (4096, 0)
    arrays = [None if t is None else t.cpu().numpy() for t in (seqlens, page_table)]
    want_out, want_lse, _, _ = expected(*(to_numpy64(t) for t in (q, k_cache, v_cache)), *arrays, None, None, True,
                                        window_size=window)
    one = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table, causal=True,
                                         num_splits=1, window_size=window)
    assert rel_l2(to_numpy64(one), want_out) < 1e-2
    for splits in (0, 3, 16):
        out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table, causal=True,
                                                  num_splits=splits, window_size=window, return_lse=True)
        again = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, page_table=page_table, causal=True,
                                               num_splits=splits, window_size=window)
        assert torch.equal(out, again), f"num_splits={splits} is not bitwise reproducible"
        rel = ((out.float() - one.float()).norm() / one.float().norm().clamp_min(1e-30)).item()
        assert rel <= 2 * 2**-8, (splits, rel)
        got_lse = lse.cpu().numpy()
        finite = np.isfinite(want_lse)
        np.testing.assert_array_equal(np.isinf(got_lse), ~finite)
        np.testing.assert_allclose(got_lse[finite], want_lse[finite], rtol=1e-4, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize(
    "window, causal, exc, match",
    [
        ((-2, -1), False, hopattn.InvalidArgumentError, "window.left=-2 must be >= 0"),
        ((8, 3), True, hopattn.InvalidArgumentError, "window.right=3 with causal"),
        ((8.0, 0), False, TypeError, r"window_size\[0\] \(left\) must be an int"),
    ],
)
def test_gpu_bad_window_named(lib, window, causal, exc, match):
    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_problem([10, 20], 1, 8, 2, 128, 64, 16, 1, torch.bfloat16)
    before = k_cache.clone()
    with pytest.raises(exc, match=match):
        hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table, causal=causal,
                                       window_size=window)
    torch.cuda.synchronize()
    assert torch.equal(k_cache, before)  # refused before anything ran


# --- the custom op hopattn::fwd_kvcache --------------------------------------------------------------

needs_custom_op = pytest.mark.skipif(torch is None or not hasattr(torch.library, "custom_op"),
                                     reason="needs torch 2.4+ (torch.library.custom_op)")

# (lens, seqlen_q, heads_q, heads_kv, head_dim, capacity, page_size, seqlen_new, causal)
OP_CASES = {
    "contig": ([5, 0, 30], 1, 4, 2, 16, 32, 0, 0, False),
    "contig-append-causal": ([5, 0, 28], 3, 4, 2, 16, 32, 0, 2, True),
    "paged-append": ([3, 9, 0], 2, 4, 1, 16, 16, 4, 1, False),
    "paged-causal": ([7, 1, 12], 2, 2, 2, 16, 16, 8, 0, True),
}


def torch_problem(name, seed=0, device="cpu", dtype=None):
    lens, sq, hq, hkv, d, capacity, page, new, causal = OP_CASES[name]
    arrays = make_problem(lens, sq, hq, hkv, d, capacity, page, new, seed=seed)

    def conv(a):
        if a is None:
            return None
        t = torch.from_numpy(a.copy()).to(device)
        return t if dtype is None or t.dtype == torch.int32 else t.to(dtype)

    return (*(conv(a) for a in arrays), causal)


@needs_custom_op
def test_op_schema_declares_the_append():
    from hopattn import torch_ops

    assert str(torch_ops.fwd_kvcache._schema) == (
        "hopattn::fwd_kvcache(Tensor q, Tensor(a1!) k_cache, Tensor(a2!) v_cache, Tensor cache_seqlens, "
        "Tensor? k=None, Tensor? v=None, Tensor? page_table=None, bool causal=False, float? softmax_scale=None, "
        "SymInt num_splits=0, bool check_index_values=False, SymInt window_left=-1, SymInt window_right=-1, "
        "float softcap=0.) -> (Tensor, Tensor)"
    )


@needs_custom_op
@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_op_cpu_kernel_equals_numpy(lib, name):
    from hopattn import torch_ops

    q, k_cache, v_cache, seqlens, page_table, k, v, causal = torch_problem(name, seed=5)
    arrays = [None if t is None else t.numpy().copy() for t in (q, k_cache, v_cache, seqlens, page_table, k, v)]
    out, lse = torch_ops.fwd_kvcache(q, k_cache, v_cache, seqlens, k, v, page_table, causal, 0.3, 2)
    want_out, want_lse = hopattn.attention_with_kvcache(*arrays[:4], k=arrays[5], v=arrays[6], page_table=arrays[4],
                                                        causal=causal, softmax_scale=0.3, return_lse=True)
    np.testing.assert_array_equal(out.numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    np.testing.assert_array_equal(k_cache.numpy(), arrays[1])  # both appended alike
    np.testing.assert_array_equal(v_cache.numpy(), arrays[2])


# (op case, window, causal override or None): windows through the op's CPU kernel.
OP_WINDOWS = {
    "contig-left": ("contig", (2, -1), None),
    "contig-append-causal-left": ("contig-append-causal", (1, 0), None),
    "paged-append-right": ("paged-append", (-1, 1), None),
    "paged-causal-wide": ("paged-causal", (HUGE, -1), None),
}


@needs_custom_op
def test_op_cpu_kernel_with_softcap_equals_numpy(lib):
    # The op's softcap argument (last, default 0.0) reaches the CPU reference; opcheck with it.
    from hopattn import torch_ops

    q, k_cache, v_cache, seqlens, page_table, k, v, causal = torch_problem("paged-append", seed=9)
    q = q * 4
    arrays = [None if t is None else t.numpy().copy() for t in (q, k_cache, v_cache, seqlens, page_table, k, v)]
    out, lse = torch_ops.fwd_kvcache(q, k_cache, v_cache, seqlens, k, v, page_table, causal, None, 0, False, 2, 1,
                                     1.5)
    want_out, want_lse = hopattn.attention_with_kvcache(*arrays[:4], k=arrays[5], v=arrays[6], page_table=arrays[4],
                                                        causal=causal, return_lse=True, window_size=(2, 1),
                                                        softcap=1.5)
    np.testing.assert_array_equal(out.numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    plain = torch_ops.fwd_kvcache(q, k_cache.clone(), v_cache.clone(), seqlens, k, v, page_table, causal=causal,
                                  window_left=2, window_right=1)
    assert not torch.equal(plain[0], out)
    torch.library.opcheck(torch_ops.fwd_kvcache, (q, k_cache.clone(), v_cache.clone(), seqlens, k, v, page_table),
                          {"causal": causal, "softcap": 1.5})


@needs_custom_op
@pytest.mark.parametrize("name", list(OP_WINDOWS))
def test_op_cpu_kernel_with_a_window_equals_numpy(lib, name):
    from hopattn import torch_ops

    case, window, _ = OP_WINDOWS[name]
    q, k_cache, v_cache, seqlens, page_table, k, v, causal = torch_problem(case, seed=8)
    arrays = [None if t is None else t.numpy().copy() for t in (q, k_cache, v_cache, seqlens, page_table, k, v)]
    out, lse = torch_ops.fwd_kvcache(q, k_cache, v_cache, seqlens, k, v, page_table, causal, None, 0, False, *window)
    want_out, want_lse = hopattn.attention_with_kvcache(*arrays[:4], k=arrays[5], v=arrays[6], page_table=arrays[4],
                                                        causal=causal, return_lse=True, window_size=window)
    np.testing.assert_array_equal(out.numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    np.testing.assert_array_equal(k_cache.numpy(), arrays[1])
    # Keywords bind too, and the defaults are "no window".
    plain = torch_ops.fwd_kvcache(q, k_cache.clone(), v_cache.clone(), seqlens, k, v, page_table, causal=causal,
                                  window_left=-1, window_right=-1)
    default = torch_ops.fwd_kvcache(q, k_cache.clone(), v_cache.clone(), seqlens, k, v, page_table, causal=causal)
    assert torch.equal(plain[0], default[0]) and torch.equal(plain[1], default[1])
    torch.library.opcheck(torch_ops.fwd_kvcache, (q, k_cache.clone(), v_cache.clone(), seqlens, k, v, page_table),
                          {"causal": causal, "window_left": window[0], "window_right": window[1]})


@needs_custom_op
def test_op_cpu_kernel_bad_window_named_by_the_library(lib):
    from hopattn import torch_ops

    q, k_cache, v_cache, seqlens, page_table, k, v, causal = torch_problem("contig-append-causal", seed=9)
    with pytest.raises(hopattn.InvalidArgumentError, match="window.left=-2 must be >= 0"):
        torch_ops.fwd_kvcache(q, k_cache, v_cache, seqlens, k, v, page_table, causal, window_left=-2)
    with pytest.raises(hopattn.InvalidArgumentError, match="window.right=3 with causal"):
        torch_ops.fwd_kvcache(q, k_cache, v_cache, seqlens, k, v, page_table, True, window_left=4, window_right=3)


@needs_custom_op
@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_opcheck_cpu(lib, name):
    from hopattn import torch_ops

    q, k_cache, v_cache, seqlens, page_table, k, v, causal = torch_problem(name, seed=6)
    torch.library.opcheck(torch_ops.fwd_kvcache, (q, k_cache, v_cache, seqlens, k, v, page_table),
                          {"causal": causal})


@needs_custom_op
@pytest.mark.parametrize("window", [(-1, -1), (2, 0)], ids=["no-window", "window"])
@pytest.mark.parametrize("name", ["contig-append-causal", "paged-append"])
def test_compile_fullgraph_on_cpu_equals_eager_and_appends_alike(lib, name, window):
    from torch._dynamo.testing import CompileCounterWithBackend

    from hopattn import torch_ops

    def step(q, k_cache, v_cache, seqlens, k, v, page_table):
        out, lse = torch_ops.fwd_kvcache(q * 2, k_cache, v_cache, seqlens, k, v, page_table, True, None, 0, False,
                                         *window)
        return out.sum(dim=-1), lse

    q, k_cache, v_cache, seqlens, page_table, k, v, _ = torch_problem(name, seed=7)
    eager_caches = (k_cache.clone(), v_cache.clone())
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    got = compiled(q, k_cache, v_cache, seqlens, k, v, page_table)
    want = step(q, *eager_caches, seqlens, k, v, page_table)
    assert counter.frame_count == 1
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert torch.equal(k_cache, eager_caches[0]) and torch.equal(v_cache, eager_caches[1])
    assert not torch.equal(k_cache, torch_problem(name, seed=7)[1])  # the append happened


@needs_custom_op
def test_fake_outputs_and_metadata_errors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hopattn import torch_ops

    with FakeTensorMode():
        q = torch.empty(3, 2, 8, 128, dtype=torch.bfloat16, device="cuda")
        cache = torch.empty(40, 16, 2, 128, dtype=torch.bfloat16, device="cuda")
        new = torch.empty(3, 2, 2, 128, dtype=torch.bfloat16, device="cuda")
        seqlens = torch.empty(3, dtype=torch.int32, device="cuda")
        pages = torch.empty(3, 10, dtype=torch.int32, device="cuda")
        out, lse = torch_ops.fwd_kvcache(q, cache, cache, seqlens, new, new, pages, True)
        assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
        assert lse.shape == (3, 8, 2) and lse.dtype == torch.float32 and lse.device == q.device
        out, lse = hopattn.attention_with_kvcache(q, cache, cache, seqlens, k=new, v=new, page_table=pages,
                                                  return_lse=True)  # fake tensors: the op route
        assert out.shape == q.shape and lse.shape == (3, 8, 2)
        with pytest.raises(ValueError, match="cache_seqlens: dtype must be int32"):
            torch_ops.fwd_kvcache(q, cache, cache, seqlens.long())
        with pytest.raises(ValueError, match="k and v .* must be given together"):
            torch_ops.fwd_kvcache(q, cache, cache, seqlens, new)
        with pytest.raises(ValueError, match="k_cache: expected 4 dims"):
            torch_ops.fwd_kvcache(q, cache[0], cache, seqlens)


@needs_custom_op
def test_dynamo_traces_attention_with_kvcache_as_one_graph():
    # Fake CUDA tensors: tracing only, no GPU or library needed.
    from torch._subclasses.fake_tensor import FakeTensorMode

    def step(q, k_cache, v_cache, seqlens, k, v):
        return hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, causal=True,
                                              window_size=(256, 0), softcap=30.0) * 2

    with FakeTensorMode():
        q = torch.empty(2, 1, 8, 128, dtype=torch.bfloat16, device="cuda")
        cache = torch.empty(2, 64, 2, 128, dtype=torch.bfloat16, device="cuda")
        new = torch.empty(2, 1, 2, 128, dtype=torch.bfloat16, device="cuda")
        seqlens = torch.empty(2, dtype=torch.int32, device="cuda")
        explanation = torch._dynamo.explain(step)(q, cache, cache, seqlens, new, new)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons
    nodes = [node for node in explanation.graphs[0].graph.nodes if node.target is torch.ops.hopattn.fwd_kvcache.default]
    assert len(nodes) == 1
    # The window and the softcap reach the op as its last three arguments (window_left, window_right,
    # softcap).
    assert tuple(nodes[0].args[-3:]) == (256, 0, 30.0), nodes[0].args


@needs_custom_op
def test_fake_implementation_takes_the_window():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hopattn import torch_ops

    with FakeTensorMode():
        q = torch.empty(3, 4, 8, 64, dtype=torch.float16, device="cuda")
        cache = torch.empty(3, 32, 2, 64, dtype=torch.float16, device="cuda")
        seqlens = torch.empty(3, dtype=torch.int32, device="cuda")
        out, lse = torch_ops.fwd_kvcache(q, cache, cache, seqlens, causal=True, window_left=8, window_right=0)
        assert out.shape == q.shape and lse.shape == (3, 8, 4)
        out, lse = hopattn.attention_with_kvcache(q, cache, cache, seqlens, window_size=(8, 2), return_lse=True)
        assert out.shape == q.shape and lse.shape == (3, 8, 4)


# --- the custom op on the GPU ----------------------------------------------------------------------------


def gpu_op_problem(page, seed=0):
    return gpu_problem([0, 1, 300, 77], 1, 16, 4, 128, 512, page, 1, torch.bfloat16, seed=seed)


@needs_gpu
@pytest.mark.parametrize("window", [(-1, -1), (50, 0)], ids=["no-window", "window"])
@pytest.mark.parametrize("page", [0, 64])
def test_gpu_op_route_equals_direct_bitwise(lib, page, window):
    from hopattn import torch_ops
    from hopattn_test_support import op_route

    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_op_problem(page, seed=1)
    caches = (k_cache.clone(), v_cache.clone())
    want = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table, causal=True,
                                          return_lse=True, window_size=window)
    with op_route():
        got = hopattn.attention_with_kvcache(q, *caches, seqlens, k=k, v=v, page_table=page_table, causal=True,
                                             return_lse=True, window_size=window)
    torch.cuda.synchronize()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(caches[0], k_cache) and torch.equal(caches[1], v_cache)
    torch.library.opcheck(torch_ops.fwd_kvcache, (q, k_cache.clone(), v_cache.clone(), seqlens, k, v, page_table),
                          {"causal": True, "window_left": window[0], "window_right": window[1]})


@needs_gpu
@pytest.mark.parametrize("window", [(-1, -1), (50, 0)], ids=["no-window", "window"])
@pytest.mark.parametrize("page", [0, 64])
def test_gpu_compile_fullgraph_equals_eager(lib, page, window):
    from torch._dynamo.testing import CompileCounterWithBackend

    def step(q, k_cache, v_cache, seqlens, k, v, page_table):
        out, lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                                  causal=True, return_lse=True, window_size=window)
        return out.float() * 2, lse

    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_op_problem(page, seed=2)
    eager_caches = (k_cache.clone(), v_cache.clone())
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    got = torch.compile(step, backend=counter, fullgraph=True)(q, k_cache, v_cache, seqlens, k, v, page_table)
    want = step(q, *eager_caches, seqlens, k, v, page_table)
    torch.cuda.synchronize()
    assert counter.frame_count == 1
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(k_cache, eager_caches[0]) and torch.equal(v_cache, eager_caches[1])


@needs_gpu
@pytest.mark.parametrize("window", [(-1, -1), (50, 0)], ids=["no-window", "window"])
@pytest.mark.parametrize("page", [0, 64])
def test_gpu_cuda_graph_decode_step_equals_eager(lib, page, window):
    # A decode step with static shapes: preallocated caches, q / k / v / cache_seqlens copied into
    # static buffers before each replay; the captured append and attention equal eager's (the
    # window is a host-side argument, baked into the captured launch).
    q, k_cache, v_cache, seqlens, page_table, k, v = gpu_op_problem(page, seed=3)
    eager_caches = (k_cache.clone(), v_cache.clone())

    def step():
        return hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, k=k, v=v, page_table=page_table,
                                              causal=True, return_lse=True, window_size=window)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_lse = step()
    torch.cuda.synchronize()
    k_cache.copy_(eager_caches[0])
    v_cache.copy_(eager_caches[1])
    for seed in (4, 5):
        fresh = gpu_op_problem(page, seed=seed)
        with torch.no_grad():
            q.copy_(fresh[0])
            k.copy_(fresh[5])
            v.copy_(fresh[6])
        graph.replay()
        want_out, want_lse = hopattn.attention_with_kvcache(q, *eager_caches, seqlens, k=k, v=v,
                                                            page_table=page_table, causal=True, return_lse=True,
                                                            window_size=window)
        torch.cuda.synchronize()
        assert torch.equal(static_out, want_out) and torch.equal(static_lse, want_lse)
        assert torch.equal(k_cache, eager_caches[0]) and torch.equal(v_cache, eager_caches[1])
        seqlens += 1  # the next token's slot, in place: the graph reads the same buffer


def test_bench_bytes_formula():
    # bench/decode.py's figure of merit: the K and V bytes of the cache, read once.
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_decode", REPO_ROOT / "bench" / "decode.py")
    decode = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(decode)
    assert decode.kv_bytes(64, 131072, 8, 128, 2) == 2 * 64 * 131072 * 8 * 128 * 2
    assert decode.gbps(4e9, 1.0) == pytest.approx(4000.0)
    assert decode.gbps(1, None) is None


# --- the CUDA route's packed struct ------------------------------------------------------------------


@pytest.mark.parametrize("batch, paged, new, with_lse, scale, window, splits, softcap", [
    (1, False, False, True, None, (-1, -1), 0, 0.0),  # batch 1: size-1 cache_seqlens (make_tensor's stride rule)
    (3, True, True, False, 0.3, (7, 0), 5, 30.0),
    (2, False, True, True, 1.5, (1 << 40, 3), 1, 0.1),
    (4, True, False, True, None, (0, -1), 64, 0.0),
])
def test_packed_kvcache_args_equal_the_ctypes_constructor(batch, paged, new, with_lse, scale, window, splits,
                                                          softcap):
    # kvcache._packed_args (one struct.pack_into, the CUDA route's fast path) must give the bytes of
    # _args over ops._torch_tensor for the same tensors; CPU tensors stand in (only pointers are read).
    torch = pytest.importorskip("torch")
    from hopattn import kvcache, ops

    st_codes = ops._direct(torch).codes  # the dtype codes the CUDA route passes
    q = torch.randn(batch, 2, 8, 64, dtype=torch.bfloat16)
    if paged:
        k_cache = torch.randn(11, 16, 2, 64, dtype=torch.bfloat16)
        page_table = torch.randint(0, 11, (batch, 5), dtype=torch.int32)
    else:
        k_cache = torch.randn(batch, 80, 2, 64, dtype=torch.bfloat16)
        page_table = None
    v_cache = torch.randn_like(k_cache)
    seqlens = torch.full((batch,), 9, dtype=torch.int32)
    k = torch.randn(batch, 2, 2, 64, dtype=torch.bfloat16) if new else None
    v = torch.randn_like(k) if new else None
    out = torch.empty_like(q)
    lse = torch.empty(batch, 8, 2, dtype=torch.float32) if with_lse else None
    packed = kvcache._packed_args(st_codes, q, k_cache, v_cache, seqlens, page_table, k, v, out, lse, True, scale,
                                  splits, True, window, softcap)
    assert packed is not None
    want = kvcache._args(functools.partial(ops._torch_tensor, torch), q, k_cache, v_cache, seqlens, page_table, k, v,
                         out, lse, True, scale, splits, True, window, softcap)
    assert bytes(packed) == bytes(want)
    assert packed.softcap == pytest.approx(softcap)


@pytest.mark.parametrize("need, status", [(4096, 0), (0, 0), (4096, _lib.STATUS_INVALID_ARGUMENT)])
def test_launch_cuda_sequence(monkeypatch, need, status):
    # kvcache._launch_cuda, the eager CUDA route's launcher, with CPU tensors standing in and a fake
    # library recording its calls: the struct (passed as is, not byref) equals _args' bytes; the
    # size query, then the launch with a workspace of the answered size (NULL for 0) from q.new_empty,
    # both on q's device switched to and restored after; a failed launch raises the library's error.
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from hopattn import kvcache, ops

    calls = []
    st = SimpleNamespace(
        torch=torch, empty_like=torch.empty_like, contiguous_format=torch.contiguous_format, float32=torch.float32,
        uint8=torch.uint8, codes=ops._direct(torch).codes, raw_stream=lambda dev: 1234,
        exchange_device=lambda dev: calls.append(("exchange", dev)) or 7,
        restore_device=lambda prev: calls.append(("restore", prev)),
    )

    class FakeLib:
        def hopattn_attention_with_kvcache_workspace_size(self, args):
            calls.append(("size", bytes(args)))
            return need

        def hopattn_attention_with_kvcache(self, args, workspace, workspace_bytes, stream):
            calls.append(("launch", bytes(args), workspace, workspace_bytes, stream))
            return status

    monkeypatch.setattr(kvcache, "_lib_kvcache", FakeLib)
    monkeypatch.setattr(_lib, "last_error", lambda: "the library's message")
    q = torch.randn(2, 3, 8, 64, dtype=torch.float16)
    k_cache = torch.randn(2, 40, 2, 64, dtype=torch.float16)
    v_cache = torch.randn_like(k_cache)
    seqlens = torch.full((2,), 5, dtype=torch.int32)
    k = torch.randn(2, 1, 2, 64, dtype=torch.float16)
    v = torch.randn_like(k)
    run = functools.partial(kvcache._launch_cuda, st, q, k_cache, v_cache, seqlens, k, v, None, True, 0.25, 3, False,
                            True, (4, -1))
    if status:
        with pytest.raises(hopattn.InvalidArgumentError, match="hopattn KV-cache attention: the library's message"):
            run()
    else:
        out, lse = run()
        assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
        assert lse.shape == (2, 8, 3) and lse.dtype == torch.float32
        want = kvcache._args(functools.partial(ops._torch_tensor, torch), q, k_cache, v_cache, seqlens, None, k, v,
                             out, lse, True, 0.25, 3, False, (4, -1))
        assert calls[1][1] == calls[2][1] == bytes(want)
    assert [c[0] for c in calls] == ["exchange", "size", "launch", "restore"]
    assert calls[0] == ("exchange", q.get_device()) and calls[3] == ("restore", 7)
    _, _, workspace, workspace_bytes, stream = calls[2]
    assert (workspace is None) == (need == 0) and workspace_bytes == need and stream == 1234


def test_plain_cuda_sends_cpu_tensors_to_the_checked_route():
    # _plain_cuda admits only CUDA tensors; CPU ones take _run_torch, whose checks raise as before.
    torch = pytest.importorskip("torch")
    from hopattn import kvcache, ops

    q = torch.zeros(1, 1, 2, 64, dtype=torch.bfloat16)
    cache = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    seqlens = torch.zeros(1, dtype=torch.int32)
    assert not kvcache._plain_cuda(ops._direct(torch), q, cache, cache, seqlens, None, None, None)
    with pytest.raises(hopattn.InvalidArgumentError, match="q: expected a CUDA tensor"):
        hopattn.attention_with_kvcache(q, cache, cache, seqlens)
