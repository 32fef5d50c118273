# Softcapping: softcap= (C ABI 6's float softcap) through every bf16/fp16 attention call. With
# softcap > 0 each score becomes softcap * tanh(softmax_scale * q.k / softcap) before the masks and
# the softmax (forward and backward); 0.0, the default, is off.
#  - Everywhere (no library, no torch): softcap must be a finite float >= 0 (bool, strings, None,
#    NaN, inf, negatives and values beyond a C float refused with a ValueError naming softcap) on
#    every entry point, before any array is looked at; the C structs carry it; signatures take it
#    last; attention_with_kvcache and flash_attn_with_kvcache take it too (C ABI 8); the FP8
#    entry points have no softcap.
#  - With the library (numpy, the CPU reference): out and lse against a float64 numpy formula (GQA,
#    causal, windows, rows that see no key, tiny and huge caps), gradients (attention_backward)
#    against the float64 backward and finite differences, varlen per sequence, the
#    flash_attn_interface functions, softcap 0 bitwise the default, the bound |score| <= softcap.
#  - With torch and the library, no GPU: the ops' CPU kernels take softcap forward and backward
#    (hopattn::fwd / bwd, fwd_varlen / bwd_varlen) and opcheck passes with one; the library refuses
#    bad values through the ops; torch.compile(fullgraph=True) of a softcapped call (op route,
#    forward + backward); the direct route's packed structs byte for byte with a softcap; dynamo
#    traces softcapped calls as one graph (fake CUDA tensors, no library).
#  - With torch, the library and an sm_90 GPU: hopattn.attention (head_dim 64/128/256, causal,
#    windows, GQA, seqlens 1/17/127/1000) against a float64 torch reference, forward and gradients;
#    the CUDA reference kernel; deterministic backward; varlen per sequence; flash_attn_func /
#    qkvpacked / varlen bitwise equal to hopattn's; opcheck on CUDA; torch.compile with inductor.
#    (Both torch routes with softcap: test_torch_routes.py.)
import inspect

import numpy as np
import pytest

import hopattn
from hopattn import _lib, ops
from hopattn import flash_attn_interface as fai
from hopattn_test_support import (REL_L2, check_finite_differences, check_gpu_forward, check_gpu_gradients,
                                  check_gpu_varlen_per_sequence, check_numpy_forward, check_numpy_gradients,
                                  check_numpy_varlen, check_op_cpu_kernels, check_op_route_gradients,
                                  check_varlen_op_cpu_per_sequence, compile_fullgraph_backward, custom_op_marker,
                                  entry_point_calls, gpu_dtype_or_skip, gpu_outputs_and_gradients, gpu_qkv,
                                  naive_attention, numpy_qkv, op_route, optional_torch, packed_qkv, reference_attention,
                                  rel_l2, torch_qkv, visible_keys)

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()
HAS_CUSTOM_OP, needs_custom_op = custom_op_marker(torch)


def random_qkv(*args, amplitude=2.0, **kwargs):
    """numpy_qkv with q times 2 by default, so that the scores reach the cap."""
    return numpy_qkv(*args, amplitude=amplitude, **kwargs)


# The float64 formula, written independently of the library: hopattn_test_support.naive_attention /
# naive_backward with softcap.


# (seqlen_q, seqlen_k, heads_q, heads_kv, causal, window_size, softcap, softmax_scale)
CASES = [
    (9, 9, 4, 2, False, (-1, -1), 1.0, None),  # GQA, the cap bites hard
    (17, 17, 4, 4, True, (-1, -1), 5.0, None),
    (7, 13, 4, 1, True, (-1, -1), 2.0, 0.9),  # MQA, sq < sk, an explicit scale
    (13, 7, 2, 2, True, (-1, -1), 0.5, None),  # sq > sk: rows 0..5 see no key
    (12, 12, 4, 2, False, (3, 1), 3.0, None),  # sliding window
    (13, 7, 4, 2, False, (3, 2), 1.5, 0.4),  # window, rows 0..3 see no key
    (1, 17, 4, 2, True, (4, 0), 10.0, None),  # one query (decode-like), causal window
    (5, 8, 2, 2, False, (-1, -1), 1e-3, None),  # tiny cap: every score within 1e-3 of 0
    (5, 8, 2, 2, True, (-1, -1), 1e6, None),  # huge cap: next to no capping
    (6, 6, 2, 1, True, (0, 0), 2.0, None),  # the diagonal key only
]
CASE_IDS = [f"q{sq}k{sk}h{hq}:{hk}" + ("-causal" if c else "") + (f"-w{w[0]},{w[1]}" if w != (-1, -1) else "")
            + f"-cap{cap:g}" for sq, sk, hq, hk, c, w, cap, _ in CASES]


