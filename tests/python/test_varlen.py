# hopattn.varlen_attention (python/hopattn/varlen.py) and flash_attn_varlen_func on it: sequences of
# different lengths packed along the token dim, over the C ABI's hopattn_forward_varlen(_cpu).
#  - Everywhere: the signature; argument types checked before the library is loaded.
#  - With the library (numpy, the CPU reference): every sequence equals hopattn.attention on that
#    sequence alone (bitwise: the same reference code) and a float64 formula, for mixed lengths
#    including 0 and 1, GQA/MQA, causal with len_q != len_k, seqused, strided views; the library's
#    errors (index dtype, length, values) reach the exception with the argument named.
#  - The C ABI's varlen backward (no GPU needed): malformed structs and invalid arguments rejected
#    with the argument named, before any device is touched.
#  - With torch, no GPU: CPU tensors refused as by hopattn.attention; with fake CUDA tensors,
#    gradients through the op route (hopattn::bwd_varlen's fake), index checks, and dynamo tracing
#    the call as one op (hopattn::fwd_varlen); with the library, the ops' CPU kernels (bwd_varlen's:
#    the dense CPU reference per sequence) against numpy, torch.library.opcheck of both ops and of
#    fwd_varlen's autograd, torch.compile(fullgraph=True) forward+backward, and the direct route's
#    autograd.Function on CPU tensors against the op's autograd.
#  - With torch, the library and an sm_90 GPU: bf16/fp16 against per-sequence hopattn.attention
#    (the same kernel family) and the CPU reference, seqused, check_index_values, the op route,
#    streams, and flash_attn_varlen_func; gradients against per-sequence hopattn.attention
#    gradients (causal or not, GQA/MQA, lengths 0 and 1, seqused, padding rows), deterministic
#    backward bitwise, both routes bitwise, and torch.compile(fullgraph=True) against eager.
import inspect

import numpy as np
import pytest

import hopattn
from hopattn import flash_attn_interface as fai
from hopattn import ops
from hopattn_test_support import gpu_kernel_pair, naive_attention, op_route, optional_torch, rel_l2, require_library_or_skip_module

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()
HAS_CUSTOM_OP = torch is not None and hasattr(torch.library, "custom_op")
needs_custom_op = pytest.mark.skipif(not HAS_CUSTOM_OP, reason="needs torch 2.4+ (torch.library.custom_op)")


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


def cu_seqlens(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def packed_inputs(lens_q, lens_k, heads_q, heads_kv, head_dim, dtype=np.float32, seed=0, pad_q=0, pad_k=0):
    """Random packed q (total_q + pad_q, heads_q, head_dim), k, v (total_k + pad_k, heads_kv,
    head_dim) and int32 cu_seqlens_q, cu_seqlens_k; pad rows lie past each cu_seqlens' last value."""
    rng = np.random.default_rng(seed)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)

    def rand(rows, heads):
        return rng.standard_normal((rows, heads, head_dim)).astype(dtype)

    return rand(cu_q[-1] + pad_q, heads_q), rand(cu_k[-1] + pad_k, heads_kv), rand(cu_k[-1] + pad_k, heads_kv), cu_q, cu_k


def per_sequence(attend, q, k, v, cu_q, cu_k, used_q=None, used_k=None, **kw):
    """[(rows, out_b, lse_b)] of attend(q_b, k_b, v_b, return_lse=True, **kw) on each sequence
    alone as a batch of 1 (the first seqused tokens when given); rows is the slice of the packed
    q it covers. A sequence with no key gives out 0, lse -inf (no call)."""
    results = []
    for b in range(len(cu_q) - 1):
        sq = cu_q[b + 1] - cu_q[b] if used_q is None else used_q[b]
        sk = cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b]
        rows = slice(int(cu_q[b]), int(cu_q[b] + sq))
        if sq == 0:
            continue
        if sk == 0:
            out = q[rows] * 0
            lse = np.full((q.shape[1], sq), -np.inf) if isinstance(q, np.ndarray) else None
            results.append((rows, out, lse))
            continue
        keys = slice(int(cu_k[b]), int(cu_k[b] + sk))
        out, lse = attend(q[None, rows], k[None, keys], v[None, keys], return_lse=True, **kw)
        results.append((rows, out[0], lse[0]))
    return results


# (lens_q, lens_k, heads_q, heads_kv, head_dim)
CASES = {
    "mixed-with-0-and-1": ([5, 0, 1, 17, 3, 1], [7, 4, 1, 17, 0, 9], 2, 2, 32),
    "gqa": ([9, 13, 2], [13, 9, 2], 8, 2, 16),
    "mqa": ([4, 6], [6, 4], 4, 1, 8),
    "q-longer-than-k": ([19, 12], [7, 3], 2, 1, 16),  # causal: the first rows see no key
    "single": ([11], [11], 3, 3, 64),
    "all-empty": ([0, 0], [0, 3], 2, 2, 16),
}
TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=2e-3)}


# --- no library -------------------------------------------------------------------------------------


def test_signature():
    params = [(p.name, p.default) for p in inspect.signature(hopattn.varlen_attention).parameters.values()]
    empty = inspect.Parameter.empty
    assert params == [
        ("q", empty), ("k", empty), ("v", empty), ("cu_seqlens_q", empty), ("cu_seqlens_k", empty),
        ("max_seqlen_q", empty), ("max_seqlen_k", empty), ("causal", False), ("softmax_scale", None),
        ("seqused_q", None), ("seqused_k", None), ("return_lse", False), ("check_index_values", False),
        ("deterministic", False), ("window_size", (-1, -1)), ("softcap", 0.0),
    ]
    assert "varlen_attention" in hopattn.__all__


@pytest.mark.parametrize("bad", [8.0, True, "8", None])
def test_max_seqlen_must_be_an_int(bad):
    with pytest.raises(TypeError, match="max_seqlen_k must be an int"):
        hopattn.varlen_attention(None, None, None, None, None, 8, bad)


def test_max_seqlen_beyond_int64():
    with pytest.raises(ValueError, match="max_seqlen_q=.* does not fit in int64"):
        hopattn.varlen_attention(None, None, None, None, None, 1 << 63, 8)


def test_q_must_be_an_array():
    with pytest.raises(TypeError, match="q: expected a torch.Tensor"):
        hopattn.varlen_attention([[[0.0]]], None, None, None, None, 1, 1)


# --- numpy: the CPU reference -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_sequence_equals_attention_on_it_alone(lib, case, causal, dtype):
    lens_q, lens_k, hq, hkv, d = CASES[case]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, hq, hkv, d, dtype)
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype and out.flags.c_contiguous
    assert lse.shape == (hq, q.shape[0]) and lse.dtype == np.float32
    for rows, want_out, want_lse in per_sequence(hopattn.attention, q, k, v, cu_q, cu_k, causal=causal):
        np.testing.assert_array_equal(out[rows], want_out)
        np.testing.assert_array_equal(lse[:, rows], want_lse)
    # And against the float64 formula, sequence by sequence.
    for rows, want_out, want_lse in per_sequence(
            lambda *a, return_lse, **kw: tuple(x.astype(np.float64) for x in naive_attention(*a, **kw)),
            q, k, v, cu_q, cu_k, causal=causal):
        np.testing.assert_allclose(out[rows].astype(np.float64), want_out, **TOLERANCE[dtype])
        np.testing.assert_allclose(lse[:, rows], want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_seqused(lib, causal):
    lens_q, lens_k = [6, 5, 4, 0], [8, 5, 3, 2]
    used_q, used_k = np.array([6, 2, 0, 0], np.int32), np.array([3, 5, 1, 0], np.int32)
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 2, 16, seed=1)
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 6, 8, causal=causal, seqused_q=used_q, seqused_k=used_k,
                                        return_lse=True)
    for rows, want_out, want_lse in per_sequence(hopattn.attention, q, k, v, cu_q, cu_k, used_q, used_k, causal=causal):
        np.testing.assert_array_equal(out[rows], want_out)
        np.testing.assert_array_equal(lse[:, rows], want_lse)
    # Rows past seqused_q: out 0, lse -inf.
    for b in range(4):
        unused = slice(int(cu_q[b] + used_q[b]), int(cu_q[b + 1]))
        assert np.all(out[unused] == 0) and np.all(np.isneginf(lse[:, unused]))


