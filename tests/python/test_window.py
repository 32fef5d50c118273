# Sliding windows: FlashAttention's window_size=(left, right) (C ABI 6) through every attention call.
# Query i of a (sequence of) sq queries and sk keys sees key j iff
#     i + sk - sq - left <= j <= i + sk - sq + right        (-1: that side unbounded)
# bottom-right aligned like causal, which is the window's right = 0.
#  - Everywhere (no library): window_size must be a (left, right) pair of ints, checked before any
#    array is looked at (TypeError naming window_size).
#  - With the library (numpy, the CPU reference): out and lse against a brute-force float64 softmax
#    under that mask (hopattn_test_support.naive_attention), for sq != sk, left or right 0, windows
#    wider than the sequence and rows that see no key (out 0, lse -inf); (-1, -1) is no window and
#    causal is (-1, 0), bitwise; bad values raise the library's errors naming window.left /
#    window.right; varlen with a window equals the fixed-length call on each sequence; gradients
#    (attention_backward) against the float64 backward and finite differences; flash_attn_func /
#    flash_attn_varlen_func with FA3's causal rule (right bound 0).
#  - With torch and the library, no GPU: the ops' CPU kernels (hopattn::fwd / bwd, fwd_varlen /
#    bwd_varlen) take the window forward and backward, and opcheck passes with one.
#  - With torch, the library and an sm_90 GPU: hopattn.attention with a window against a float32
#    masked reference (head_dim 64/128/256, seqlen 1, 17, 1000, causal + window), gradients against
#    torch autograd of that reference, varlen forward and backward per sequence, flash_attn_func.
#    (Both torch routes with a window: test_torch_routes.py.)
import numpy as np
import pytest

import hopattn
from hopattn import flash_attn_interface as fai
from hopattn import ops
from hopattn_test_support import (
    naive_attention,
    naive_backward,
    optional_torch,
    rel_l2,
    require_library_or_skip_module,
    visible_keys,
)

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()
HAS_CUSTOM_OP = torch is not None and hasattr(torch.library, "custom_op")
needs_custom_op = pytest.mark.skipif(not HAS_CUSTOM_OP, reason="needs torch 2.4+ (torch.library.custom_op)")


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


def random_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype=np.float32, seed=0):
    """q, k, v and dout (like q), seeded."""
    rng = np.random.default_rng(seed)

    def rand(s, h):
        return rng.standard_normal((batch, s, h, head_dim)).astype(dtype)

    return rand(seqlen_q, heads_q), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv), rand(seqlen_q, heads_q)


# (seqlen_q, seqlen_k, left, right, causal)
CASES = [
    (9, 9, 2, 1, False),
    (9, 9, 0, 0, False),  # the diagonal key only
    (10, 10, 0, -1, False),  # keys at or after the query's position
    (10, 10, -1, 3, False),
    (7, 13, 3, 2, False),  # sq < sk
    (13, 7, 3, 2, False),  # sq > sk: rows 0..3 see no key (i + 7 - 13 + 2 < 0)
    (13, 7, -1, 0, False),  # causal spelled as a window: rows 0..5 see no key
    (13, 7, 2, -1, True),  # causal + left
    (6, 6, 0, 0, True),  # causal + left 0: the diagonal only
    (5, 8, 100, 100, False),  # wider than the sequence on both sides: everything visible
    (5, 8, 100, 0, True),
    (1, 17, 4, 0, True),  # one query (decode-like)
    (1, 17, 0, 3, False),  # one query, left 0: sees only the last key
    (17, 1, 0, 0, False),  # one key: only the last row sees it
]
CASE_IDS = [f"q{sq}k{sk}-w{l},{r}" + ("-causal" if c else "") for sq, sk, l, r, c in CASES]
TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=2e-3)}


# --- the form of window_size (no library) -------------------------------------------------------------


BAD_FORMS = [None, 5, (1, 2, 3), (4,), ("a", 1), (1.5, 2), (1, True), "ab", {1: 2, 3: 4}]