# --- the value of softcap (no library) ----------------------------------------------------------------


BAD_SOFTCAPS = [-1, -0.5, -1e-30, float("nan"), float("inf"), float("-inf"), True, False, "x", "1.0", None,
                3.5e38, 10 ** 400, [1.0], np.array([1.0, 2.0]), np.float32("nan")]


def _calls(softcap):
    """Every public entry point that takes softcap, called with it (numpy arrays, no library needed:
    softcap is checked before anything else)."""
    return entry_point_calls(flash_attn=True, softcap=softcap)


@pytest.mark.parametrize("softcap", BAD_SOFTCAPS, ids=repr)
def test_softcap_must_be_a_finite_float_at_least_0(softcap):
    for name, call in _calls(softcap).items():
        with pytest.raises(ValueError, match="softcap must be a finite float >= 0") as info:
            call()
        assert isinstance(info.value, hopattn.InvalidArgumentError), name


@pytest.mark.parametrize("softcap", BAD_SOFTCAPS[:8], ids=repr)
def test_softcap_is_checked_before_the_arrays(softcap):
    # Not arrays at all: the softcap error still comes first, as window_size's does.
    with pytest.raises(ValueError, match="softcap"):
        hopattn.attention(None, None, None, softcap=softcap)
    with pytest.raises(ValueError, match="softcap"):
        hopattn.varlen_attention(None, None, None, None, None, 1, 1, softcap=softcap)


@pytest.mark.parametrize("value, want", [
    (0, 0.0), (0.0, 0.0), (-0.0, 0.0), (3, 3.0), (2.5, 2.5), (np.float32(2.5), 2.5), (np.float64(1e-3), 1e-3),
    (np.int64(7), 7.0), (3.4028234663852886e38, 3.4028234663852886e38), (1e-45, 1e-45),
], ids=repr)
def test_accepted_softcaps_become_python_floats(value, want):
    got = ops._check_softcap(value)
    assert type(got) is float and got == want


def test_signatures_take_softcap_last_with_default_0():
    for fn in (hopattn.attention, hopattn.attention_backward, hopattn.attention_reference, hopattn.varlen_attention,
               hopattn.attention_with_kvcache):
        last = list(inspect.signature(fn).parameters.values())[-1]
        assert (last.name, last.default) == ("softcap", 0.0), fn.__name__


def test_fp8_entry_points_take_no_softcap():
    # The FP8 forward has no softcapping (the library refuses a nonzero one); the Python API does not offer it.
    for fn in (hopattn.attention_fp8, hopattn.forward_fp8):
        assert "softcap" not in inspect.signature(fn).parameters, fn.__name__


@pytest.mark.parametrize("softcap", BAD_SOFTCAPS, ids=repr)
def test_kvcache_calls_check_softcap_before_the_arrays(softcap):
    # attention_with_kvcache and flash_attn_with_kvcache (C ABI 8): the value first, as elsewhere.
    for call in (lambda: hopattn.attention_with_kvcache(object(), object(), object(), object(), softcap=softcap),
                 lambda: fai.flash_attn_with_kvcache(object(), object(), object(), cache_seqlens=object(),
                                                     softcap=softcap)):
        with pytest.raises(ValueError, match="softcap must be a finite float >= 0") as info:
            call()
        assert isinstance(info.value, hopattn.InvalidArgumentError)


def test_flash_attn_functions_hand_softcap_on(monkeypatch):
    from hopattn import varlen

    calls = []
    monkeypatch.setattr(ops, "attention", lambda *args, **kw: calls.append(kw["softcap"]) or "out")
    monkeypatch.setattr(varlen, "varlen_attention", lambda *args, **kw: calls.append(kw["softcap"]) or "out")
    q = np.zeros((1, 2, 1, 8), np.float32)
    assert fai.flash_attn_func(q, q, q, softcap=30) == "out"
    assert fai.flash_attn_qkvpacked_func(np.zeros((1, 2, 3, 1, 8)), softcap=np.float32(2.5)) == "out"
    assert fai.flash_attn_varlen_func(q[0], q[0], q[0], None, None, 2, 2, softcap=0.5) == "out"
    assert fai.flash_attn_func(q, q, q) == "out"  # FA3's default, 0.0: off
    assert calls == [30.0, 2.5, 0.5, 0.0] and all(type(c) is float for c in calls)