def test_seqused_on_one_side_only(lib):
    q, k, v, cu_q, cu_k = packed_inputs([3, 4], [5, 6], 2, 2, 8, seed=2)
    used_k = np.array([5, 2], np.int32)
    out = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, 6, causal=True, seqused_k=used_k)
    for rows, want_out, _ in per_sequence(hopattn.attention, q, k, v, cu_q, cu_k, None, used_k, causal=True):
        np.testing.assert_array_equal(out[rows], want_out)


def test_padding_rows_past_cu_seqlens(lib):
    # q and k hold more rows than the sequences use (a preallocated buffer): only the rows the
    # sequences cover are computed, and the extra keys are never attended to.
    q, k, v, cu_q, cu_k = packed_inputs([3, 5], [4, 2], 2, 2, 16, seed=3, pad_q=4, pad_k=7)
    out = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 5, 4, causal=True)
    assert out.shape == q.shape
    for rows, want_out, _ in per_sequence(hopattn.attention, q, k, v, cu_q, cu_k, causal=True):
        np.testing.assert_array_equal(out[rows], want_out)


def test_strided_views_of_a_packed_qkv(lib):
    rng = np.random.default_rng(4)
    cu = cu_seqlens([4, 7, 1])
    qkv = rng.standard_normal((int(cu[-1]), 3, 2, 32)).astype(np.float32)  # (total, 3, heads, head_dim)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    assert not q.flags.c_contiguous
    out, lse = hopattn.varlen_attention(q, k, v, cu, cu, 7, 7, causal=True, return_lse=True)
    want = hopattn.varlen_attention(*(np.ascontiguousarray(x) for x in (q, k, v)), cu, cu, 7, 7, causal=True,
                                    return_lse=True)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(lse, want[1])


def test_softmax_scale(lib):
    q, k, v, cu_q, cu_k = packed_inputs([3, 6], [5, 2], 2, 1, 32, seed=5)
    out = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 6, 5, softmax_scale=0.3)
    for rows, want_out, _ in per_sequence(hopattn.attention, q, k, v, cu_q, cu_k, softmax_scale=0.3):
        np.testing.assert_array_equal(out[rows], want_out)
    default = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 6, 5)
    explicit = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 6, 5, softmax_scale=1 / np.sqrt(32))
    np.testing.assert_allclose(default, explicit, rtol=1e-6, atol=1e-7)


def test_empty_batch(lib):
    q, k, v, cu_q, cu_k = packed_inputs([], [], 2, 2, 16)
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 0, 0, return_lse=True)
    assert out.shape == (0, 2, 16) and lse.shape == (2, 0)


def test_without_lse_returns_only_out(lib):
    q, k, v, cu_q, cu_k = packed_inputs([2], [3], 1, 1, 8)
    out = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 2, 3)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


def test_flash_attn_varlen_func_numpy(lib):
    q, k, v, cu_q, cu_k = packed_inputs([5, 0, 3], [4, 2, 6], 4, 2, 16, seed=6)
    used_k = np.array([4, 1, 6], np.int32)
    out = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 6, seqused_k=used_k, softmax_scale=0.2, causal=True,
                                     num_splits=0, pack_gqa=True, deterministic=True)
    want, want_lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 5, 6, causal=True, softmax_scale=0.2,
                                              seqused_k=used_k, return_lse=True)
    np.testing.assert_array_equal(out, want)
    out, lse = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 6, seqused_k=used_k, softmax_scale=0.2, causal=True,
                                          return_attn_probs=True)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(lse, want_lse)
    assert lse.shape == (4, 8)  # (nheads, total_q), as FA3


# --- errors (numpy) ---------------------------------------------------------------------------------


def error_inputs():
    return packed_inputs([3, 4, 2], [5, 1, 2], 2, 2, 16, seed=7)