@pytest.mark.parametrize("window_size", BAD_FORMS, ids=repr)
def test_window_size_must_be_a_pair_of_ints(window_size):
    q, k, v, dout = random_qkv(1, 3, 3, 1, 1, 8)
    cu = np.array([0, 3], np.int32)
    calls = {
        "attention": lambda: hopattn.attention(q, k, v, window_size=window_size),
        "attention_backward": lambda: hopattn.attention_backward(q, k, v, dout, window_size=window_size),
        "attention_reference": lambda: hopattn.attention_reference(q, k, v, window_size=window_size),
        "varlen_attention": lambda: hopattn.varlen_attention(q[0], k[0], v[0], cu, cu, 3, 3, window_size=window_size),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match="window_size"):
            call()


def test_window_bounds_must_fit_in_int64():
    q, k, v, _ = random_qkv(1, 3, 3, 1, 1, 8)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"window_size\[1\] \(right\)=.* does not fit in int64"):
        hopattn.attention(q, k, v, window_size=(0, 1 << 63))


def test_signatures_take_window_size_last():
    import inspect

    for fn in (hopattn.attention, hopattn.attention_backward, hopattn.attention_reference, hopattn.varlen_attention):
        last = list(inspect.signature(fn).parameters.values())[-1]
        assert (last.name, last.default) == ("window_size", (-1, -1)), fn.__name__


# --- numpy: the CPU reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_the_masked_softmax(lib, case, dtype):
    sq, sk, left, right, causal = case
    q, k, v, _ = random_qkv(2, sq, sk, 4, 2, 16, dtype, seed=sq * 31 + sk)
    out, lse = hopattn.attention(q, k, v, causal=causal, return_lse=True, window_size=(left, right))
    want_out, want_lse = naive_attention(q, k, v, causal, window_size=(left, right))
    np.testing.assert_allclose(out.astype(np.float64), want_out, **TOLERANCE[dtype])
    np.testing.assert_allclose(lse.astype(np.float64), want_lse, rtol=1e-5, atol=1e-5)  # -inf must match too
    # Rows that see no key: out exactly 0, lse -inf; every other row a finite lse.
    blind = ~visible_keys(sq, sk, causal, (left, right)).any(axis=1)
    assert np.all(out[:, blind] == 0)
    assert np.all(np.isneginf(lse[:, :, blind])) and np.all(np.isfinite(lse[:, :, ~blind]))


def test_rows_that_see_no_key_are_where_the_formula_says(lib):
    # (13, 7) with (3, 2): the diagonal is i - 6, so rows 0..3 end left of key 0; a narrow window
    # inside a longer sequence leaves no row blind.
    q, k, v, _ = random_qkv(1, 13, 7, 2, 2, 8, seed=1)
    out, lse = hopattn.attention(q, k, v, return_lse=True, window_size=(3, 2))
    assert np.all(np.isneginf(lse[:, :, :4])) and np.all(np.isfinite(lse[:, :, 4:]))
    assert np.all(out[:, :4] == 0) and np.all(np.any(out[:, 4:] != 0, axis=-1))


def test_no_window_is_the_default(lib):
    q, k, v, _ = random_qkv(2, 7, 11, 4, 2, 16, seed=2)
    for causal in (False, True):
        want = hopattn.attention(q, k, v, causal=causal, return_lse=True)
        for spelled in ((-1, -1), [-1, -1], (np.int32(-1), -1)):
            got = hopattn.attention(q, k, v, causal=causal, return_lse=True, window_size=spelled)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sq, sk", [(9, 9), (5, 12), (12, 5)])