@pytest.mark.parametrize("maker, n_tensors", [(_lib.make_fwd_args, 5), (_lib.make_bwd_args, 9)])
def test_structs_carry_softcap(maker, n_tensors):
    tensors = [_lib.HopattnTensor() for _ in range(n_tensors)]
    extra = (False,) if maker is _lib.make_bwd_args else ()
    assert maker(*tensors, False, None, *extra).softcap == 0.0
    assert maker(*tensors, False, None, *extra, (2, 0), 2.5).softcap == 2.5
    assert maker(*tensors, False, None, *extra, softcap=30.0).softcap == 30.0
    tensors = [_lib.HopattnTensor() for _ in range(7)]
    fwd = _lib.make_varlen_fwd_args(*tensors[:5], *tensors[5:7], None, None, 1, 1, False, None, False, None, 1.5)
    bwd = _lib.make_varlen_bwd_args(*[_lib.HopattnTensor() for _ in range(11)], None, None, 1, 1, False, None, False,
                                    False, None, 4.0)
    assert (fwd.softcap, bwd.softcap) == (1.5, 4.0)


# --- numpy: the CPU reference ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_the_capped_softmax(lib, case, dtype):
    sq, sk, hq, hkv, causal, window, softcap, scale = case
    q, k, v, _ = random_qkv(2, sq, sk, hq, hkv, 16, dtype, seed=sq * 31 + sk)
    # out and lse against naive_attention with softcap; rows that see no key: out 0, lse -inf.
    out, lse, _ = check_numpy_forward(q, k, v, causal=causal, softmax_scale=scale, window_size=window,
                                      softcap=softcap)
    assert out.dtype == dtype and lse.dtype == np.float32
    # The reference entry point is the same CPU reference on numpy arrays.
    ref_out, ref_lse = hopattn.attention_reference(q, k, v, causal=causal, softmax_scale=scale, return_lse=True,
                                                   window_size=window, softcap=softcap)
    np.testing.assert_array_equal(ref_out, out)
    np.testing.assert_array_equal(ref_lse, lse)


def test_softcap_changes_the_result_and_0_is_off(lib):
    q, k, v, dout = random_qkv(2, 9, 11, 4, 2, 16, seed=1, amplitude=4.0)
    plain = hopattn.attention(q, k, v, causal=True, return_lse=True)
    for off in (0, 0.0, -0.0, np.float32(0)):
        got = hopattn.attention(q, k, v, causal=True, return_lse=True, softcap=off)
        for a, b in zip(got, plain):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(hopattn.attention_backward(q, k, v, dout, causal=True, softcap=off),
                        hopattn.attention_backward(q, k, v, dout, causal=True)):
            np.testing.assert_array_equal(a, b)
    capped = hopattn.attention(q, k, v, causal=True, return_lse=True, softcap=2.0)
    assert np.abs(capped[0] - plain[0]).max() > 1e-2  # the cap bites at this amplitude
    # An int and the equal float are the same softcap.
    for a, b in zip(hopattn.attention(q, k, v, return_lse=True, softcap=3),
                    hopattn.attention(q, k, v, return_lse=True, softcap=3.0)):
        np.testing.assert_array_equal(a, b)