def test_index_dtype_must_be_int32(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    with pytest.raises(ValueError, match="cu_seqlens_k: dtype must be int32, got int64"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k.astype(np.int64), 4, 5)
    with pytest.raises(ValueError, match="seqused_q: dtype must be int32, got float32"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, 5, seqused_q=np.zeros(3, np.float32))


def test_index_must_be_contiguous(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    strided = np.repeat(cu_q, 2)[::2]
    assert np.array_equal(strided, cu_q) and not strided.flags.c_contiguous
    with pytest.raises(ValueError, match="cu_seqlens_q must be contiguous"):
        hopattn.varlen_attention(q, k, v, strided, cu_k, 4, 5)


def test_index_must_be_an_array_like_q(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    with pytest.raises(TypeError, match=r"cu_seqlens_q: expected a numpy.ndarray \(int32\) like q, got list"):
        hopattn.varlen_attention(q, k, v, cu_q.tolist(), cu_k, 4, 5)


@pytest.mark.parametrize("name, bad, pattern", [
    ("cu_seqlens_k", [0, 5, 6], r"cu_seqlens_k\.sizes\[0\]=3 but expected 4 \(batch \+ 1, as cu_seqlens_q\)"),
    ("cu_seqlens_q", [0, 3, 2, 9], r"cu_seqlens_q\[2\]=2 is less than cu_seqlens_q\[1\]=3 \(must be non-decreasing\)"),
    ("cu_seqlens_q", [1, 3, 7, 9], r"cu_seqlens_q\[0\]=1 but must be 0"),
    ("cu_seqlens_q", [0, 3, 7, 10], r"cu_seqlens_q\[3\]=10 exceeds the total tokens q\.sizes\[0\]=9"),
    ("cu_seqlens_k", [[0, 5], [6, 8]], r"cu_seqlens_k: expected 1 dim"),
], ids=["length", "non-decreasing", "start", "past-total", "2-dims"])
def test_index_errors_name_the_argument(lib, name, bad, pattern):
    q, k, v, cu_q, cu_k = error_inputs()
    index = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, name: np.array(bad, np.int32)}
    with pytest.raises(hopattn.InvalidArgumentError, match=pattern):
        hopattn.varlen_attention(q, k, v, index["cu_seqlens_q"], index["cu_seqlens_k"], 4, 5)


def test_length_beyond_max_seqlen(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    with pytest.raises(ValueError, match=r"\(sequence 1\) exceeds max_seqlen_q=3"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 3, 5)
    with pytest.raises(ValueError, match="max_seqlen_k=-1 is negative"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, -1)


def test_seqused_errors(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    with pytest.raises(ValueError, match=r"seqused_k\[1\]=2 is outside \[0, 1\]"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, 5, seqused_k=np.array([5, 2, 0], np.int32))
    with pytest.raises(ValueError, match=r"seqused_q\.sizes\[0\]=4 but expected 3 \(batch\)"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, 5, seqused_q=np.zeros(4, np.int32))


def test_tensor_errors(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    with pytest.raises(ValueError, match=r"q: expected 3 dims \(total_tokens, heads, head_dim\)"):
        hopattn.varlen_attention(q[None], k, v, cu_q, cu_k, 4, 5)
    with pytest.raises(ValueError, match="k: dtype fp16 differs from q's fp32"):
        hopattn.varlen_attention(q, k.astype(np.float16), v, cu_q, cu_k, 4, 5)
    with pytest.raises(ValueError, match="v.sizes\\[0\\] \\(total_k\\)"):
        hopattn.varlen_attention(q, k, v[:-1], cu_q, cu_k, 4, 5)
    with pytest.raises(ValueError, match="softmax_scale must be finite and > 0"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, 5, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="k: expected a numpy.ndarray"):
        hopattn.varlen_attention(q, k.tolist(), v, cu_q, cu_k, 4, 5)


def test_c_abi_rejects_malformed_structs(lib):
    from hopattn import _lib

    c = _lib.load()
    for fn in (c.hopattn_forward_varlen_cpu, lambda a: c.hopattn_forward_varlen(a, None)):
        assert fn(None) == _lib.STATUS_INVALID_ARGUMENT and _lib.last_error() == "args is null"
    q, k, v, cu_q, cu_k = error_inputs()
    out = np.empty_like(q)
    tensors = [ops._numpy_tensor(n, a) for n, a in (("q", q), ("k", k), ("v", v), ("out", out))]
    cu = [ops._numpy_tensor(n, a, _lib.DTYPE_INT32) for n, a in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k))]
    args = _lib.make_varlen_fwd_args(*tensors, None, *cu, None, None, 4, 5, True, None, False)
    assert c.hopattn_forward_varlen_cpu(args) == _lib.STATUS_SUCCESS  # the struct as Python packs it
    args.cu_seqlens_k.dtype = 99
    assert c.hopattn_forward_varlen_cpu(args) == _lib.STATUS_INVALID_ARGUMENT
    assert _lib.last_error() == "cu_seqlens_k: unknown dtype code 99"
    want = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 4, 5, causal=True)
    np.testing.assert_array_equal(out, want)


def host_tensor(shape, code):
    """A HopattnTensor over a fresh zeroed host buffer: 2-byte elements for bf16/fp16 codes, int32
    for DTYPE_INT32. Returns (tensor, buffer); keep the buffer alive while the tensor is used."""
    from hopattn import _lib

    buf = np.zeros(shape, np.int32 if code == _lib.DTYPE_INT32 else np.uint16)
    return _lib.make_tensor(buf.ctypes.data, code, shape, [s // buf.itemsize for s in buf.strides]), buf


def backward_kernel_or_skip():
    """(dtype code, head_dim) of a backward kernel in this build (the validation ends with a kernel check)."""
    from hopattn import _lib

    pairs = sorted((d, h) for kind, d, h in hopattn.build_info()["kernels"] if kind == "bwd")
    if not pairs:
        pytest.skip("no backward kernel in this build")
    dtype, head_dim = pairs[0]
    return {"bf16": _lib.DTYPE_BF16, "fp16": _lib.DTYPE_FP16}[dtype], head_dim


def varlen_bwd_struct(code, head_dim, total_q=9, total_k=8, heads_q=4, heads_kv=2, batch=3):
    """A well-formed HopattnVarlenBwdArgs over host buffers (no seqused), and the buffers."""
    from hopattn import _lib

    keep, t = [], {}
    for name, rows, heads in (("q", total_q, heads_q), ("k", total_k, heads_kv), ("v", total_k, heads_kv),
                              ("out", total_q, heads_q), ("dout", total_q, heads_q), ("dq", total_q, heads_q),
                              ("dk", total_k, heads_kv), ("dv", total_k, heads_kv)):
        t[name], buf = host_tensor((rows, heads, head_dim), code)
        keep.append(buf)
    lse = np.zeros((heads_q, total_q), np.float32)
    keep.append(lse)
    t["lse"] = ops._numpy_tensor("lse", lse)
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        t[name], buf = host_tensor((batch + 1,), _lib.DTYPE_INT32)
        keep.append(buf)
    args = _lib.make_varlen_bwd_args(t["q"], t["k"], t["v"], t["out"], t["dout"], t["lse"], t["dq"], t["dk"], t["dv"],
                                     t["cu_seqlens_q"], t["cu_seqlens_k"], None, None, 4, 4, True, None, True, False)
    return args, keep


def test_c_abi_backward_rejects_malformed_structs_and_arguments(lib):
    # Every case fails validation, which runs before any device is looked at: safe with or without a GPU.
    from hopattn import _lib

    c = _lib.load()
    assert c.hopattn_backward_varlen(None, None, 0, None) == _lib.STATUS_INVALID_ARGUMENT
    assert _lib.last_error() == "args is null"
    assert c.hopattn_backward_varlen_workspace_size(None) == 0
    code, head_dim = backward_kernel_or_skip()
    other, names = 1 - code, {_lib.DTYPE_BF16: "bf16", _lib.DTYPE_FP16: "fp16"}
    cases = [
        ("cu_seqlens_k", "dtype", 99, "cu_seqlens_k: unknown dtype code 99"),
        ("dv", "ndim", 5, "dv: ndim 5 out of range"),
        ("seqused_q", "dtype", -1, "seqused_q: unknown dtype code -1"),  # present (ndim 1), bad dtype
        ("dout", "dtype", other, f"dout: dtype {names[other]} differs from q's {names[code]}"),
        ("dq", "sizes", 7, "dq.sizes[0]=7 but q.sizes[0]=9"),
        ("lse", "data", None, "lse: required by backward_varlen"),
        ("max_seqlen_k", None, -2, "max_seqlen_k=-2 is negative"),
    ]
    for field, attr, value, message in cases:
        args, keep = varlen_bwd_struct(code, head_dim)
        if field == "seqused_q":
            args.seqused_q, buf = host_tensor((3,), _lib.DTYPE_INT32)
            keep.append(buf)
        if attr is None:
            setattr(args, field, value)
        elif attr == "sizes":
            getattr(args, field).sizes[0] = value
        else:
            setattr(getattr(args, field), attr, value)
        assert c.hopattn_backward_varlen_workspace_size(args) == 0, field
        assert c.hopattn_backward_varlen(args, None, 0, None) == _lib.STATUS_INVALID_ARGUMENT, field
        assert _lib.last_error().startswith(message), (field, _lib.last_error())


def test_c_abi_backward_struct_as_python_packs_it_validates(lib):
    # The library reads the struct Python packs: a well-formed one passes validation, so its
    # workspace size is the backward kernel's (a size query; nothing runs, no device needed).
    from hopattn import _lib

    args, keep = varlen_bwd_struct(*backward_kernel_or_skip())
    assert _lib.load().hopattn_backward_varlen_workspace_size(args) > 0


def test_c_abi_forward_workspace_form_checks_its_workspace(lib):
    # hopattn_forward_varlen_with_workspace, which hopattn.varlen_attention calls on CUDA tensors:
    # 256 bytes (the tile counter) for any valid struct, 0 for a malformed one, and a missing or
    # short workspace refused naming it. Validation and the workspace check come before any device
    # is looked at, so this is safe with or without a GPU (a valid call is never made here).
    from hopattn import _lib

    pairs = sorted((d, h) for kind, d, h in hopattn.build_info()["kernels"] if kind == "fwd")
    if not pairs:
        pytest.skip("no forward kernel in this build")
    code = {"bf16": _lib.DTYPE_BF16, "fp16": _lib.DTYPE_FP16}[pairs[0][0]]
    head_dim = pairs[0][1]
    c = _lib.load()
    assert c.hopattn_forward_varlen_workspace_size(None) == 0
    assert c.hopattn_forward_varlen_with_workspace(None, None, 0, None) == _lib.STATUS_INVALID_ARGUMENT
    assert _lib.last_error() == "args is null"
    keep, t = [], {}
    for name, rows, heads in (("q", 9, 4), ("k", 8, 2), ("v", 8, 2), ("out", 9, 4)):
        t[name], buf = host_tensor((rows, heads, head_dim), code)
        keep.append(buf)
    cu_q, buf_q = host_tensor((4,), _lib.DTYPE_INT32)
    cu_k, buf_k = host_tensor((4,), _lib.DTYPE_INT32)
    args = _lib.make_varlen_fwd_args(t["q"], t["k"], t["v"], t["out"], None, cu_q, cu_k, None, None, 4, 4, True, None,
                                     False)
    assert c.hopattn_forward_varlen_workspace_size(args) == 256
    assert c.hopattn_forward_varlen_with_workspace(args, None, 0, None) == _lib.STATUS_INVALID_ARGUMENT
    assert _lib.last_error() == "workspace is null but 256 bytes are needed (forward_varlen_workspace_size)"
    scratch = np.zeros(1024, np.uint8)
    aligned = -(-scratch.ctypes.data // 256) * 256
    assert c.hopattn_forward_varlen_with_workspace(args, aligned, 255, None) == _lib.STATUS_INVALID_ARGUMENT
    assert _lib.last_error() == "workspace_bytes=255 but 256 bytes are needed (forward_varlen_workspace_size)"
    args.max_seqlen_k = -1
    assert c.hopattn_forward_varlen_workspace_size(args) == 0
    assert c.hopattn_forward_varlen_with_workspace(args, aligned, 256, None) == _lib.STATUS_INVALID_ARGUMENT
    assert _lib.last_error().startswith("max_seqlen_k=-1 is negative")


def test_errors_carry_the_library_status(lib):
    q, k, v, cu_q, cu_k = error_inputs()
    with pytest.raises(hopattn.HopattnError) as info:
        hopattn.varlen_attention(q, k, v, cu_q[::-1].copy(), cu_k, 4, 5)
    assert isinstance(info.value, hopattn.InvalidArgumentError) and info.value.status == 1
    assert str(info.value).startswith("hopattn varlen CPU reference: cu_seqlens_q[0]=9")


# --- torch, no GPU ----------------------------------------------------------------------------------


def fake_packed(mode, total_q=40, total_k=50, heads_q=4, heads_kv=2, head_dim=64, batch=3, requires_grad=False,
                index_dtype=None, index_device="cuda"):
    with mode:
        q = torch.empty((total_q, heads_q, head_dim), dtype=torch.bfloat16, device="cuda", requires_grad=requires_grad)
        k = torch.empty((total_k, heads_kv, head_dim), dtype=torch.bfloat16, device="cuda")
        v = torch.empty((total_k, heads_kv, head_dim), dtype=torch.bfloat16, device="cuda")
        cu_q = torch.empty(batch + 1, dtype=index_dtype or torch.int32, device=index_device)
        cu_k = torch.empty(batch + 1, dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k


@needs_torch
def test_torch_cpu_tensors_are_refused_as_by_attention():
    q, k, v, cu_q, cu_k = (torch.from_numpy(x) for x in packed_inputs([2, 3], [3, 2], 2, 2, 16))
    with pytest.raises(ValueError, match="q: expected a CUDA tensor, got device 'cpu'"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 3, 3)


@needs_custom_op
def test_gradients_with_fake_tensors():
    # The op route (a dispatch mode is active): hopattn::fwd_varlen with its autograd; no library or
    # GPU involved.
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    q, k, v, cu_q, cu_k = fake_packed(mode, requires_grad=True)
    with mode:
        k.requires_grad_()
        out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 16, 16, causal=True, return_lse=True,
                                            deterministic=True)
        assert out.requires_grad and not lse.requires_grad
        assert out.shape == (40, 4, 64) and out.dtype == torch.bfloat16 and out.is_contiguous()
        assert lse.shape == (4, 40) and lse.dtype == torch.float32
        # The op's registered autograd (running it would need a CUDA device for autograd's engine;
        # the fake backward itself is tested below).
        assert "hopattn_fwd_varlen" in out.grad_fn.name()
        out = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 16, 16, deterministic=True)
        assert out.requires_grad
        with torch.no_grad():  # no gradient needed: no history
            out = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 16, 16)
        assert not out.requires_grad
        out = hopattn.varlen_attention(q.detach(), k.detach(), v, cu_q, cu_k, 16, 16)
        assert not out.requires_grad


@needs_custom_op
def test_fake_backward_checks_dout_and_lays_gradients_out_like_the_inputs():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hopattn import torch_ops

    mode = FakeTensorMode()
    q, k, v, cu_q, cu_k = fake_packed(mode)
    with mode:
        # Heads-major storage viewed as (total, heads, head_dim): zeros_like keeps the permutation.
        q = q.transpose(0, 1).contiguous().transpose(0, 1)
        out, lse = torch_ops.fwd_varlen(q, k, v, cu_q, cu_k, 16, 16)
        dq, dk, dv = torch_ops.bwd_varlen(torch.empty_like(out), q, k, v, out, lse, cu_q, cu_k, 16, 16, None, None,
                                          True, None, False)
        for grad, like in ((dq, q), (dk, k), (dv, v)):
            assert grad.shape == like.shape and grad.dtype == like.dtype and grad.stride() == like.stride()
        with pytest.raises(ValueError, match=r"dout: shape \(20, 4, 64\) differs from q's \(40, 4, 64\)"):
            torch_ops.bwd_varlen(out[:20], q, k, v, out, lse, cu_q, cu_k, 16, 16, None, None, True, None, False)
        with pytest.raises(ValueError, match="cu_seqlens_k: dtype must be int32"):
            torch_ops.bwd_varlen(out, q, k, v, out, lse, cu_q, cu_k.long(), 16, 16, None, None, True, None, False)


@needs_custom_op
def test_index_tensor_checks_with_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    q, k, v, cu_q, cu_k = fake_packed(mode)
    int64 = fake_packed(mode, index_dtype=torch.int64)[3]
    on_cpu = fake_packed(mode, index_device="cpu")[3]
    with mode:
        strided = torch.empty(8, dtype=torch.int32, device="cuda")[::2]
        with pytest.raises(ValueError, match="cu_seqlens_q: dtype must be int32, got torch.int64"):
            hopattn.varlen_attention(q, k, v, int64, cu_k, 16, 16)
        with pytest.raises(ValueError, match="cu_seqlens_k: on device 'cpu' but q is on 'cuda"):
            hopattn.varlen_attention(q, k, v, cu_q, on_cpu, 16, 16)
        with pytest.raises(ValueError, match="cu_seqlens_q must be contiguous"):
            hopattn.varlen_attention(q, k, v, strided, cu_k, 16, 16)
        with pytest.raises(TypeError, match="seqused_k: expected a torch.Tensor"):
            hopattn.varlen_attention(q, k, v, cu_q, cu_k, 16, 16, seqused_k=np.zeros(3, np.int32))
        with pytest.raises(ValueError, match=r"q: expected 3 dims \(total_tokens, heads, head_dim\)"):
            hopattn.varlen_attention(q[None], k, v, cu_q, cu_k, 16, 16)


@needs_custom_op
def test_dynamo_traces_varlen_as_one_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    def block(q, k, v, cu_q, cu_k, used):
        out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 16, 16, causal=True, seqused_k=used, return_lse=True)
        return out * 2, lse

    mode = FakeTensorMode()
    q, k, v, cu_q, cu_k = fake_packed(mode)
    with mode:
        used = torch.empty(3, dtype=torch.int32, device="cuda")
        explanation = torch._dynamo.explain(block)(q, k, v, cu_q, cu_k, used)
        assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons
        assert any(node.target is torch.ops.hopattn.fwd_varlen.default for node in explanation.graphs[0].graph.nodes)
        explanation = torch._dynamo.explain(lambda *t: fai.flash_attn_varlen_func(*t, 16, 16))(q, k, v, cu_q, cu_k)
        assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


@needs_custom_op
def test_op_schema():
    from hopattn import torch_ops

    assert str(torch_ops.fwd_varlen._schema) == (
        "hopattn::fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
        "SymInt max_seqlen_q, SymInt max_seqlen_k, Tensor? seqused_q=None, Tensor? seqused_k=None, "
        "bool causal=False, float? softmax_scale=None, bool check_index_values=False, "
        "bool deterministic=False, SymInt window_left=-1, SymInt window_right=-1, float softcap=0.) "
        "-> (Tensor, Tensor)"
    )
    assert str(torch_ops.bwd_varlen._schema) == (
        "hopattn::bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, Tensor? seqused_q, "
        "Tensor? seqused_k, bool causal, float? softmax_scale, bool deterministic, SymInt window_left=-1, "
        "SymInt window_right=-1, float softcap=0.) -> (Tensor, Tensor, Tensor)"
    )


@needs_custom_op
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_op_cpu_kernel_equals_numpy(lib, causal):
    from hopattn import torch_ops

    arrays = packed_inputs([5, 0, 1, 9], [3, 4, 1, 9], 4, 2, 16, seed=8)
    used_q = np.array([5, 0, 1, 4], np.int32)
    q, k, v, cu_q, cu_k = (torch.from_numpy(x) for x in arrays)
    out, lse = torch_ops.fwd_varlen(q, k, v, cu_q, cu_k, 9, 9, torch.from_numpy(used_q), None, causal, None, False)
    want_out, want_lse = hopattn.varlen_attention(*arrays, 9, 9, causal=causal, seqused_q=used_q, return_lse=True)
    np.testing.assert_array_equal(out.numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    torch.library.opcheck(torch_ops.fwd_varlen, (q, k, v, cu_q, cu_k, 9, 9), {"causal": causal})
    with pytest.raises(ValueError, match="cu_seqlens_q: dtype must be int32"):
        torch_ops.fwd_varlen(q, k, v, cu_q.long(), cu_k, 9, 9)


def per_sequence_grads(q, k, v, dout, cu_q, cu_k, used_q=None, used_k=None, **kw):
    """dq, dk, dv (zeros where no sequence reaches) from hopattn.attention_backward (numpy, the dense
    CPU reference) on each sequence alone: the definition bwd_varlen's CPU kernel follows."""
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(len(cu_q) - 1):
        sq = cu_q[b + 1] - cu_q[b] if used_q is None else used_q[b]
        sk = cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b]
        if sq == 0 or sk == 0:
            continue
        rows, keys = slice(int(cu_q[b]), int(cu_q[b] + sq)), slice(int(cu_k[b]), int(cu_k[b] + sk))
        g = hopattn.attention_backward(q[None, rows], k[None, keys], v[None, keys], dout[None, rows], **kw)
        dq[rows], dk[keys], dv[keys] = g[0][0], g[1][0], g[2][0]
    return dq, dk, dv


# (lens_q, lens_k, heads_q, heads_kv, used_q, used_k, pad_q, pad_k)
CPU_GRAD_CASES = {
    "mixed-with-0-and-1": ([5, 0, 1, 9, 3], [3, 4, 1, 9, 0], 4, 2, None, None, 0, 0),
    "mqa-q-longer": ([7, 2], [3, 2], 4, 1, None, None, 0, 0),
    "seqused": ([6, 5, 4, 0], [8, 5, 3, 2], 4, 2, [6, 2, 0, 0], [3, 5, 1, 0], 0, 0),
    "padding-rows": ([3, 5], [4, 2], 2, 2, None, None, 4, 7),
}


@needs_custom_op
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", list(CPU_GRAD_CASES))
def test_op_cpu_gradients_equal_the_per_sequence_reference(lib, case, causal):
    # Autograd through hopattn::fwd_varlen (CPU kernel) runs hopattn::bwd_varlen's CPU kernel.
    from hopattn import torch_ops

    lens_q, lens_k, hq, hkv, used_q, used_k, pad_q, pad_k = CPU_GRAD_CASES[case]
    arrays = packed_inputs(lens_q, lens_k, hq, hkv, 16, seed=9, pad_q=pad_q, pad_k=pad_k)
    used_q, used_k = (None if u is None else np.array(u, np.int32) for u in (used_q, used_k))
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in arrays[:3])
    cu_q, cu_k = (torch.from_numpy(x) for x in arrays[3:])
    used = [None if u is None else torch.from_numpy(u) for u in (used_q, used_k)]
    out, lse = torch_ops.fwd_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), *used, causal, 0.3)
    assert out.requires_grad and not lse.requires_grad
    dout = torch.from_numpy(np.random.default_rng(10).standard_normal(out.shape).astype(np.float32))
    grads = torch.autograd.grad(out, (q, k, v), dout)
    want = per_sequence_grads(*arrays[:3], dout.numpy(), arrays[3], arrays[4], used_q, used_k, causal=causal,
                              softmax_scale=0.3)
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        np.testing.assert_array_equal(got.numpy(), w, err_msg=name)
    # Rows past seqused and past cu_seqlens[batch] (padding) get exactly 0.
    assert not grads[0][int(arrays[3][-1]):].any() and not grads[1][int(arrays[4][-1]):].any()