def test_causal_is_the_window_minus_one_zero(lib, sq, sk):
    q, k, v, dout = random_qkv(2, sq, sk, 4, 2, 16, seed=sq + sk)
    causal = hopattn.attention(q, k, v, causal=True, return_lse=True)
    for window, with_causal in (((-1, 0), False), ((-1, 0), True), ((-1, -1), True)):
        got = hopattn.attention(q, k, v, causal=with_causal, return_lse=True, window_size=window)
        for a, b in zip(got, causal):
            np.testing.assert_array_equal(a, b)
    want_grads = hopattn.attention_backward(q, k, v, dout, causal=True)
    for a, b in zip(hopattn.attention_backward(q, k, v, dout, window_size=(-1, 0)), want_grads):
        np.testing.assert_array_equal(a, b)


def test_a_window_wider_than_the_sequence_is_no_window(lib):
    q, k, v, _ = random_qkv(1, 6, 9, 2, 1, 16, seed=3)
    for a, b in zip(hopattn.attention(q, k, v, return_lse=True, window_size=(9, 9)),
                    hopattn.attention(q, k, v, return_lse=True)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_attention_reference_takes_the_window(lib):
    q, k, v, _ = random_qkv(1, 8, 8, 2, 2, 16, seed=4)
    for a, b in zip(hopattn.attention_reference(q, k, v, return_lse=True, window_size=(2, 1)),
                    hopattn.attention(q, k, v, return_lse=True, window_size=(2, 1))):
        np.testing.assert_array_equal(a, b)


# --- errors: the library's, naming the bound -------------------------------------------------------------


BAD_VALUES = [
    # (window_size, causal, the message's start)
    ((-2, 3), False, r"window\.left=-2 must be >= 0, or -1"),
    ((3, -5), False, r"window\.right=-5 must be >= 0, or -1"),
    ((3, 3), True, r"window\.right=3 with causal"),
    ((-1, 1), True, r"window\.right=1 with causal"),
]


@pytest.mark.parametrize("window_size, causal, message", BAD_VALUES)
def test_bad_values_raise_the_librarys_error(lib, window_size, causal, message):
    q, k, v, dout = random_qkv(1, 4, 4, 2, 2, 16)
    cu = np.array([0, 4], np.int32)
    calls = [
        lambda: hopattn.attention(q, k, v, causal=causal, window_size=window_size),
        lambda: hopattn.attention_backward(q, k, v, dout, causal=causal, window_size=window_size),
        lambda: hopattn.varlen_attention(q[0], k[0], v[0], cu, cu, 4, 4, causal=causal, window_size=window_size),
    ]
    for call in calls:
        with pytest.raises(hopattn.InvalidArgumentError, match=message) as info:
            call()
        assert isinstance(info.value, ValueError) and info.value.status == 1


# --- varlen: per sequence -----------------------------------------------------------------------------------


def cu_seqlens(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


# (lens_q, lens_k, used_q, used_k, window_size, causal)
VARLEN_CASES = {
    "mixed": ([5, 0, 1, 17, 3, 1], [7, 4, 1, 17, 0, 9], None, None, (3, 1), False),
    "causal-left": ([9, 13, 2], [13, 9, 2], None, None, (4, 0), True),
    "q-longer": ([19, 12], [7, 3], None, None, (2, 2), False),  # rows that see no key in each
    "seqused": ([6, 5, 4, 0], [8, 5, 3, 2], [6, 2, 0, 0], [3, 5, 1, 0], (1, -1), True),
    "zero-wide": ([8, 8], [8, 5], None, None, (0, 0), False),
}


def varlen_problem(case, dtype=np.float32, seed=0):
    lens_q, lens_k, used_q, used_k, window, causal = VARLEN_CASES[case]
    rng = np.random.default_rng(seed)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    q = rng.standard_normal((cu_q[-1], 4, 16)).astype(dtype)
    k = rng.standard_normal((cu_k[-1], 2, 16)).astype(dtype)
    v = rng.standard_normal((cu_k[-1], 2, 16)).astype(dtype)
    used = [None if u is None else np.array(u, np.int32) for u in (used_q, used_k)]
    return q, k, v, cu_q, cu_k, used, window, causal


def sequences(cu_q, cu_k, used_q, used_k):
    """(rows, keys) of each sequence: the slices of the used tokens."""
    for b in range(len(cu_q) - 1):
        sq = cu_q[b + 1] - cu_q[b] if used_q is None else used_q[b]
        sk = cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b]
        yield slice(int(cu_q[b]), int(cu_q[b] + sq)), slice(int(cu_k[b]), int(cu_k[b] + sk))


@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_equals_attention_on_each_sequence(lib, case):
    q, k, v, cu_q, cu_k, (used_q, used_k), window, causal = varlen_problem(case)
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 20, causal=causal, seqused_q=used_q,
                                        seqused_k=used_k, return_lse=True, window_size=window)
    for rows, keys in sequences(cu_q, cu_k, used_q, used_k):
        if rows.stop == rows.start:
            continue
        want_out, want_lse = hopattn.attention(q[None, rows], k[None, keys], v[None, keys], causal=causal,
                                               return_lse=True, window_size=window)
        np.testing.assert_array_equal(out[rows], want_out[0])
        np.testing.assert_array_equal(lse[:, rows], want_lse[0])
    # And against the formula, sequence by sequence (aligned by the used lengths).
    for rows, keys in sequences(cu_q, cu_k, used_q, used_k):
        want_out, _ = naive_attention(q[None, rows], k[None, keys], v[None, keys], causal, window_size=window)
        np.testing.assert_allclose(out[rows], want_out[0], **TOLERANCE[np.float32])


