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
#  - With torch, the library and an sm_90 GPU: hopattn.attention with a window against a float64
#    masked reference (hopattn_test_support.reference_attention; head_dim 64/128/256, seqlen 1, 17,
#    1000, causal + window), gradients against torch autograd of that reference, varlen forward and
#    backward per sequence, flash_attn_func.
#    (Both torch routes with a window: test_torch_routes.py.)
import numpy as np
import pytest

import hopattn
from hopattn import flash_attn_interface as fai
from hopattn import ops
from hopattn_test_support import (REL_L2, check_finite_differences, check_gpu_forward, check_gpu_gradients,
                                  check_gpu_varlen_per_sequence, check_numpy_forward, check_numpy_gradients,
                                  check_numpy_varlen, check_op_cpu_kernels, check_varlen_op_cpu_per_sequence,
                                  custom_op_marker, entry_point_calls, gpu_dtype_or_skip, gpu_outputs_and_gradients,
                                  gpu_qkv, optional_torch, packed_qkv, reference_attention, rel_l2, visible_keys)
from hopattn_test_support import numpy_qkv as random_qkv  # q, k, v and dout (like q), seeded

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()
HAS_CUSTOM_OP, needs_custom_op = custom_op_marker(torch)


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


# --- the form of window_size (no library) -------------------------------------------------------------


BAD_FORMS = [None, 5, (1, 2, 3), (4,), ("a", 1), (1.5, 2), (1, True), "ab", {1: 2, 3: 4}]


@pytest.mark.parametrize("window_size", BAD_FORMS, ids=repr)
def test_window_size_must_be_a_pair_of_ints(window_size):
    # attention, attention_backward, attention_reference and varlen_attention
    for name, call in entry_point_calls(window_size=window_size).items():
        with pytest.raises(TypeError, match="window_size"):
            call()


def test_window_bounds_must_fit_in_int64():
    q, k, v, _ = random_qkv(1, 3, 3, 1, 1, 8)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"window_size\[1\] \(right\)=.* does not fit in int64"):
        hopattn.attention(q, k, v, window_size=(0, 1 << 63))


def test_signatures_take_window_size_last_but_softcap():
    import inspect

    for fn in (hopattn.attention, hopattn.attention_backward, hopattn.attention_reference, hopattn.varlen_attention):
        window, softcap = list(inspect.signature(fn).parameters.values())[-2:]
        assert (window.name, window.default) == ("window_size", (-1, -1)), fn.__name__
        assert (softcap.name, softcap.default) == ("softcap", 0.0), fn.__name__  # test_softcap.py


# --- numpy: the CPU reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_the_masked_softmax(lib, case, dtype):
    sq, sk, left, right, causal = case
    q, k, v, _ = random_qkv(2, sq, sk, 4, 2, 16, dtype, seed=sq * 31 + sk)
    # Against naive_attention; rows that see no key: out exactly 0, lse -inf...
    out, lse, blind = check_numpy_forward(q, k, v, causal=causal, window_size=(left, right))
    # ...every other row a finite lse.
    assert np.all(np.isfinite(lse[:, :, ~blind]))


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


# (lens_q, lens_k, used_q, used_k, window_size, causal)
VARLEN_CASES = {
    "mixed": ([5, 0, 1, 17, 3, 1], [7, 4, 1, 17, 0, 9], None, None, (3, 1), False),
    "causal-left": ([9, 13, 2], [13, 9, 2], None, None, (4, 0), True),
    "q-longer": ([19, 12], [7, 3], None, None, (2, 2), False),  # rows that see no key in each
    "seqused": ([6, 5, 4, 0], [8, 5, 3, 2], [6, 2, 0, 0], [3, 5, 1, 0], (1, -1), True),
    "zero-wide": ([8, 8], [8, 5], None, None, (0, 0), False),
}


def varlen_problem(case, dtype=np.float32, seed=0):
    """Packed inputs of VARLEN_CASES[case], and its window and causal."""
    lens_q, lens_k, used_q, used_k, window, causal = VARLEN_CASES[case]
    return (*packed_qkv(lens_q, lens_k, used_q, used_k, dtype, seed), window, causal)


@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_equals_attention_on_each_sequence(lib, case):
    # Each sequence: bitwise hopattn.attention on it alone, and naive_attention (aligned by the used lengths).
    q, k, v, cu_q, cu_k, (used_q, used_k), window, causal = varlen_problem(case)
    check_numpy_varlen(q, k, v, cu_q, cu_k, used_q, used_k, causal=causal, window_size=window)


def test_flash_attn_varlen_func_numpy_with_a_window(lib):
    q, k, v, cu_q, cu_k, _, _, _ = varlen_problem("causal-left", seed=1)
    out = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 13, 13, causal=True, window_size=(4, 4))
    np.testing.assert_array_equal(out, hopattn.varlen_attention(q, k, v, cu_q, cu_k, 13, 13, causal=True,
                                                                window_size=(4, 0)))