@needs_custom_op
def test_opcheck_backward_and_autograd_cpu(lib):
    from hopattn import torch_ops

    arrays = packed_inputs([5, 0, 1, 9], [3, 4, 1, 9], 4, 2, 16, seed=11)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in arrays[:3])
    cu_q, cu_k = (torch.from_numpy(x) for x in arrays[3:])
    used_k = torch.tensor([3, 2, 1, 9], dtype=torch.int32)
    # fwd_varlen with inputs that require grad: opcheck also checks its registered autograd.
    torch.library.opcheck(torch_ops.fwd_varlen, (q, k, v, cu_q, cu_k, 9, 9), {"seqused_k": used_k, "causal": True})
    with torch.no_grad():
        out, lse = torch_ops.fwd_varlen(q, k, v, cu_q, cu_k, 9, 9, None, used_k, True)
    dout = torch.randn_like(out)
    detached = [t.detach() for t in (q, k, v)]
    torch.library.opcheck(torch_ops.bwd_varlen, (dout, *detached, out, lse, cu_q, cu_k, 9, 9, None, used_k, True, 0.5,
                                                 True))
    with pytest.raises(ValueError, match=r"hopattn varlen CPU reference backward: cu_seqlens_q\[2\]=2 is less"):
        torch_ops.bwd_varlen(dout, *detached, out, lse, torch.tensor([0, 5, 2, 6, 15], dtype=torch.int32), cu_k, 9, 9,
                             None, None, False, None, False)