def test_a_huge_softcap_is_next_to_no_softcap(lib):
    q, k, v, _ = random_qkv(2, 7, 9, 4, 2, 16, seed=2)
    for a, b in zip(hopattn.attention(q, k, v, return_lse=True, softcap=1e7),
                    hopattn.attention(q, k, v, return_lse=True)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("softcap", [0.25, 1.0, 4.0])
def test_lse_is_bounded_by_the_cap(lib, softcap):
    # Every capped score lies in (-softcap, softcap): log(n) - softcap < lse < log(n) + softcap
    # for a row that sees n keys, whatever the inputs' size.
    q, k, v, _ = random_qkv(1, 20, 20, 2, 2, 16, seed=3, amplitude=50.0)
    window = (5, 3)
    _, lse = hopattn.attention(q, k, v, return_lse=True, window_size=window, softcap=softcap)
    n = visible_keys(20, 20, False, window).sum(axis=1)
    assert np.all(lse < np.log(n) + softcap + 1e-5) and np.all(lse > np.log(n) - softcap - 1e-5)


# --- numpy: gradients (the CPU reference backward) ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradients_match_the_capped_backward(lib, case):
    sq, sk, hq, hkv, causal, window, softcap, scale = case
    q, k, v, dout = random_qkv(2, sq, sk, hq, hkv, 16, seed=sq * 7 + sk)
    # Against naive_backward with softcap (dS times 1 - tanh^2), finite, rtol 1e-5.
    grads = check_numpy_gradients(q, k, v, dout, causal=causal, softmax_scale=scale, window_size=window,
                                  softcap=softcap)
    for name, got in zip(("dq", "dk", "dv"), grads):
        assert got.dtype == np.float32, name


def test_gradients_match_finite_differences(lib):
    # A cap that bites (amplitude 3, softcap 1.5), GQA, a window with rows that see no key.
    q, k, v, dout = random_qkv(1, 9, 6, 4, 2, 8, seed=7, amplitude=3.0)
    window, scale, softcap = (3, 1), 0.6, 1.5
    grads = hopattn.attention_backward(q, k, v, dout, softmax_scale=scale, window_size=window, softcap=softcap)
    q64, k64, v64, dout64 = (x.astype(np.float64) for x in (q, k, v, dout))

    def loss(q, k, v):  # the float64 formula: central differences at eps 1e-5
        out, _ = naive_attention(q, k, v, softmax_scale=scale, window_size=window, softcap=softcap)
        return float(np.sum(dout64 * out))

    entries = {"q": [(0, 8, 1, 3), (0, 4, 3, 0), (0, 2, 2, 4)], "k": [(0, 0, 1, 2), (0, 5, 0, 7)],
               "v": [(0, 2, 1, 5), (0, 0, 0, 0)]}
    check_finite_differences(loss, {"q": q64, "k": k64, "v": v64}, grads, entries, eps=1e-5, tol=1e-4)
    assert np.all(grads[0][:, :2] == 0)  # rows 0 and 1 see no key


# --- numpy: varlen, per sequence ------------------------------------------------------------------------------


# (lens_q, lens_k, used_q, used_k, window_size, causal, softcap)
VARLEN_CASES = {
    "mixed": ([5, 0, 1, 17, 3, 1], [7, 4, 1, 17, 0, 9], None, None, (-1, -1), False, 2.0),
    "causal": ([9, 13, 2], [13, 9, 2], None, None, (-1, -1), True, 0.75),
    "window": ([19, 12], [7, 3], None, None, (2, 2), False, 5.0),
    "seqused": ([6, 5, 4, 0], [8, 5, 3, 2], [6, 2, 0, 0], [3, 5, 1, 0], (1, -1), True, 1.0),
}


def varlen_problem(case, seed=0):
    """Packed inputs (q times 3) of VARLEN_CASES[case], and its window, causal and softcap."""
    lens_q, lens_k, used_q, used_k, window, causal, softcap = VARLEN_CASES[case]
    return (*packed_qkv(lens_q, lens_k, used_q, used_k, seed=seed, amplitude=3.0), window, causal, softcap)


@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_equals_attention_on_each_sequence(lib, case):
    # Each sequence: bitwise hopattn.attention on it alone, and naive_attention with softcap.
    q, k, v, cu_q, cu_k, (used_q, used_k), window, causal, softcap = varlen_problem(case)
    check_numpy_varlen(q, k, v, cu_q, cu_k, used_q, used_k, causal=causal, window_size=window, softcap=softcap)


# --- numpy: flash_attn_interface -------------------------------------------------------------------------------


def test_flash_attn_functions_with_softcap_are_hopattns(lib):
    q, k, v, _ = random_qkv(2, 9, 12, 4, 2, 16, seed=8)
    out, lse = fai.flash_attn_func(q, k, v, causal=True, softcap=2.0, return_attn_probs=True)
    want_out, want_lse = hopattn.attention(q, k, v, causal=True, softcap=2.0, return_lse=True)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(lse, want_lse)
    np.testing.assert_array_equal(fai.flash_attn_func(q, k, v, window_size=(3, 3), causal=True, softcap=1.0),
                                  hopattn.attention(q, k, v, window_size=(3, 0), causal=True, softcap=1.0))
    qkv = np.stack([q, q, q], axis=2)
    np.testing.assert_array_equal(fai.flash_attn_qkvpacked_func(qkv, softcap=3.0),
                                  hopattn.attention(q, q, q, softcap=3.0))
    q, k, v, cu_q, cu_k, _, _, _, _ = varlen_problem("causal", seed=1)
    np.testing.assert_array_equal(fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 13, 13, causal=True, softcap=0.5),
                                  hopattn.varlen_attention(q, k, v, cu_q, cu_k, 13, 13, causal=True, softcap=0.5))


# --- torch on the CPU: the ops' CPU kernels, compile, packing ------------------------------------------------


@needs_custom_op
@pytest.mark.parametrize("causal, window, softcap", [(False, (-1, -1), 2.0), (True, (-1, -1), 0.5),
                                                     (False, (3, 1), 5.0), (True, (2, 0), 1.0)])
