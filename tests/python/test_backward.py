# hopattn.attention_backward (numpy, the library's CPU backward reference) against an independent
# float64 numpy backward (hopattn_test_support.naive_backward), plus central finite differences of
# the library's own CPU forward, and the binding's argument errors. Needs only numpy and
# libhopattn.so, so it runs on the GPU-less CI; the GPU backward (autograd through
# hopattn.attention) is in test_backward_torch.py; windowed gradients are in test_window.py.
import numpy as np
import pytest

import hopattn
from hopattn_test_support import (check_finite_differences, naive_attention, naive_backward,
                                  require_library_or_skip_module)

require_library_or_skip_module()


def random_inputs(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype=np.float32, seed=0):
    """q, k, v and dout (like out)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, seqlen_q, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    dout = rng.standard_normal((batch, seqlen_q, heads_q, head_dim)).astype(dtype)
    return q, k, v, dout


# The library accumulates in double and rounds each gradient once to the inputs' dtype.
TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float16: dict(rtol=4e-3, atol=4e-3)}


def check_against_naive(q, k, v, dout, causal, softmax_scale=None):
    dq, dk, dv = hopattn.attention_backward(q, k, v, dout, causal=causal, softmax_scale=softmax_scale)
    want_dq, want_dk, want_dv, want_out = naive_backward(q, k, v, dout, causal, softmax_scale)
    # The independent formula's forward agrees with the shared test helper's (sanity of the oracle).
    np.testing.assert_allclose(want_out, naive_attention(q, k, v, causal, softmax_scale)[0], rtol=1e-12, atol=1e-12)
    for name, got, want, like in (("dq", dq, want_dq, q), ("dk", dk, want_dk, k), ("dv", dv, want_dv, v)):
        assert isinstance(got, np.ndarray) and got.shape == like.shape and got.dtype == q.dtype, name
        assert got.flags.c_contiguous, name
        assert np.all(np.isfinite(got)), name
        # Scale atol by the gradient's magnitude so large-valued gradients are not held to 1e-5 absolute.
        tol = dict(TOLERANCE[q.dtype.type])
        tol["atol"] *= max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_allclose(got.astype(np.float64), want, err_msg=name, **tol)
    return dq, dk, dv


SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim)
    (1, 1, 1, 2, 2, 16),
    (2, 17, 17, 2, 2, 32),
    (1, 33, 33, 4, 2, 16),  # GQA 2
    (1, 17, 33, 4, 1, 32),  # seqlen_q < seqlen_k, GQA 4 (MQA)
    (2, 33, 17, 4, 2, 16),  # seqlen_q > seqlen_k: causal rows 0..15 see no key, GQA 2
    (1, 1, 33, 8, 2, 16),  # one query (decode-like), GQA 4
    (1, 33, 1, 4, 4, 16),  # one key: causal rows 0..31 see no key
    (1, 17, 33, 2, 2, 64),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_naive(shape, causal):
    check_against_naive(*random_inputs(*shape), causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_float16(causal):
    check_against_naive(*random_inputs(1, 17, 33, 4, 2, 32, dtype=np.float16, seed=1), causal=causal)


def test_custom_softmax_scale():
    check_against_naive(*random_inputs(1, 13, 21, 4, 2, 16, seed=2), causal=True, softmax_scale=0.3)


def test_default_scale_is_inverse_sqrt_head_dim():
    q, k, v, dout = random_inputs(1, 9, 11, 2, 1, 32, seed=3)
    a = hopattn.attention_backward(q, k, v, dout)
    b = hopattn.attention_backward(q, k, v, dout, softmax_scale=1.0 / np.sqrt(32))
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_rows_without_keys_have_zero_dq():
    seqlen_q, seqlen_k = 21, 6
    q, k, v, dout = random_inputs(2, seqlen_q, seqlen_k, 4, 2, 16, seed=4)
    dq, dk, dv = check_against_naive(q, k, v, dout, causal=True)
    masked = seqlen_q - seqlen_k  # rows i < sq - sk see no key
    assert np.all(dq[:, :masked] == 0)
    # Row `masked` sees exactly one key (P = 1, so its dq is 0 too, up to rounding); later rows see more.
    assert np.all(np.any(dq[:, masked + 1 :] != 0, axis=-1))
    # Key j is seen by rows i >= j + sq - sk, so every key still gets a gradient.
    assert np.all(np.any(dv != 0, axis=-1)) and np.all(np.any(dk != 0, axis=-1))


def test_every_row_without_keys():
    # seqlen_k == 0: out is 0 whatever q is, so dq is 0; dk/dv are empty.
    q, k, v, dout = random_inputs(2, 5, 0, 2, 1, 16, seed=5)
    dq, dk, dv = hopattn.attention_backward(q, k, v, dout)
    assert np.all(dq == 0) and dk.shape == k.shape and dv.shape == v.shape


def test_empty_batch():
    q, k, v, dout = random_inputs(0, 5, 7, 2, 1, 16)
    dq, dk, dv = hopattn.attention_backward(q, k, v, dout, causal=True)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_strided_views():
    # q, k, v as views of one fused (b, s, 3, h, d) QKV buffer; dout heads-major (b, h, s, d) storage.
    rng = np.random.default_rng(6)
    qkv = rng.standard_normal((2, 19, 3, 4, 16)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    dout = rng.standard_normal((2, 4, 19, 16)).astype(np.float32).transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous and not dout.flags.c_contiguous
    got = check_against_naive(q, k, v, dout, causal=True)
    dense = hopattn.attention_backward(*(np.ascontiguousarray(x) for x in (q, k, v, dout)), causal=True)
    for x, y in zip(got, dense):
        np.testing.assert_array_equal(x, y)


def forward_loss(q, k, v, dout, causal, softmax_scale):
    """L = sum(dout * out) through the library's CPU forward, so dL/dx is what backward returns."""
    out = hopattn.attention(q, k, v, causal=causal, softmax_scale=softmax_scale)
    return float(np.sum(dout.astype(np.float64) * out.astype(np.float64)))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_finite_differences(causal):
    # GQA 2 with seqlen_q > seqlen_k, so some causal rows see no key; a few entries of each input.
    q, k, v, dout = random_inputs(1, 7, 5, 4, 2, 8, seed=7)
    scale = 0.6
    grads = hopattn.attention_backward(q, k, v, dout, causal=causal, softmax_scale=scale)
    # q row 1 sees no key under the causal mask (rows i < 7 - 5), so both sides are 0 there.
    entries = {"q": [(0, 6, 1, 3), (0, 4, 3, 0), (0, 1, 2, 4)], "k": [(0, 0, 1, 2), (0, 4, 0, 7)], "v": [(0, 2, 1, 5), (0, 0, 0, 0)]}

    def loss(q, k, v):
        return forward_loss(q, k, v, dout=dout, causal=causal, softmax_scale=scale)

    # Central differences at eps 1e-2: float32 outputs and an O(eps^2) truncation error bound the
    # agreement (seen: <= 3e-5).
    check_finite_differences(loss, {"q": q, "k": k, "v": v}, grads, entries, eps=1e-2, tol=5e-4)