@needs_custom_op
def test_autograd_saves_inputs_outputs_and_index_tensors(lib):
    from hopattn import torch_ops

    arrays = packed_inputs([3, 4], [5, 2], 2, 1, 16, seed=12)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in arrays[:3])
    cu_q, cu_k = (torch.from_numpy(x) for x in arrays[3:])
    out, lse = torch_ops.fwd_varlen(q, k, v, cu_q, cu_k, 4, 5)
    saved = out.grad_fn.saved_tensors
    assert [t.data_ptr() for t in saved[:7]] == [t.data_ptr() for t in (q, k, v, out, lse, cu_q, cu_k)]
    assert saved[7:] == (None, None)  # no seqused


@needs_custom_op
def test_compile_fullgraph_forward_backward_on_cpu(lib):
    # AOTAutograd traces hopattn::fwd_varlen's autograd: hopattn::bwd_varlen lands in the backward graph.
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from hopattn import torch_ops

    graphs = {}

    def record(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm
            return make_boxed_func(gm.forward)
        return compiler

    def block(q, k, v, w, cu_q, cu_k):
        out, _ = torch_ops.fwd_varlen(q * w, k, v, cu_q, cu_k, 9, 9, None, None, True, None, False, True)
        return (out * w).sum(dim=-1)

    arrays = packed_inputs([5, 0, 1, 9], [3, 4, 1, 9], 4, 2, 16, seed=13)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in arrays[:3])
    cu_q, cu_k = (torch.from_numpy(x) for x in arrays[3:])
    w = torch.rand(16, requires_grad=True)
    leaves = (q, k, v, w)
    torch._dynamo.reset()
    compiled = torch.compile(block, backend=aot_autograd(fw_compiler=record("fw"), bw_compiler=record("bw")),
                             fullgraph=True)
    compiled(*leaves, cu_q, cu_k).sum().backward()
    compiled_grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    block(*leaves, cu_q, cu_k).sum().backward()
    for name, got, t in zip(("q", "k", "v", "w"), compiled_grads, leaves):
        torch.testing.assert_close(got, t.grad, rtol=1e-6, atol=1e-6, msg=name)
    targets = {name: {node.target for node in gm.graph.nodes} for name, gm in graphs.items()}
    assert torch.ops.hopattn.fwd_varlen.default in targets["fw"]
    assert torch.ops.hopattn.bwd_varlen.default in targets["bw"]