def test_op_cpu_kernels_take_softcap_forward_and_backward(lib, causal, window, softcap):
    from hopattn import torch_ops

    # hopattn::fwd and (through autograd) hopattn::bwd bitwise the numpy calls, opcheck of fwd...
    arrays = random_qkv(2, 9, 12, 4, 2, 16, seed=9)
    q, k, v, dout, out, lse = check_op_cpu_kernels(arrays, causal=causal, window_size=window, softcap=softcap)
    # ...and of bwd.
    detached = [t.detach() for t in (q, k, v)]
    torch.library.opcheck(torch_ops.bwd, (dout, *detached, out.detach(), lse, causal, None, False, *window, softcap))


@needs_custom_op
def test_the_ops_leave_bad_values_to_the_library(lib):
    from hopattn import torch_ops

    q, k, v, _ = torch_qkv(random_qkv(1, 4, 4, 2, 2, 16), requires_grad=False)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(hopattn.InvalidArgumentError, match="softcap must be finite and >= 0"):
            torch_ops.fwd(q, k, v, False, None, False, -1, -1, bad)


@needs_custom_op
@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_op_cpu_takes_softcap_forward_and_backward(lib, case):
    from hopattn import torch_ops

    # Gradients through hopattn::fwd_varlen / bwd_varlen's CPU kernels bitwise per sequence, then opcheck.
    q_np, k_np, v_np, cu_q, cu_k, (used_q, used_k), window, causal, softcap = varlen_problem(case, seed=10)
    q, k, v, index = check_varlen_op_cpu_per_sequence(q_np, k_np, v_np, cu_q, cu_k, used_q, used_k, causal=causal,
                                                      window_size=window, softcap=softcap)
    torch.library.opcheck(torch_ops.fwd_varlen, (q, k, v, *index), {"causal": causal, "window_left": window[0],
                                                                    "window_right": window[1], "softcap": softcap})


@needs_custom_op
def test_compile_fullgraph_with_softcap_forward_and_backward_on_cpu(lib, monkeypatch):
    # hopattn.attention under torch.compile takes the op route; CPU tensors are let through (the op's
    # CPU kernels, the CPU reference, run) by skipping attention's CUDA-only input check.
    monkeypatch.setattr(ops, "_check_torch_inputs", lambda torch, q, k, v: None)

    def block(q, k, v, w):
        return (hopattn.attention(q * w, k, v, causal=True, softcap=2.5) * w).sum(dim=-1)

    arrays = random_qkv(2, 6, 6, 4, 2, 16, seed=4)
    q, k, v, _ = torch_qkv(arrays)
    w = torch.rand(16, requires_grad=True)
    leaves = (q, k, v, w)
    torch._dynamo.reset()
    _, counter, compiled_grads = compile_fullgraph_backward(block, leaves)  # one frame
    nodes = [n for n in counter.graphs[0].graph.nodes if n.target is torch.ops.hopattn.fwd.default]
    assert len(nodes) == 1 and 2.5 in nodes[0].args  # softcap recorded as the op's last argument
    check_op_route_gradients(block, leaves, compiled_grads)  # the same op, eager: the same gradients
    # ...and not the uncapped result.
    with op_route():
        uncapped = torch.autograd.grad((hopattn.attention(q * w, k, v, causal=True) * w).sum(), q)[0]
    assert not torch.allclose(uncapped, compiled_grads[0])
    torch._dynamo.reset()


@needs_torch
@pytest.mark.parametrize("softcap", [2.5, 1e-30, 3.4028234663852886e38])
def test_direct_route_packs_softcap_like_the_ctypes_constructors(softcap):
    from hopattn_test_support import cpu_qkv

    st = ops._direct(torch)
    views = [cpu_qkv(2, 9, 13, 4, 2, 64, torch.bfloat16),
             [t.transpose(1, 2).contiguous().transpose(1, 2) for t in cpu_qkv(1, 6, 30, 8, 1, 128)],
             cpu_qkv(1, 4, 4, 2, 2, 1),  # make_tensor's size-1 substitution: the constructor path
             cpu_qkv(2, 5, 0, 2, 2, 64)]  # empty: the constructor path
    for q, k, v in views:
        out, lse = ops._torch_forward_outputs(torch, q, True)
        codes = tuple(ops._torch_dtype_code(torch, n, t) for n, t in (("q", q), ("k", k), ("v", v)))
        got = ops._fwd_args(st, q, k, v, out, lse, q.shape, k.shape, v.shape, *codes, True, 0.3, (3, 0), softcap)
        tensors = [ops._torch_tensor(torch, n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out))]
        want = _lib.make_fwd_args(*tensors, ops._torch_tensor(torch, "lse", lse), True, 0.3, (3, 0), softcap)
        assert bytes(got) == bytes(want) and got.softcap == np.float32(softcap)
        dout = ops._torch_dout(torch, torch.ones_like(out), q)
        dq, dk, dv = ops._torch_grad_outputs(torch, q, k, v)
        got = ops._bwd_args(st, q, k, v, out, dout, lse, dq, dk, dv, codes, False, None, True, (-1, 5), softcap)
        tensors = [ops._torch_tensor(torch, n, t) for n, t in
                   (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse), ("dq", dq), ("dk", dk),
                    ("dv", dv))]
        want = _lib.make_bwd_args(*tensors, False, None, True, (-1, 5), softcap)
        assert bytes(got) == bytes(want) and got.softcap == np.float32(softcap)