# --- gradients (numpy, the CPU reference backward) --------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradients_match_the_masked_backward(lib, case):
    sq, sk, left, right, causal = case
    q, k, v, dout = random_qkv(2, sq, sk, 4, 2, 16, seed=sq * 7 + sk)
    # Against naive_backward, finite, rtol 1e-5 and atol 1e-5 * max(1, |largest gradient|).
    grads = check_numpy_gradients(q, k, v, dout, causal=causal, window_size=(left, right))
    visible = visible_keys(sq, sk, causal, (left, right))
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

    def loss(q, k, v):  # through the library's CPU forward: central differences at eps 1e-2
        out = hopattn.attention(q, k, v, softmax_scale=scale, window_size=window)
        return float(np.sum(dout.astype(np.float64) * out.astype(np.float64)))

    entries = {"q": [(0, 8, 1, 3), (0, 4, 3, 0), (0, 1, 2, 4)], "k": [(0, 0, 1, 2), (0, 5, 0, 7)],
               "v": [(0, 2, 1, 5), (0, 0, 0, 0)]}
    check_finite_differences(loss, {"q": q, "k": k, "v": v}, grads, entries, eps=1e-2, tol=5e-4)
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


def test_flash_attn_with_kvcache_with_a_window_is_attention_with_kvcache(lib):
    # C ABI 7: the KV-cache call takes the window too, with FA3's causal rule (right bound 0).
    q, k_cache, v_cache, _ = random_qkv(2, 3, 12, 4, 2, 16, seed=10)
    seqlens = np.array([9, 2], np.int32)
    out = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, window_size=(3, 1))
    np.testing.assert_array_equal(out, hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens,
                                                                      window_size=(3, 1)))
    assert not np.array_equal(out, hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens))
    out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, causal=True,
                                           window_size=(3, 3), return_softmax_lse=True)
    want_out, want_lse = hopattn.attention_with_kvcache(q, k_cache, v_cache, seqlens, causal=True,
                                                        window_size=(3, 0), return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)


# --- torch on the CPU: the ops' CPU kernels ---------------------------------------------------------------


@needs_custom_op
@pytest.mark.parametrize("window, causal", [((3, 1), False), ((2, 0), True), ((0, -1), False)])
def test_op_cpu_kernels_take_the_window_forward_and_backward(lib, window, causal):
    # hopattn::fwd and (through autograd) hopattn::bwd bitwise the numpy calls, and opcheck of fwd.
    check_op_cpu_kernels(random_qkv(2, 9, 12, 4, 2, 16, seed=9), causal=causal, window_size=window)


@needs_custom_op
@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_op_cpu_gradients_equal_attention_backward_per_sequence(lib, case):
    # Autograd through hopattn::fwd_varlen (CPU kernel) runs hopattn::bwd_varlen's CPU kernel, the
    # dense CPU backward on each sequence: the window must reach it.
    q_np, k_np, v_np, cu_q, cu_k, (used_q, used_k), window, causal = varlen_problem(case, seed=10)
    check_varlen_op_cpu_per_sequence(q_np, k_np, v_np, cu_q, cu_k, used_q, used_k, causal=causal, window_size=window)


# --- GPU ---------------------------------------------------------------------------------------------------


# hopattn_test_support.reference_attention (float64 torch) is the masked reference.


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
    dtype = gpu_dtype_or_skip(head_dim)
    batch, sq, sk, hq, hkv, window, causal = case
    q, k, v, _ = gpu_qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq + sk)
    # out, lse and the CUDA reference kernel (which takes the window too) against the reference.
    check_gpu_forward(q, k, v, causal=causal, window_size=window)


@needs_gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=GPU_IDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_gradients_match_autograd_of_the_masked_reference(head_dim, case):
    dtype = gpu_dtype_or_skip(head_dim, backward=True)
    batch, sq, sk, hq, hkv, window, causal = case
    q, k, v, dout = gpu_qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq * 3 + sk)
    check_gpu_gradients(q, k, v, dout, causal=causal, window_size=window)


@needs_gpu
@pytest.mark.parametrize("deterministic", [False, True])
def test_gpu_windowed_backward_deterministic_is_bitwise_reproducible(deterministic):
    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, dout = gpu_qkv(2, 700, 900, 8, 2, 128, dtype, seed=5)
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
    dtype = gpu_dtype_or_skip(128)
    q, k, v, _ = gpu_qkv(1, 16, 16, 2, 2, 128, dtype)
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
    dtype = gpu_dtype_or_skip(128, backward=True)
    lens_q, lens_k, hq, hkv, window, causal = GPU_VARLEN_CASES[case]
    check_gpu_varlen_per_sequence(case, lens_q, lens_k, hq, hkv, 128, dtype, causal=causal, window_size=window)


@needs_gpu
def test_gpu_flash_attn_func_with_a_window_is_hopattn_attention():
    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, dout = gpu_qkv(2, 300, 300, 8, 2, 128, dtype, seed=6)
    results = gpu_outputs_and_gradients(  # bitwise equal
        (lambda a, b, c: fai.flash_attn_func(a, b, c, causal=True, window_size=(64, 64)),
         lambda a, b, c: hopattn.attention(a, b, c, causal=True, window_size=(64, 0))), q, k, v, dout)
    want_out, _ = reference_attention(q, k, v, causal=True, window_size=(64, 0))
    assert rel_l2(results[0][0], want_out) < REL_L2[str(dtype)]