@needs_custom_op
def test_direct_route_function_on_cpu_equals_the_op(lib):
    # The direct route's autograd.Function (varlen._make_direct_function) over CPU tensors, where
    # its launches fall back to the CPU kernels: the same gradients as hopattn::fwd_varlen's autograd.
    from hopattn import torch_ops, varlen

    apply = varlen._make_direct_function(torch, ops._direct(torch))
    arrays = packed_inputs([6, 5, 4, 0], [8, 5, 3, 2], 4, 2, 16, seed=14)
    cu_q, cu_k = (torch.from_numpy(x) for x in arrays[3:])
    used_q = torch.tensor([6, 2, 0, 0], dtype=torch.int32)
    dout = torch.from_numpy(np.random.default_rng(15).standard_normal(arrays[0].shape).astype(np.float32))
    leaves = [torch.from_numpy(x).requires_grad_() for x in arrays[:3]]
    window = (2, -1)  # with causal: each query sees itself and the 2 keys before it
    softcap = 1.5  # reaches the backward too
    out, lse = apply(*leaves, cu_q, cu_k, 6, 8, used_q, None, True, 0.25, True, False, True, window, softcap)
    assert out.requires_grad and not lse.requires_grad
    assert len(out.grad_fn.saved_tensors) == 9  # q, k, v, out, lse, cu_seqlens_q/k, seqused_q/k
    got = torch.autograd.grad(out, leaves, dout)
    twins = [t.detach().clone().requires_grad_() for t in leaves]
    want_out, want_lse = torch_ops.fwd_varlen(*twins, cu_q, cu_k, 6, 8, used_q, None, True, 0.25, False, True,
                                              *window, softcap)
    want = torch.autograd.grad(want_out, twins, dout)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert torch.equal(a, b), name
    out = apply(*leaves, cu_q, cu_k, 6, 8, used_q, None, True, 0.25, False, False, False, window, softcap)  # out only
    (dq,) = torch.autograd.grad(out, leaves[:1], dout, create_graph=True)
    assert torch.equal(dq, got[0])
    with pytest.raises(RuntimeError):  # no double backward (once_differentiable), as the op
        dq.sum().backward()


# --- GPU ------------------------------------------------------------------------------------------

# (lens_q, lens_k, heads_q, heads_kv): several key tiles, partial tiles, empty and 1-token sequences
GPU_CASES = {
    "mixed": ([0, 1, 130, 257, 64, 3], [5, 1, 300, 257, 0, 190], 8, 2),
    "mha": ([128, 77, 200], [128, 77, 200], 4, 4),
    "q-longer-than-k": ([300, 17], [120, 1], 4, 1),
}
REL_L2 = {"bfloat16": 1e-2, "float16": 3e-3}


def gpu_packed(lens_q, lens_k, heads_q, heads_kv, head_dim, dtype, seed=0):
    """Packed CUDA q, k, v (rounded to dtype) and int32 CUDA cu_seqlens."""
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, heads_q, heads_kv, head_dim, seed=seed)
    return (*(torch.from_numpy(x).to("cuda", dtype) for x in (q, k, v)),
            *(torch.from_numpy(x).cuda() for x in (cu_q, cu_k)))


def cpu_reference(q, k, v, cu_q, cu_k, max_q, max_k, **kw):
    """The CPU reference on the same (rounded) values in float32: out, lse as CUDA float32."""
    out, lse = hopattn.varlen_attention(*(t.float().cpu().numpy() for t in (q, k, v)), cu_q.cpu().numpy(),
                                        cu_k.cpu().numpy(), max_q, max_k, return_lse=True,
                                        **{n: (x.cpu().numpy() if torch.is_tensor(x) else x) for n, x in kw.items()})
    return torch.from_numpy(out).cuda(), torch.from_numpy(lse).cuda()


def gpu_setup():
    """(torch dtype, head_dim) of a forward kernel in this build (bf16 and head_dim 128 preferred)."""
    return gpu_kernel_pair(want_backward=False, prefer_head_dim=128)


def assert_close(got, want, dtype=None):
    """Against the same kernel family (dtype None): max abs diff < 2e-2 and rel-L2 < 1e-2. Against
    the float32 CPU reference (dtype given): rel-L2 within the dtype's rounding, as test_torch.py."""
    got, want = got.float(), want.float()
    err = rel_l2(got, want)
    if dtype is None:
        assert (got - want).abs().max().item() < 2e-2 and err < 1e-2, err
    else:
        assert err < REL_L2[str(dtype).split(".")[-1]], err


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_gpu_matches_per_sequence_attention_and_the_cpu_reference(lib, case, causal):
    dtype, head_dim = gpu_setup()
    lens_q, lens_k, hq, hkv = GPU_CASES[case]
    q, k, v, cu_q, cu_k = gpu_packed(lens_q, lens_k, hq, hkv, head_dim, dtype, seed=1)
    max_q, max_k = max(lens_q), max(lens_k)
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, return_lse=True)
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    assert lse.shape == (hq, q.shape[0]) and lse.dtype == torch.float32
    cu_q_host, cu_k_host = cu_q.cpu().numpy(), cu_k.cpu().numpy()
    for rows, want_out, want_lse in per_sequence(hopattn.attention, q, k, v, cu_q_host, cu_k_host, causal=causal):
        assert_close(out[rows], want_out)
        if want_lse is None:  # no keys: out 0, lse -inf
            assert torch.all(out[rows] == 0) and torch.all(torch.isneginf(lse[:, rows]))
        else:
            torch.testing.assert_close(lse[:, rows], want_lse, rtol=1e-3, atol=1e-3)
    ref_out, ref_lse = cpu_reference(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal)
    assert_close(out, ref_out, dtype)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-3, atol=1e-3)


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_seqused(lib, causal):
    dtype, head_dim = gpu_setup()
    q, k, v, cu_q, cu_k = gpu_packed([100, 64, 3, 0], [150, 64, 200, 9], 4, 2, head_dim, dtype, seed=2)
    used_q = torch.tensor([100, 10, 0, 0], dtype=torch.int32, device="cuda")
    used_k = torch.tensor([70, 64, 150, 0], dtype=torch.int32, device="cuda")
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 100, 200, causal=causal, seqused_q=used_q,
                                        seqused_k=used_k, return_lse=True)
    ref_out, ref_lse = cpu_reference(q, k, v, cu_q, cu_k, 100, 200, causal=causal, seqused_q=used_q, seqused_k=used_k)
    assert_close(out, ref_out, dtype)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-3, atol=1e-3)
    assert torch.all(out[110:164] == 0) and torch.all(torch.isneginf(lse[:, 110:164]))  # past seqused_q[1]


@needs_gpu
def test_gpu_check_index_values(lib):
    dtype, head_dim = gpu_setup()
    q, k, v, cu_q, cu_k = gpu_packed([10, 20, 5], [10, 20, 5], 2, 2, head_dim, dtype, seed=3)
    hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 20, check_index_values=True)  # good values pass
    bad = torch.tensor([0, 10, 5, 35], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\]=5 is less than cu_seqlens_q\[1\]=10"):
        hopattn.varlen_attention(q, k, v, bad, cu_k, 20, 20, check_index_values=True)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[1\]-cu_seqlens_k\[0\]=10 \(sequence 0\) exceeds max_seqlen_k=8"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 8, check_index_values=True)
    with pytest.raises(ValueError, match=r"seqused_k\[0\]=11 is outside \[0, 10\]"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 20, check_index_values=True,
                                 seqused_k=torch.tensor([11, 0, 0], dtype=torch.int32, device="cuda"))


