# hopattn.varlen_attention (python/hopattn/varlen.py) and flash_attn_varlen_func on it: sequences of
# different lengths packed along the token dim, over the C ABI's hopattn_forward_varlen(_cpu).
#  - Everywhere: the signature; argument types checked before the library is loaded.
#  - With the library (numpy, the CPU reference): every sequence equals hopattn.attention on that
#    sequence alone (bitwise: the same reference code) and a float64 formula, for mixed lengths
#    including 0 and 1, GQA/MQA, causal with len_q != len_k, seqused, strided views; the library's
#    errors (index dtype, length, values) reach the exception with the argument named.
#  - With torch, no GPU: CPU tensors refused as by hopattn.attention; with fake CUDA tensors, the
#    gradient refusal, index checks, and dynamo tracing the call as one op (hopattn::fwd_varlen);
#    with the library, that op's CPU kernel against numpy and torch.library.opcheck.
#  - With torch, the library and an sm_90 GPU: bf16/fp16 against per-sequence hopattn.attention
#    (the same kernel family) and the CPU reference, seqused, check_index_values, the gradient
#    refusal, the op route, streams, and flash_attn_varlen_func.
import inspect

import numpy as np
import pytest

import hopattn
from hopattn import flash_attn_interface as fai
from hopattn import ops
from hopattn.varlen import NO_BACKWARD
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
def test_requires_grad_raises_not_implemented():
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    q, k, v, cu_q, cu_k = fake_packed(mode, requires_grad=True)
    with mode:
        with pytest.raises(NotImplementedError) as info:
            hopattn.varlen_attention(q, k, v, cu_q, cu_k, 16, 16)
        assert str(info.value) == NO_BACKWARD == "hopattn varlen backward is not implemented yet (issue 6)"
        with pytest.raises(NotImplementedError, match="varlen backward"):
            fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 16, 16)
        with torch.no_grad():  # no gradient needed: fine
            out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 16, 16, return_lse=True)
        assert out.shape == (40, 4, 64) and out.dtype == torch.bfloat16 and out.is_contiguous()
        assert lse.shape == (4, 40) and lse.dtype == torch.float32
        out = hopattn.varlen_attention(q.detach(), k, v, cu_q, cu_k, 16, 16)
        assert not out.requires_grad


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
        "bool causal=False, float? softmax_scale=None, bool check_index_values=False) -> (Tensor, Tensor)"
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
def test_gpu_requires_grad_raises(lib):
    dtype, head_dim = gpu_setup()
    q, k, v, cu_q, cu_k = gpu_packed([10, 20], [10, 20], 2, 2, head_dim, dtype, seed=5)
    for leaf in ("q", "k", "v"):
        args = {"q": q, "k": k, "v": v}
        args[leaf] = args[leaf].detach().clone().requires_grad_()
        with pytest.raises(NotImplementedError, match=r"^hopattn varlen backward is not implemented yet \(issue 6\)$"):
            hopattn.varlen_attention(args["q"], args["k"], args["v"], cu_q, cu_k, 20, 20)
        with torch.no_grad():
            out = hopattn.varlen_attention(args["q"], args["k"], args["v"], cu_q, cu_k, 20, 20)
        assert torch.equal(out, hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 20))


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