@needs_custom_op
def test_dynamo_traces_softcapped_calls_as_one_graph():
    # Fake CUDA tensors: tracing only, no GPU or library needed.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hopattn import torch_ops  # registers the ops (tracing would, but the list below names them first)

    with FakeTensorMode():
        q = torch.empty((2, 16, 4, 64), dtype=torch.bfloat16, device="cuda")
        kv = torch.empty((2, 16, 2, 64), dtype=torch.bfloat16, device="cuda")
        packed = torch.empty((32, 4, 64), dtype=torch.bfloat16, device="cuda")
        packed_kv = torch.empty((32, 2, 64), dtype=torch.bfloat16, device="cuda")
        cu = torch.tensor([0, 16, 32], dtype=torch.int32, device="cuda")
        calls = [
            (lambda q, k, v: hopattn.attention(q, k, v, causal=True, softcap=30.0), (q, kv, kv), torch_ops.fwd),
            (lambda q, k, v: fai.flash_attn_func(q, k, v, softcap=30.0), (q, kv, kv), torch_ops.fwd),
            (lambda q, k, v: hopattn.varlen_attention(q, k, v, cu, cu, 16, 16, softcap=30.0),
             (packed, packed_kv, packed_kv), torch_ops.fwd_varlen),
        ]
        for fn, args, op in calls:
            explanation = torch._dynamo.explain(fn)(*args)
            assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons
            nodes = [n for n in explanation.graphs[0].graph.nodes if n.target is op]
            assert len(nodes) == 1 and nodes[0].args[-1] == 30.0


# --- GPU ------------------------------------------------------------------------------------------------------


# hopattn_test_support.reference_attention (float64 torch, softcap= like the library's) is the reference.


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, causal, window, softcap, amplitude of q)
GPU_CASES = [
    (2, 17, 17, 4, 2, False, (-1, -1), 5.0, 1.0),
    (2, 127, 127, 8, 2, True, (-1, -1), 2.0, 2.0),
    (1, 1000, 1000, 4, 1, True, (-1, -1), 30.0, 3.0),  # Gemma-like cap, large scores
    (1, 1000, 1000, 4, 2, False, (-1, -1), 1.0, 1.0),
    (1, 127, 1000, 4, 4, True, (-1, -1), 10.0, 4.0),  # sq < sk
    (1, 1000, 17, 4, 4, True, (-1, -1), 5.0, 2.0),  # sq > sk: rows 0..982 see no key
    (1, 1000, 1000, 4, 2, True, (256, 0), 5.0, 2.0),  # causal + window
    (2, 127, 1000, 4, 2, False, (64, 64), 2.0, 2.0),  # window, sq < sk
    (2, 1, 1000, 8, 2, True, (-1, -1), 50.0, 4.0),  # decode-like
    (2, 1, 1, 4, 4, False, (-1, -1), 0.5, 1.0),
]
GPU_IDS = [f"b{b}q{sq}k{sk}h{hq}:{hk}" + ("-causal" if c else "") + (f"-w{w[0]},{w[1]}" if w != (-1, -1) else "")
           + f"-cap{cap:g}" for b, sq, sk, hq, hk, c, w, cap, _ in GPU_CASES]


@needs_gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=GPU_IDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_forward_matches_the_float64_reference(head_dim, case):
    dtype = gpu_dtype_or_skip(head_dim)
    batch, sq, sk, hq, hkv, causal, window, softcap, amplitude = case
    q, k, v, _ = gpu_qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq + sk, amplitude=amplitude)
    # out, lse and the CUDA reference kernel (which takes softcap too) against the float64 reference...
    ref_lse, want_lse = check_gpu_forward(q, k, v, causal=causal, window_size=window, softcap=softcap)
    # ...and the reference kernel's lse as well.
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(ref_lse[finite].double(), want_lse[finite], rtol=1e-3, atol=1e-3)