@needs_gpu
def test_gpu_argument_errors(lib):
    dtype, head_dim = gpu_setup()
    q, k, v, cu_q, cu_k = gpu_packed([10, 20], [10, 20], 2, 2, head_dim, dtype, seed=4)
    with pytest.raises(ValueError, match=r"cu_seqlens_q: on device 'cpu' but q is on 'cuda:0'"):
        hopattn.varlen_attention(q, k, v, cu_q.cpu(), cu_k, 20, 20)
    with pytest.raises(ValueError, match="cu_seqlens_k: dtype must be int32, got torch.int64"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k.long(), 20, 20)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\.sizes\[0\]=2 but expected 3"):
        hopattn.varlen_attention(q, k, v, cu_q, cu_k[:2], 20, 20)
    # fp32 is a valid dtype that this backend lacks: kUnsupported, as for hopattn.attention.
    with pytest.raises(hopattn.UnsupportedError, match="k: dtype fp32 is not supported by this backend"):
        hopattn.varlen_attention(q, k.float(), v, cu_q, cu_k, 20, 20)


@needs_gpu
def test_gpu_grad_mode_records_history_and_no_grad_none(lib):
    dtype, head_dim = gpu_grad_setup()
    q, k, v, cu_q, cu_k = gpu_packed([10, 20], [10, 20], 2, 2, head_dim, dtype, seed=5)
    want, want_lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 20, return_lse=True)
    for leaf in ("q", "k", "v"):
        args = {"q": q, "k": k, "v": v}
        args[leaf] = args[leaf].detach().clone().requires_grad_()
        out, lse = hopattn.varlen_attention(args["q"], args["k"], args["v"], cu_q, cu_k, 20, 20, return_lse=True)
        assert out.requires_grad and out.grad_fn is not None and not lse.requires_grad
        assert torch.equal(out.detach(), want) and torch.equal(lse, want_lse)  # the same forward
        with torch.no_grad():
            out = hopattn.varlen_attention(args["q"], args["k"], args["v"], cu_q, cu_k, 20, 20)
        assert not out.requires_grad and torch.equal(out, want)


def gpu_grad_setup():
    """(torch dtype, head_dim) with forward and backward kernels in this build."""
    return gpu_kernel_pair(want_backward=True, prefer_head_dim=128)


GRAD_REL_L2 = 2e-2  # bf16/fp16 gradients against per-sequence hopattn.attention (same kernel family)