def test_flash_attn_varlen_func_numpy_with_a_window(lib):
    q, k, v, cu_q, cu_k, _, _, _ = varlen_problem("causal-left", seed=1)
    out = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 13, 13, causal=True, window_size=(4, 4))
    np.testing.assert_array_equal(out, hopattn.varlen_attention(q, k, v, cu_q, cu_k, 13, 13, causal=True,
                                                                window_size=(4, 0)))


# --- gradients (numpy, the CPU reference backward) --------------------------------------------------------


GRAD_TOLERANCE = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradients_match_the_masked_backward(lib, case):
    sq, sk, left, right, causal = case
    q, k, v, dout = random_qkv(2, sq, sk, 4, 2, 16, seed=sq * 7 + sk)
    grads = hopattn.attention_backward(q, k, v, dout, causal=causal, window_size=(left, right))
    want = naive_backward(q, k, v, dout, causal, window_size=(left, right))
    visible = visible_keys(sq, sk, causal, (left, right))
    for name, got, w in zip(("dq", "dk", "dv"), grads, want[:3]):
        assert np.all(np.isfinite(got)), name
        tol = dict(GRAD_TOLERANCE, atol=GRAD_TOLERANCE["atol"] * max(1.0, float(np.abs(w).max(initial=0.0))))
        np.testing.assert_allclose(got.astype(np.float64), w, err_msg=name, **tol)
    # Rows that see no key have dq 0; keys no row sees have dk = dv = 0.
    assert np.all(grads[0][:, ~visible.any(axis=1)] == 0)
    unseen = ~visible.any(axis=0)
    assert np.all(grads[1][:, unseen] == 0) and np.all(grads[2][:, unseen] == 0)