def test_numpy_forward_accepts_deterministic():
    q, k, v, _ = random_inputs(1, 4, 4, 1, 1, 8)
    np.testing.assert_array_equal(hopattn.attention(q, k, v, deterministic=True), hopattn.attention(q, k, v))


# --- errors ----------------------------------------------------------------------------------------


def test_dout_shape_mismatch_names_dout():
    q, k, v, dout = random_inputs(1, 6, 6, 2, 2, 16)
    with pytest.raises(ValueError, match="dout"):
        hopattn.attention_backward(q, k, v, dout[:, :5])
    with pytest.raises(ValueError, match="dout"):
        hopattn.attention_backward(q, k, v, np.zeros((1, 6, 2, 8), np.float32))


def test_dout_dtype_mismatch_names_dout():
    q, k, v, dout = random_inputs(1, 6, 6, 2, 2, 16)
    with pytest.raises(ValueError, match="dout"):
        hopattn.attention_backward(q, k, v, dout.astype(np.float16))
    with pytest.raises(ValueError, match="dout: numpy dtype float64"):
        hopattn.attention_backward(q, k, v, dout.astype(np.float64))


def test_wrong_dtype_names_argument():
    q, k, v, dout = random_inputs(1, 6, 6, 2, 2, 16)
    with pytest.raises(ValueError, match="k: dtype fp16 differs"):
        hopattn.attention_backward(q, k.astype(np.float16), v, dout)
    with pytest.raises(ValueError, match="q: numpy dtype float64"):
        hopattn.attention_backward(q.astype(np.float64), k, v, dout)


def test_wrong_ndim_and_types():
    q, k, v, dout = random_inputs(1, 6, 6, 2, 2, 16)
    with pytest.raises(ValueError, match="dout: expected 4 dims"):
        hopattn.attention_backward(q, k, v, dout[0])
    with pytest.raises(TypeError, match="dout: expected a numpy.ndarray"):
        hopattn.attention_backward(q, k, v, dout.tolist())
    with pytest.raises(TypeError, match="q: expected a numpy.ndarray"):
        hopattn.attention_backward(q.tolist(), k, v, dout)


def test_dout_non_contiguous_last_dim():
    q, k, v, _ = random_inputs(1, 6, 6, 2, 2, 16)
    dout = np.zeros((1, 6, 2, 32), np.float32)[..., ::2]
    with pytest.raises(ValueError, match=r"dout: last dim .* contiguous"):
        hopattn.attention_backward(q, k, v, dout)


def test_bad_softmax_scale():
    q, k, v, dout = random_inputs(1, 6, 6, 2, 2, 16)
    with pytest.raises(ValueError, match="softmax_scale"):
        hopattn.attention_backward(q, k, v, dout, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="softmax_scale"):
        hopattn.attention_backward(q, k, v, dout, softmax_scale=True)