def gpu_dout(like, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(like.shape, generator=gen, device="cuda").to(like.dtype)


def varlen_grads(q, k, v, dout, *args, **kw):
    """dq, dk, dv of hopattn.varlen_attention(q, k, v, *args, **kw) given dout (fresh leaves)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = hopattn.varlen_attention(*leaves, *args, **kw)
    grads = torch.autograd.grad(out, leaves, dout)
    for g, t in zip(grads, (q, k, v)):
        assert g.shape == t.shape and g.dtype == t.dtype
    return grads


def per_sequence_attention_grads(q, k, v, dout, cu_q, cu_k, used_q=None, used_k=None, **kw):
    """[(rows, keys, dq_b, dk_b, dv_b)]: hopattn.attention's gradients on each sequence alone (a batch
    of 1; its first seqused tokens when given); zeros for a sequence with no query or no key."""
    results = []
    for b in range(len(cu_q) - 1):
        sq = cu_q[b + 1] - cu_q[b] if used_q is None else used_q[b]
        sk = cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b]
        rows, keys = slice(int(cu_q[b]), int(cu_q[b] + sq)), slice(int(cu_k[b]), int(cu_k[b] + sk))
        if sq == 0 or sk == 0:
            zeros = (torch.zeros_like(q[rows]), torch.zeros_like(k[keys]), torch.zeros_like(v[keys]))
            results.append((rows, keys, *zeros))
            continue
        leaves = [t[None, r].detach().clone().requires_grad_() for t, r in ((q, rows), (k, keys), (v, keys))]
        out = hopattn.attention(*leaves, **kw)
        grads = torch.autograd.grad(out, leaves, dout[None, rows])
        results.append((rows, keys, *(g[0] for g in grads)))
    return results


def assert_grad_close(got, want, what):
    got, want = got.float(), want.float()
    if want.numel() == 0 or not want.any():
        assert not got.any(), f"{what}: expected zeros"
        return
    err = rel_l2(got, want)
    assert err <= GRAD_REL_L2, f"{what}: rel-L2 {err:.3e}"


def assert_per_sequence_grads(grads, q, k, v, dout, cu_q, cu_k, used_q=None, used_k=None, **kw):
    dq, dk, dv = grads
    cu_q, cu_k = cu_q.cpu().tolist(), cu_k.cpu().tolist()
    for b, (rows, keys, wq, wk, wv) in enumerate(
            per_sequence_attention_grads(q, k, v, dout, cu_q, cu_k, used_q, used_k, **kw)):
        assert_grad_close(dq[rows], wq, f"dq of sequence {b}")
        assert_grad_close(dk[keys], wk, f"dk of sequence {b}")
        assert_grad_close(dv[keys], wv, f"dv of sequence {b}")


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_gpu_gradients_match_per_sequence_attention(lib, case, causal):
    # "mixed": GQA 8/2 with lengths 0 and 1 on either side, partial and several tiles; "mha";
    # "q-longer-than-k": MQA, causal rows that see no key (dq 0 there).
    dtype, head_dim = gpu_grad_setup()
    lens_q, lens_k, hq, hkv = GPU_CASES[case]
    q, k, v, cu_q, cu_k = gpu_packed(lens_q, lens_k, hq, hkv, head_dim, dtype, seed=11)
    dout = gpu_dout(q, seed=12)
    grads = varlen_grads(q, k, v, dout, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
    assert_per_sequence_grads(grads, q, k, v, dout, cu_q, cu_k, causal=causal)


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_gradients_with_seqused(lib, causal):
    dtype, head_dim = gpu_grad_setup()
    lens_q, lens_k = [100, 64, 3, 0], [150, 64, 200, 9]
    used_q, used_k = [100, 10, 0, 0], [70, 64, 150, 0]
    q, k, v, cu_q, cu_k = gpu_packed(lens_q, lens_k, 4, 2, head_dim, dtype, seed=13)
    dout = gpu_dout(q, seed=14)
    grads = varlen_grads(q, k, v, dout, cu_q, cu_k, 100, 200, causal=causal, softmax_scale=0.1,
                         seqused_q=torch.tensor(used_q, dtype=torch.int32, device="cuda"),
                         seqused_k=torch.tensor(used_k, dtype=torch.int32, device="cuda"))
    assert_per_sequence_grads(grads, q, k, v, dout, cu_q, cu_k, used_q, used_k, causal=causal, softmax_scale=0.1)
    dq, dk, dv = grads
    cq, ck = cu_q.cpu().tolist(), cu_k.cpu().tolist()
    for b in range(4):  # rows in [seqused, length): gradient exactly 0 (no query; keys no query saw)
        assert not dq[cq[b] + used_q[b]:cq[b + 1]].any(), b
        assert not dk[ck[b] + used_k[b]:ck[b + 1]].any() and not dv[ck[b] + used_k[b]:ck[b + 1]].any(), b
    assert dq[0:100].any() and not dq[110:164].any()


@needs_gpu
def test_gpu_padding_rows_get_zero_gradients(lib):
    # q, k, v with rows past cu_seqlens[batch] (a preallocated buffer): those rows take no part, so
    # their gradient is 0, not whatever the allocator held (FlashAttention's issue #1228).
    dtype, head_dim = gpu_grad_setup()
    lens_q, lens_k = [70, 1, 130], [90, 3, 130]
    arrays = packed_inputs(lens_q, lens_k, 4, 2, head_dim, seed=15, pad_q=37, pad_k=50)
    q, k, v = (torch.from_numpy(x).to("cuda", dtype) for x in arrays[:3])
    cu_q, cu_k = (torch.from_numpy(x).cuda() for x in arrays[3:])
    dout = gpu_dout(q, seed=16)
    for _ in range(2):  # the second time round the allocator hands back used memory
        grads = varlen_grads(q, k, v, dout, cu_q, cu_k, 130, 130, causal=True)
        assert not grads[0][201:].any() and not grads[1][223:].any() and not grads[2][223:].any()
    assert_per_sequence_grads(grads, q, k, v, dout, cu_q, cu_k, causal=True)


@needs_gpu
@pytest.mark.parametrize("lens_q, lens_k", [([0, 0], [3, 5]), ([4, 2], [0, 0])], ids=["no-query", "no-key"])
def test_gpu_gradients_with_no_query_or_no_key_at_all(lib, lens_q, lens_k):
    dtype, head_dim = gpu_grad_setup()
    q, k, v, cu_q, cu_k = gpu_packed(lens_q, lens_k, 2, 2, head_dim, dtype, seed=17)
    dq, dk, dv = varlen_grads(q, k, v, torch.ones_like(q), cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    assert not dq.any() and not dk.any() and not dv.any()


@needs_gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_deterministic_backward_is_bitwise_reproducible(lib, causal):
    # Long sequences and GQA: many key blocks add into each dq row, and group heads into dk/dv.
    dtype, head_dim = gpu_grad_setup()
    lens_q, lens_k = [700, 33, 1024, 0, 515], [650, 1, 1024, 8, 515]
    q, k, v, cu_q, cu_k = gpu_packed(lens_q, lens_k, 8, 2, head_dim, dtype, seed=18)
    dout = gpu_dout(q, seed=19)
    first = varlen_grads(q, k, v, dout, cu_q, cu_k, 1024, 1024, causal=causal, deterministic=True)
    second = varlen_grads(q, k, v, dout, cu_q, cu_k, 1024, 1024, causal=causal, deterministic=True)
    for name, a, b in zip(("dq", "dk", "dv"), first, second):
        assert torch.equal(a, b), name
    assert_per_sequence_grads(first, q, k, v, dout, cu_q, cu_k, causal=causal)


@needs_gpu
def test_gpu_routes_and_flash_attn_varlen_func_give_identical_gradients(lib):
    # The direct route (autograd.Function over ctypes) and the op route (hopattn::fwd_varlen's
    # autograd, hopattn::bwd_varlen) run the same kernels on the same arguments.
    dtype, head_dim = gpu_grad_setup()
    q, k, v, cu_q, cu_k = gpu_packed([70, 130, 1, 0], [90, 130, 40, 3], 8, 2, head_dim, dtype, seed=20)
    used_k = torch.tensor([90, 100, 40, 3], dtype=torch.int32, device="cuda")
    dout = gpu_dout(q, seed=21)
    kw = dict(causal=True, seqused_k=used_k, deterministic=True)
    direct = varlen_grads(q, k, v, dout, cu_q, cu_k, 130, 130, **kw)
    with op_route():
        op = varlen_grads(q, k, v, dout, cu_q, cu_k, 130, 130, **kw)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fai.flash_attn_varlen_func(*leaves, cu_q, cu_k, 130, 130, seqused_k=used_k, causal=True, deterministic=True)
    fa3 = torch.autograd.grad(out, leaves, dout)
    for name, a, b, c in zip(("dq", "dk", "dv"), direct, op, fa3):
        assert torch.equal(a, b) and torch.equal(a, c), name


@needs_gpu
def test_gpu_backward_on_a_side_stream(lib):
    dtype, head_dim = gpu_grad_setup()
    q, k, v, cu_q, cu_k = gpu_packed([300, 17], [120, 280], 4, 4, head_dim, dtype, seed=22)
    dout = gpu_dout(q, seed=23)
    want = varlen_grads(q, k, v, dout, cu_q, cu_k, 300, 280, deterministic=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = varlen_grads(q, k, v, dout, cu_q, cu_k, 300, 280, deterministic=True)
    side.synchronize()
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert torch.equal(a, b), name


@needs_gpu
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gpu_compile_fullgraph_gradients_equal_eager(lib, backend):
    # torch.compile traces varlen_attention as hopattn::fwd_varlen (no graph break) and AOTAutograd
    # puts hopattn::bwd_varlen in the backward; the gradients are eager's (the same kernels; with
    # inductor the surrounding arithmetic may round differently).
    from torch._dynamo.testing import CompileCounterWithBackend

    dtype, head_dim = gpu_grad_setup()
    q, k, v, cu_q, cu_k = gpu_packed([100, 1, 0, 260], [80, 5, 7, 260], 8, 2, head_dim, dtype, seed=24)
    w = torch.rand(head_dim, device="cuda", requires_grad=True)

    def block(q, k, v, w, cu_q, cu_k):
        out = hopattn.varlen_attention(q * w.to(q.dtype), k, v, cu_q, cu_k, 260, 260, causal=True, deterministic=True)
        return (out.float() * w).sum(dim=-1)

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)] + [w]
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    compiled(*leaves, cu_q, cu_k).sum().backward()
    assert counter.frame_count == 1
    assert any(node.target is torch.ops.hopattn.fwd_varlen.default for node in counter.graphs[0].graph.nodes)
    compiled_grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    block(*leaves, cu_q, cu_k).sum().backward()
    limit = 1e-5 if backend == "aot_eager" else 1e-2
    for name, got, t in zip(("dq", "dk", "dv", "dw"), compiled_grads, leaves):
        err = rel_l2(got, t.grad)
        assert err <= limit, f"{name}: rel-L2 {err:.3e}"


@needs_gpu
def test_gpu_flash_attn_varlen_func_matches(lib):
    dtype, head_dim = gpu_setup()
    q, k, v, cu_q, cu_k = gpu_packed([33, 0, 150], [40, 7, 150], 4, 2, head_dim, dtype, seed=6)
    used_k = torch.tensor([40, 7, 100], dtype=torch.int32, device="cuda")
    out = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 150, 150, seqused_k=used_k, causal=True, softmax_scale=0.1)
    want, want_lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 150, 150, causal=True, softmax_scale=0.1,
                                              seqused_k=used_k, return_lse=True)
    assert torch.equal(out, want)
    out, lse = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 150, 150, seqused_k=used_k, causal=True,
                                          softmax_scale=0.1, return_attn_probs=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert lse.shape == (4, 183)


@needs_gpu
def test_gpu_routes_streams_and_strides_agree(lib):
    dtype, head_dim = gpu_setup()
    q, k, v, cu_q, cu_k = gpu_packed([70, 130, 1], [90, 130, 40], 4, 4, head_dim, dtype, seed=7)
    want, want_lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 130, 130, causal=True, return_lse=True)
    with op_route():  # torch.ops.hopattn.fwd_varlen
        out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 130, 130, causal=True, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 130, 130, causal=True)
    side.synchronize()
    assert torch.equal(out, want)
    # q, k, v as views of one (total, 3, heads, head_dim) buffer (equal lengths on both sides).
    qkv = torch.stack([q, k[: q.shape[0]], v[: q.shape[0]]], dim=1)
    cu = cu_q
    out = hopattn.varlen_attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, 130, 130, causal=True)
    assert torch.equal(out, hopattn.varlen_attention(*(qkv[:, i].contiguous() for i in range(3)), cu, cu, 130, 130,
                                                     causal=True))
