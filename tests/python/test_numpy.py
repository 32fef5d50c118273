# The numpy path of hopattn.attention (the C library's CPU reference) against a float64 numpy
# formula, plus the binding's error mapping. Needs only numpy and libhopattn.so, so it runs on the
# GPU-less CI; the module skips (or fails under HOPATTN_REQUIRE_LIBRARY=1) without the library.
import numpy as np
import pytest

import hopattn
from hopattn_test_support import naive_attention, require_library_or_skip_module

require_library_or_skip_module()

# The CPU reference accumulates in double and rounds once to the output dtype.
TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=2e-3)}


def random_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, seqlen_q, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    return q, k, v


def check_against_naive(q, k, v, causal, softmax_scale=None):
    out, lse = hopattn.attention(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    want_out, want_lse = naive_attention(q, k, v, causal, softmax_scale)
    assert out.dtype == q.dtype and out.shape == q.shape and out.flags.c_contiguous
    assert lse.dtype == np.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    np.testing.assert_allclose(out.astype(np.float64), want_out, **TOLERANCE[q.dtype.type])
    # -inf must match exactly (assert_allclose treats equal infinities as equal).
    np.testing.assert_allclose(lse.astype(np.float64), want_lse, rtol=1e-5, atol=1e-5)
    return out, lse


SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim)
    (1, 1, 1, 1, 1, 64),
    (2, 17, 17, 3, 3, 64),
    (1, 7, 19, 2, 2, 40),  # seqlen_q < seqlen_k: bottom-right causal keeps every row non-empty
    (1, 19, 7, 2, 2, 32),  # seqlen_q > seqlen_k: the first 12 causal rows see no key
    (2, 9, 13, 8, 2, 16),  # GQA 8:2
    (1, 5, 6, 4, 1, 8),  # MQA
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_naive(shape, causal, dtype):
    q, k, v = random_qkv(*shape, dtype=dtype)
    check_against_naive(q, k, v, causal)


def test_custom_softmax_scale():
    q, k, v = random_qkv(1, 6, 10, 2, 2, 32, np.float32)
    check_against_naive(q, k, v, causal=True, softmax_scale=0.3)


def test_default_scale_is_inverse_sqrt_head_dim():
    q, k, v = random_qkv(1, 6, 10, 2, 2, 32, np.float32)
    a = hopattn.attention(q, k, v)
    b = hopattn.attention(q, k, v, softmax_scale=1.0 / np.sqrt(32))
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fully_masked_rows_give_zero_and_minus_inf():
    seqlen_q, seqlen_k = 10, 4
    q, k, v = random_qkv(1, seqlen_q, seqlen_k, 2, 2, 16, np.float32)
    out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    masked = seqlen_q - seqlen_k  # rows i < sq - sk see no key
    assert np.all(out[:, :masked] == 0)
    assert np.all(np.isneginf(lse[:, :, :masked]))
    assert np.all(np.isfinite(lse[:, :, masked:]))
    check_against_naive(q, k, v, causal=True)


def test_no_keys_at_all():
    q, k, v = random_qkv(2, 3, 0, 2, 1, 16, np.float32)
    out, lse = hopattn.attention(q, k, v, return_lse=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))


def test_empty_batch():
    q, k, v = random_qkv(0, 3, 4, 2, 2, 16, np.float32)
    out, lse = hopattn.attention(q, k, v, return_lse=True)
    assert out.shape == (0, 3, 2, 16) and lse.shape == (0, 2, 3)


def test_without_lse_returns_only_out():
    q, k, v = random_qkv(1, 4, 4, 1, 1, 8, np.float32)
    out = hopattn.attention(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


def test_strided_views_packed_qkv():
    # q, k, v as views into one (b, s, 3, h, d) buffer, the layout of a fused QKV projection.
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((2, 11, 3, 4, 32)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    out = check_against_naive(q, k, v, causal=True)[0]
    contiguous = hopattn.attention(*(np.ascontiguousarray(x) for x in (q, k, v)), causal=True)
    np.testing.assert_array_equal(out, contiguous)


def test_strided_views_heads_major():
    # (b, h, s, d) storage viewed as (b, s, h, d).
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 3, 9, 16)).astype(np.float32).transpose(0, 2, 1, 3) for _ in range(3))
    check_against_naive(q, k, v, causal=False)


# --- errors ----------------------------------------------------------------------------------------


def test_head_dim_mismatch_names_argument():
    q, _, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    k = np.zeros((1, 4, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"k\.sizes\[3\] \(head_dim\)"):
        hopattn.attention(q, k, v)


def test_non_contiguous_last_dim():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(ValueError, match=r"q: last dim .* contiguous"):
        hopattn.attention(q[..., ::2], k[..., ::2], v[..., ::2])


@pytest.mark.parametrize("scale", [-1.0, 0.0, float("nan"), float("inf")])
def test_bad_softmax_scale(scale):
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(ValueError, match="softmax_scale"):
        hopattn.attention(q, k, v, softmax_scale=scale)


def test_bool_softmax_scale_is_a_type_error():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(TypeError, match="softmax_scale"):
        hopattn.attention(q, k, v, softmax_scale=True)


def test_dtype_mismatch():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(ValueError, match="k: dtype fp16 differs"):
        hopattn.attention(q, k.astype(np.float16), v)


def test_float64_rejected_in_python():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float64)
    with pytest.raises(ValueError, match="q: numpy dtype float64"):
        hopattn.attention(q, k, v)


def test_wrong_ndim():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(ValueError, match=r"q: expected 4 dims"):
        hopattn.attention(q[0], k, v)


def test_heads_not_multiple_of_kv_heads():
    q, k, v = random_qkv(1, 4, 4, 3, 2, 32, np.float32)
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        hopattn.attention(q, k, v)


def test_negative_strides_rejected():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(ValueError, match="negative"):
        hopattn.attention(q[:, ::-1], k, v)


def test_mixed_array_types():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(TypeError, match="k: expected a numpy.ndarray"):
        hopattn.attention(q, k.tolist(), v)
    with pytest.raises(TypeError, match="q: expected"):
        hopattn.attention(q.tolist(), k, v)


def test_errors_share_a_base_class():
    q, k, v = random_qkv(1, 4, 4, 2, 2, 32, np.float32)
    with pytest.raises(hopattn.HopattnError) as info:
        hopattn.attention(q, k, v, softmax_scale=-1.0)
    assert isinstance(info.value, hopattn.InvalidArgumentError) and info.value.status == 1


# --- build queries ---------------------------------------------------------------------------------


def test_version_and_build_info():
    info = hopattn.build_info()
    assert hopattn.version() == info["version"]
    assert info["version"].startswith(hopattn.__version__)
    assert info["abi_version"] == hopattn._lib.ABI_VERSION == 12
    for direction, dtype, head_dim in info["kernels"]:
        assert direction in ("fwd", "bwd", "fp8") and dtype in ("bf16", "fp16") and head_dim in (64, 128, 256)


def test_is_available_never_raises():
    assert hopattn.is_available() in (True, False)