# Rows whose every score is far below +softcap, the bound a capped score can reach: q near -offset
# and k near +offset make every q.k about -offset^2 head_dim. offset 6 pins each capped score at
# -softcap (all of a row's p about equal, and 2^-124 in the bf16 fixed-max kernels at their limit
# cap, ws/fixed_max.hpp); offset 1.5 spreads them well below 0. A softmax that underflowed would
# give out 0 and lse -inf here.
@needs_gpu
@pytest.mark.parametrize("offset", [1.5, 6.0])
@pytest.mark.parametrize("softcap", [30.0, 50.0, 54.7, 54.8, 80.0])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_rows_of_only_very_negative_scores(head_dim, causal, softcap, offset):
    # 54.8 and 80 lie above the fixed-max limit: the running-max kernels on the same rows.
    dtype = gpu_dtype_or_skip(head_dim)
    q, k, v, _ = gpu_qkv(2, 300, 300, 4, 2, head_dim, dtype, seed=int(softcap * 10 + offset))
    q, k = (0.3 * q - offset).to(dtype), (0.3 * k + offset).to(dtype)
    check_gpu_forward(q, k, v, causal=causal, softcap=softcap)


@needs_gpu
@pytest.mark.parametrize("softcap", [1.0, 30.0, 54.7, 80.0])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_rows_that_see_one_key_return_its_value_exactly(head_dim, softcap):
    # The softmax of one key is 1, so O = v to the bit, and the backward's D = rowsum(dO O) = dP
    # gives dq = 0. The fixed-max kernels (caps up to 54.76) round every p to 16 bits for P V; O
    # normalised by the fp32 sum of p came out an ulp off v on ~10% of such rows (session 49), so O's
    # normaliser is the 16-bit P's own sum. Rows of one key: seqlen_k 1, and a causal first row.
    import torch

    dtype = gpu_dtype_or_skip(head_dim)
    q, k, v, _ = gpu_qkv(2, 17, 1, 4, 2, head_dim, dtype, seed=int(softcap) + head_dim, amplitude=3.0)
    out = hopattn.attention(q, k, v, softcap=softcap)
    assert torch.equal(out, v.repeat_interleave(2, dim=2).expand_as(out))
    q, k, v, _ = gpu_qkv(2, 300, 300, 4, 2, head_dim, dtype, seed=int(softcap) + head_dim + 1, amplitude=3.0)
    out = hopattn.attention(q, k, v, causal=True, softcap=softcap)
    assert torch.equal(out[:, 0], v[:, 0].repeat_interleave(2, dim=1))


@needs_gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=GPU_IDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_gradients_match_autograd_of_the_float64_reference(head_dim, case):
    dtype = gpu_dtype_or_skip(head_dim, backward=True)
    batch, sq, sk, hq, hkv, causal, window, softcap, amplitude = case
    q, k, v, dout = gpu_qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq * 3 + sk, amplitude=amplitude)
    check_gpu_gradients(q, k, v, dout, causal=causal, window_size=window, softcap=softcap)


@needs_gpu
def test_gpu_softcap_0_is_the_plain_kernel_bitwise():
    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, dout = gpu_qkv(2, 300, 300, 8, 2, 128, dtype, seed=4)
    results = []
    for kw in ({}, {"softcap": 0.0}, {"softcap": 0}):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out, lse = hopattn.attention(*leaves, causal=True, return_lse=True, deterministic=True, **kw)
        out.backward(dout)
        results.append((out.detach(), lse, *(t.grad for t in leaves)))
    for other in results[1:]:
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), results[0], other):
            assert torch.equal(a, b), name
    capped = hopattn.attention(q, k, v, causal=True, softcap=1.0)
    assert not torch.equal(capped, results[0][0])


@needs_gpu
def test_gpu_softcapped_backward_deterministic_is_bitwise_reproducible():
    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, dout = gpu_qkv(2, 700, 900, 8, 2, 128, dtype, seed=5, amplitude=3.0)
    runs = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        hopattn.attention(*leaves, causal=True, window_size=(200, 0), deterministic=True, softcap=5.0).backward(dout)
        runs.append([t.grad for t in leaves])
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(a, b), name


# (lens_q, lens_k, heads_q, heads_kv, window, causal, softcap): several key tiles, partial tiles, 0 and 1
GPU_VARLEN_CASES = {
    "mixed": ([0, 1, 130, 257, 64, 3], [5, 1, 300, 257, 0, 190], 8, 2, (-1, -1), False, 2.0),
    "causal": ([128, 77, 200, 1000], [128, 77, 300, 1000], 4, 4, (-1, -1), True, 5.0),
    "window": ([300, 17, 127], [120, 1, 1000], 4, 1, (64, 32), False, 1.0),
}