def test_gradients_match_finite_differences(lib):
    # sq > sk with a window (3, 1), diagonal i - 3: rows 0 and 1 see no key, key 0 is seen by rows
    # 2..6 only, key 5 by rows 7 and 8.
    q, k, v, dout = random_qkv(1, 9, 6, 4, 2, 8, seed=7)
    window, scale = (3, 1), 0.6
    grads = hopattn.attention_backward(q, k, v, dout, softmax_scale=scale, window_size=window)

    def loss(**inputs):
        out = hopattn.attention(softmax_scale=scale, window_size=window, **{"q": q, "k": k, "v": v, **inputs})
        return float(np.sum(dout.astype(np.float64) * out.astype(np.float64)))

    eps = 1e-2
    entries = {"q": [(0, 8, 1, 3), (0, 4, 3, 0), (0, 1, 2, 4)], "k": [(0, 0, 1, 2), (0, 5, 0, 7)],
               "v": [(0, 2, 1, 5), (0, 0, 0, 0)]}
    for (name, x), grad in zip((("q", q), ("k", k), ("v", v)), grads):
        for idx in entries[name]:
            plus, minus = x.copy(), x.copy()
            plus[idx] += eps
            minus[idx] -= eps
            fd = (loss(**{name: plus}) - loss(**{name: minus})) / (2 * eps)
            assert abs(fd - float(grad[idx])) <= 5e-4 * max(1.0, abs(fd)), (name, idx, fd, float(grad[idx]))
    assert np.all(grads[0][:, :2] == 0)  # q row 1 among them: both sides 0


# --- flash_attn_interface (numpy) ----------------------------------------------------------------------------


def test_flash_attn_func_with_a_window_is_hopattn_attention(lib):
    q, k, v, _ = random_qkv(2, 9, 12, 4, 2, 16, seed=8)
    out = fai.flash_attn_func(q, k, v, window_size=(3, 2))
    np.testing.assert_array_equal(out, hopattn.attention(q, k, v, window_size=(3, 2)))
    # FA3's causal rule: with causal the right bound is 0, whatever was passed (Transformers passes (w, w)).
    out, lse = fai.flash_attn_func(q, k, v, causal=True, window_size=(3, 3), return_attn_probs=True)
    want_out, want_lse = hopattn.attention(q, k, v, causal=True, window_size=(3, 0), return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    qkv = np.stack([q, q, q], axis=2)
    np.testing.assert_array_equal(fai.flash_attn_qkvpacked_func(qkv, window_size=(1, 0)),
                                  hopattn.attention(q, q, q, window_size=(1, 0)))


def test_flash_attn_with_kvcache_refuses_a_window():
    cache = np.zeros((1, 8, 1, 16), np.float32)
    with pytest.raises(NotImplementedError, match="window_size=.*KV-cache kernel has no sliding window"):
        fai.flash_attn_with_kvcache(cache[:, :1], cache, cache, cache_seqlens=4, window_size=(2, 0))


# --- torch on the CPU: the ops' CPU kernels ---------------------------------------------------------------


@needs_custom_op
@pytest.mark.parametrize("window, causal", [((3, 1), False), ((2, 0), True), ((0, -1), False)])
def test_op_cpu_kernels_take_the_window_forward_and_backward(lib, window, causal):
    from hopattn import torch_ops

    arrays = random_qkv(2, 9, 12, 4, 2, 16, seed=9)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in arrays[:3])
    dout = torch.from_numpy(arrays[3])
    out, lse = torch_ops.fwd(q, k, v, causal, None, False, *window)
    want_out, want_lse = hopattn.attention(*arrays[:3], causal=causal, return_lse=True, window_size=window)
    np.testing.assert_array_equal(out.detach().numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    grads = torch.autograd.grad(out, (q, k, v), dout)  # hopattn::bwd with the forward's window
    for name, got, want in zip(("dq", "dk", "dv"), grads,
                               hopattn.attention_backward(*arrays, causal=causal, window_size=window)):
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
    torch.library.opcheck(torch_ops.fwd, (q, k, v), {"causal": causal, "window_left": window[0],
                                                     "window_right": window[1]})


@needs_custom_op
@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_op_cpu_gradients_equal_attention_backward_per_sequence(lib, case):
    # Autograd through hopattn::fwd_varlen (CPU kernel) runs hopattn::bwd_varlen's CPU kernel, the
    # dense CPU backward on each sequence: the window must reach it.
    from hopattn import torch_ops

    q_np, k_np, v_np, cu_q, cu_k, (used_q, used_k), window, causal = varlen_problem(case, seed=10)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in (q_np, k_np, v_np))
    used = [None if u is None else torch.from_numpy(u) for u in (used_q, used_k)]
    out, _ = torch_ops.fwd_varlen(q, k, v, torch.from_numpy(cu_q), torch.from_numpy(cu_k), 20, 20, *used, causal,
                                  None, False, False, *window)
    dout_np = np.random.default_rng(11).standard_normal(q_np.shape).astype(np.float32)
    grads = torch.autograd.grad(out, (q, k, v), torch.from_numpy(dout_np))
    want = [np.zeros_like(x) for x in (q_np, k_np, v_np)]
    for rows, keys in sequences(cu_q, cu_k, used_q, used_k):
        if rows.stop == rows.start or keys.stop == keys.start:
            continue
        g = hopattn.attention_backward(q_np[None, rows], k_np[None, keys], v_np[None, keys], dout_np[None, rows],
                                       causal=causal, window_size=window)
        want[0][rows], want[1][keys], want[2][keys] = g[0][0], g[1][0], g[2][0]
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        np.testing.assert_array_equal(got.numpy(), w, err_msg=name)