@needs_gpu
@pytest.mark.parametrize("case", list(GPU_VARLEN_CASES))
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_gpu_varlen_forward_and_backward_match_each_sequence(head_dim, case):
    dtype = gpu_dtype_or_skip(head_dim, backward=True)
    lens_q, lens_k, hq, hkv, window, causal, softcap = GPU_VARLEN_CASES[case]
    check_gpu_varlen_per_sequence(case, lens_q, lens_k, hq, hkv, head_dim, dtype, amplitude=2.0, causal=causal,
                                  window_size=window, softcap=softcap)


@needs_gpu
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)], ids=["mha", "gqa"])
def test_gpu_flash_attn_functions_with_softcap_are_hopattns_bitwise(heads):
    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, dout = gpu_qkv(2, 300, 333, *heads, 128, dtype, seed=6, amplitude=2.0)
    results = gpu_outputs_and_gradients(  # bitwise equal
        (lambda a, b, c: fai.flash_attn_func(a, b, c, causal=True, softcap=5.0, deterministic=True),
         lambda a, b, c: hopattn.attention(a, b, c, causal=True, softcap=5.0, deterministic=True)), q, k, v, dout)
    want_out, _ = reference_attention(q, k, v, causal=True, softcap=5.0)
    assert rel_l2(results[0][0], want_out) < REL_L2[str(dtype)]
    # qkvpacked (self-attention) and varlen (one sequence per batch entry)
    qkv = torch.stack([q[:, :300, :heads[1]], k[:, :300], v[:, :300]], dim=2)
    assert torch.equal(fai.flash_attn_qkvpacked_func(qkv, softcap=2.0),
                       hopattn.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], softcap=2.0))
    cu_q = torch.tensor([0, 300, 600], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 333, 666], dtype=torch.int32, device="cuda")
    packed = [t.reshape(-1, *t.shape[2:]) for t in (q, k, v)]
    got = fai.flash_attn_varlen_func(*packed, cu_q, cu_k, 300, 333, causal=True, softcap=5.0)
    assert torch.equal(got, hopattn.varlen_attention(*packed, cu_q, cu_k, 300, 333, causal=True, softcap=5.0))
    assert rel_l2(got.view(q.shape), want_out) < REL_L2[str(dtype)]


@needs_gpu
def test_gpu_opcheck_with_softcap():
    from hopattn import torch_ops

    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, dout = gpu_qkv(2, 77, 130, 4, 2, 128, dtype, seed=6, amplitude=2.0)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch_ops.fwd, (q, k, v, True, None, True), {"softcap": 5.0})
    with torch.no_grad():
        out, lse = torch_ops.fwd(q, k, v, True, None, True, -1, -1, 5.0)
    torch.library.opcheck(torch_ops.bwd, (dout, q.detach(), k.detach(), v.detach(), out, lse, True, None, True, -1, -1,
                                          5.0))
    cu_q = torch.tensor([0, 77, 154], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 130, 260], dtype=torch.int32, device="cuda")
    packed = [t.detach().reshape(-1, *t.shape[2:]).requires_grad_() for t in (q, k, v)]
    torch.library.opcheck(torch_ops.fwd_varlen, (*packed, cu_q, cu_k, 77, 130), {"causal": True, "softcap": 5.0})


@needs_gpu
def test_gpu_compile_fullgraph_with_softcap_forward_and_backward():
    from torch._dynamo.testing import CompileCounterWithBackend

    dtype = gpu_dtype_or_skip(128, backward=True)
    q, k, v, _ = gpu_qkv(2, 256, 256, 4, 2, 128, dtype, seed=7, amplitude=2.0)

    def block(q, k, v, w):
        return (hopattn.attention(q * w, k, v, causal=True, softcap=5.0).float() * w.float()).sum(dim=-1)

    w = (1 + 0.1 * torch.randn(128, device="cuda")).to(dtype).requires_grad_()
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)] + [w]
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    y = compiled(*leaves)
    y.square().mean().backward()
    assert counter.frame_count == 1
    assert any(n.target is torch.ops.hopattn.fwd.default for n in counter.graphs[0].graph.nodes)
    compiled_grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    y_eager = block(*leaves)
    y_eager.square().mean().backward()
    assert rel_l2(y, y_eager) < 1e-2
    for name, got, t in zip("qkvw", compiled_grads, leaves):
        assert rel_l2(got, t.grad) < 2e-2, name
    torch._dynamo.reset()