# --- GPU ---------------------------------------------------------------------------------------------------


def gpu_kernel_or_skip(head_dim, backward=False):
    """The torch dtype of a forward (and backward) kernel for head_dim in this build, bf16 first."""
    require_library_or_skip_module()
    kernels = hopattn.build_info()["kernels"]
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if ("fwd", name, head_dim) in kernels and (not backward or ("bwd", name, head_dim) in kernels):
            return dtype
    pytest.skip(f"no {'fwd+bwd' if backward else 'fwd'} kernel for head_dim {head_dim} in this build")


def gpu_inputs(batch, sq, sk, heads_q, heads_kv, head_dim, dtype, seed=0):
    """q, k, v, dout on the GPU in dtype (randn rounded), seeded."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(s, h):
        return torch.randn((batch, s, h, head_dim), generator=gen, device="cuda").to(dtype)

    return rand(sq, heads_q), rand(sk, heads_kv), rand(sk, heads_kv), rand(sq, heads_q)


def masked_reference(q, k, v, causal, window, softmax_scale=None):
    """Differentiable float32 attention under the causal/window mask (b, s, h, d); a row that sees no
    key gives out 0, lse -inf and zero gradients. Returns out (q's layout) and lse (b, h, sq)."""
    sq, heads_q, head_dim = q.shape[1:]
    sk, heads_kv = k.shape[1], k.shape[2]
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    mask = torch.from_numpy(visible_keys(sq, sk, causal, window)).to(q.device)
    has_key = mask.any(dim=1)[:, None]
    kf, vf = (t.float().repeat_interleave(group, dim=2) for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kf) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf where no key
    scores = torch.where(has_key, scores, torch.zeros_like(scores))  # finite placeholder for blind rows
    probs = torch.softmax(scores, dim=-1) * has_key
    return torch.einsum("bhqk,bkhd->bqhd", probs, vf), lse


def rel_err(got, want, floor):
    """rel-L2, against floor where want is (near) zero (e.g. a gradient that vanishes exactly)."""
    denom = max(want.double().norm().item(), floor)
    return (got.double() - want.double()).norm().item() / denom


REL_L2 = {"torch.bfloat16": 1e-2, "torch.float16": 3e-3}
GRAD_REL_L2 = 2e-2

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, window, causal)
GPU_CASES = [
    (2, 1, 1, 4, 4, (0, 0), False),
    (2, 17, 17, 4, 2, (4, 3), False),
    (1, 1000, 1000, 4, 1, (128, 64), False),
    (1, 1000, 1000, 4, 2, (256, 0), True),  # causal + window
    (1, 1000, 1000, 2, 2, (0, 0), False),  # the diagonal only
    (2, 1, 1000, 8, 2, (100, 0), True),  # decode-like
    (1, 17, 1000, 4, 4, (50, 50), False),  # sq < sk
    (1, 1000, 17, 4, 4, (5, 0), True),  # sq > sk: rows 0..982 see no key
    (1, 1000, 300, 2, 1, (-1, 70), False),  # right only
    (1, 300, 1000, 2, 1, (90, -1), False),  # left only
]
GPU_IDS = [f"b{b}q{sq}k{sk}h{hq}:{hk}-w{w[0]},{w[1]}" + ("-causal" if c else "") for b, sq, sk, hq, hk, w, c in GPU_CASES]


@needs_gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=GPU_IDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_forward_matches_the_masked_reference(head_dim, case):
    dtype = gpu_kernel_or_skip(head_dim)
    batch, sq, sk, hq, hkv, window, causal = case
    q, k, v, _ = gpu_inputs(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq + sk)
    out, lse = hopattn.attention(q, k, v, causal=causal, return_lse=True, window_size=window)
    want_out, want_lse = masked_reference(q, k, v, causal, window)
    assert out.shape == q.shape and out.dtype == dtype and torch.isfinite(out).all()
    err = rel_l2(out, want_out) if want_out.norm() > 0 else out.float().norm().item()
    assert err < REL_L2[str(dtype)], f"rel-L2 {err:.3e}"
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))  # rows that see no key: -inf
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[finite], want_lse[finite], rtol=1e-3, atol=1e-3)
    blind = ~torch.from_numpy(visible_keys(sq, sk, causal, window).any(axis=1)).cuda()
    assert (out[:, blind] == 0).all()
    # The CUDA reference kernel takes the window too.
    ref_out, ref_lse = hopattn.attention_reference(q, k, v, causal=causal, return_lse=True, window_size=window)
    assert (ref_out[:, blind] == 0).all() and torch.equal(torch.isneginf(ref_lse), torch.isneginf(want_lse))
    if want_out.norm() > 0:
        assert rel_l2(ref_out, want_out) < REL_L2[str(dtype)]


@needs_gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=GPU_IDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_gradients_match_autograd_of_the_masked_reference(head_dim, case):
    dtype = gpu_kernel_or_skip(head_dim, backward=True)
    batch, sq, sk, hq, hkv, window, causal = case
    q, k, v, dout = gpu_inputs(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq * 3 + sk)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    hopattn.attention(*leaves, causal=causal, window_size=window).backward(dout)
    ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
    masked_reference(*ref, causal, window)[0].backward(dout.float())
    floor = dout.float().norm().item() * 1e-3
    for name, got, want, like in zip(("dq", "dk", "dv"), (t.grad for t in leaves), (t.grad for t in ref), (q, k, v)):
        assert got.shape == like.shape and got.dtype == dtype and torch.isfinite(got).all(), name
        err = rel_err(got, want, floor)
        assert err <= GRAD_REL_L2, f"{name}: rel-L2 {err:.3e}"
    visible = visible_keys(sq, sk, causal, window)
    blind = torch.from_numpy(~visible.any(axis=1)).cuda()
    unseen = torch.from_numpy(~visible.any(axis=0)).cuda()
    assert (leaves[0].grad[:, blind] == 0).all()
    assert (leaves[1].grad[:, unseen] == 0).all() and (leaves[2].grad[:, unseen] == 0).all()


@needs_gpu
@pytest.mark.parametrize("deterministic", [False, True])
def test_gpu_windowed_backward_deterministic_is_bitwise_reproducible(deterministic):
    dtype = gpu_kernel_or_skip(128, backward=True)
    q, k, v, dout = gpu_inputs(2, 700, 900, 8, 2, 128, dtype, seed=5)
    runs = []
    for _ in range(2 if deterministic else 1):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        hopattn.attention(*leaves, causal=True, window_size=(200, 0), deterministic=deterministic).backward(dout)
        runs.append([t.grad for t in leaves])
    if deterministic:
        for name, a, b in zip(("dq", "dk", "dv"), *runs):
            assert torch.equal(a, b), name


@needs_gpu
def test_gpu_bad_window_values_raise_the_librarys_error():
    dtype = gpu_kernel_or_skip(128)
    q, k, v, _ = gpu_inputs(1, 16, 16, 2, 2, 128, dtype)
    for window, causal, message in BAD_VALUES:
        with pytest.raises(hopattn.InvalidArgumentError, match=message):
            hopattn.attention(q, k, v, causal=causal, window_size=window)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with pytest.raises(hopattn.InvalidArgumentError, match=message):
            hopattn.attention(*leaves, causal=causal, window_size=window)


# (lens_q, lens_k, heads_q, heads_kv, window, causal): several key tiles, partial tiles, 0 and 1
GPU_VARLEN_CASES = {
    "mixed": ([0, 1, 130, 257, 64, 3], [5, 1, 300, 257, 0, 190], 8, 2, (64, 32), False),
    "causal-window": ([128, 77, 200, 1000], [128, 77, 300, 1000], 4, 4, (100, 0), True),
    "q-longer": ([300, 17], [120, 1], 4, 1, (10, 10), False),
}


@needs_gpu
@pytest.mark.parametrize("case", list(GPU_VARLEN_CASES))
def test_gpu_varlen_forward_and_backward_match_each_sequence(case):
    dtype = gpu_kernel_or_skip(128, backward=True)
    lens_q, lens_k, hq, hkv, window, causal = GPU_VARLEN_CASES[case]
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    gen = torch.Generator(device="cuda").manual_seed(len(lens_q))
    q, k, v = (torch.randn((int(cu[-1]), h, 128), generator=gen, device="cuda").to(dtype)
               for cu, h in ((cu_q, hq), (cu_k, hkv), (cu_k, hkv)))
    dout = torch.randn(q.shape, generator=gen, device="cuda").to(dtype)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse = hopattn.varlen_attention(*leaves, torch.from_numpy(cu_q).cuda(), torch.from_numpy(cu_k).cuda(),
                                        max(lens_q), max(lens_k), causal=causal, return_lse=True, window_size=window)
    out.backward(dout)
    floor = dout.float().norm().item() * 1e-3
    for rows, keys in sequences(cu_q, cu_k, None, None):
        if rows.stop == rows.start:
            continue
        ref = [t.detach()[None, s].float().requires_grad_() for t, s in ((q, rows), (k, keys), (v, keys))]
        want_out, want_lse = masked_reference(*ref, causal, window)
        want_out.backward(dout[None, rows].float())
        if want_out.norm() > 0:
            assert rel_l2(out[rows], want_out[0]) < REL_L2[str(dtype)], (case, rows)
        else:
            assert (out[rows] == 0).all(), (case, rows)
        assert torch.equal(torch.isneginf(lse[:, rows]), torch.isneginf(want_lse[0])), (case, rows)
        for name, leaf, r, s in zip(("dq", "dk", "dv"), leaves, ref, (rows, keys, keys)):
            err = rel_err(leaf.grad[s], r.grad[0], floor)
            assert err <= GRAD_REL_L2, f"{case} {rows} {name}: rel-L2 {err:.3e}"


@needs_gpu
def test_gpu_flash_attn_func_with_a_window_is_hopattn_attention():
    dtype = gpu_kernel_or_skip(128, backward=True)
    q, k, v, dout = gpu_inputs(2, 300, 300, 8, 2, 128, dtype, seed=6)
    results = []
    for call in (lambda a, b, c: fai.flash_attn_func(a, b, c, causal=True, window_size=(64, 64)),
                 lambda a, b, c: hopattn.attention(a, b, c, causal=True, window_size=(64, 0))):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = call(*leaves)
        out.backward(dout)
        results.append((out.detach(), *(t.grad for t in leaves)))
    for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert torch.equal(a, b), name
    want_out, _ = masked_reference(q, k, v, True, (64, 0))
    assert rel_l2(results[0][0], want_out) < REL_L2[str(dtype)]
