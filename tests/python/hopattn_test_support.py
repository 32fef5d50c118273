# Shared by the binding tests: load libhopattn.so or skip the calling module (fail instead under
# HOPATTN_REQUIRE_LIBRARY=1 / --require-library), a float64 numpy attention and backward to compare
# with (causal and sliding-window masks, softcapping) and the checks built on them, and the torch
# tests' kernel choice, random inputs, float64 torch reference, error measures and tolerances (torch
# imported only by those).
import importlib.util
import os
import pathlib

import numpy as np
import pytest

import hopattn


def load_script_or_skip_module(name):
    """Call at module level: scripts/<name>.py of this checkout as a module. A GPU pack
    (scripts/gpu-pack.sh) carries tests/ and bench/ but not scripts/: the calling module is skipped."""
    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    if not path.exists():
        pytest.skip(f"scripts/{name}.py is not in this tree", allow_module_level=True)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_library_or_skip_module():
    """Call at module level: loads the library; skips the module (or fails, if required) when absent."""
    try:
        hopattn.build_info()
    except hopattn.LibraryNotFoundError as e:
        if os.environ.get("HOPATTN_REQUIRE_LIBRARY", "") not in ("", "0"):
            pytest.fail(f"HOPATTN_REQUIRE_LIBRARY is set but the library did not load: {e}", pytrace=False)
        pytest.skip(f"libhopattn.so not available: {e}", allow_module_level=True)


def causal_visible(seqlen_q, seqlen_k):
    """(seqlen_q, seqlen_k) bool: bottom-right aligned causal mask, query i sees key j iff j <= i + sk - sq."""
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    return j <= i + (seqlen_k - seqlen_q)


def window_visible(seqlen_q, seqlen_k, window_size=(-1, -1)):
    """(seqlen_q, seqlen_k) bool: FlashAttention's sliding window, bottom-right aligned like causal:
    query i sees key j iff i + sk - sq - left <= j <= i + sk - sq + right, where a bound of -1
    leaves that side unbounded ((-1, -1): everything visible)."""
    left, right = window_size
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    diagonal = i + (seqlen_k - seqlen_q)
    visible = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if left >= 0:
        visible &= j >= diagonal - left
    if right >= 0:
        visible &= j <= diagonal + right
    return visible


def visible_keys(seqlen_q, seqlen_k, causal=False, window_size=(-1, -1)):
    """The mask of causal (if asked) and window_size together, written independently of the library."""
    visible = window_visible(seqlen_q, seqlen_k, window_size)
    return visible & causal_visible(seqlen_q, seqlen_k) if causal else visible


def naive_attention(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0):
    """The textbook formula in float64: returns out (b, sq, hq, d) and lse (b, hq, sq).

    Head h of q reads kv head h // (hq // hkv); with softcap > 0 each score s = scale q.k becomes
    softcap * tanh(s / softcap) before the mask; a row that sees no key gives out 0, lse -inf."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    group = heads_q // heads_kv
    k = np.repeat(k, group, axis=2)
    v = np.repeat(v, group, axis=2)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    visible = visible_keys(seqlen_q, seqlen_k, causal, window_size)
    scores = np.where(visible, scores, -np.inf)
    row_has_key = visible.any(axis=1)  # (sq,)
    row_max = np.where(row_has_key[:, None], scores.max(axis=-1, keepdims=True, initial=-np.inf), 0.0)
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp(scores - row_max).sum(axis=-1)) + row_max[..., 0]
    probs = np.where(row_has_key[:, None], np.exp(scores - np.where(row_has_key, lse, 0.0)[..., None]), 0.0)
    out = np.einsum("bhqk,bkhd->bqhd", probs, v)
    lse = np.where(row_has_key, lse, -np.inf)
    return out, lse


def naive_backward(q, k, v, dout, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0):
    """The textbook backward in float64, written independently of the library:
    S = scale Q K^T, C = S or, with softcap > 0, softcap tanh(S / softcap); P = softmax(C) (the
    causal/window mask; a row with no visible key has P = 0), D = rowsum(dO * O), dV = P^T dO,
    dP = dO V^T, dC = P * (dP - D), dS = dC (times 1 - tanh(S / softcap)^2 with softcap),
    dQ = scale dS K, dK = scale dS^T Q; dK/dV summed over the query heads of each GQA group.
    Returns dq, dk, dv, out."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    group = heads_q // heads_kv
    kr = np.repeat(k, group, axis=2)  # query head h reads kv head h // group
    vr = np.repeat(v, group, axis=2)
    visible = visible_keys(seqlen_q, seqlen_k, causal, window_size)
    scores = np.einsum("bqhd,bkhd->bhqk", q, kr) * scale
    if softcap > 0:
        tanh = np.tanh(scores / softcap)
        scores = softcap * tanh
    scores = np.where(visible, scores, -np.inf)
    row_has_key = visible.any(axis=1)[:, None]  # (sq, 1)
    safe = np.where(row_has_key, scores, 0.0)  # rows without keys: finite placeholder, zeroed below
    safe = safe - safe.max(axis=-1, keepdims=True, initial=-np.inf) if seqlen_k else safe
    p = np.where(visible, np.exp(safe), 0.0)
    denom = p.sum(axis=-1, keepdims=True)
    p = np.where(row_has_key, p / np.where(denom > 0, denom, 1.0), 0.0)
    out = np.einsum("bhqk,bkhd->bqhd", p, vr)
    d = np.einsum("bqhd,bqhd->bhq", dout, out)
    dv = np.einsum("bhqk,bqhd->bkhd", p, dout)
    dp = np.einsum("bqhd,bkhd->bhqk", dout, vr)
    ds = p * (dp - d[..., None])
    if softcap > 0:
        ds = ds * (1.0 - tanh * tanh)
    dq = scale * np.einsum("bhqk,bkhd->bqhd", ds, kr)
    dk = scale * np.einsum("bhqk,bqhd->bkhd", ds, q)
    dk = dk.reshape(batch, seqlen_k, heads_kv, group, head_dim).sum(axis=3)
    dv = dv.reshape(batch, seqlen_k, heads_kv, group, head_dim).sum(axis=3)
    return dq, dk, dv, out


# --- numpy tests: inputs and checks against the float64 formula ------------------------------------


# Forward (out) tolerances against naive_attention, by input dtype.
NUMPY_TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=2e-3)}


def numpy_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype=np.float32, seed=0, amplitude=1.0):
    """Random q (times amplitude, e.g. so that the scores reach a softcap), k, v and dout (q's
    shape), seeded."""
    rng = np.random.default_rng(seed)

    def rand(s, h, a=1.0):
        return (a * rng.standard_normal((batch, s, h, head_dim))).astype(dtype)

    return (rand(seqlen_q, heads_q, amplitude), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv),
            rand(seqlen_q, heads_q))


def entry_point_calls(flash_attn=False, **kw):
    """{name: call} of hopattn's numpy entry points (and, with flash_attn, flash_attn_interface's)
    with the keyword arguments kw on small arrays: for argument checks made before any array is
    looked at (no library needed for those)."""
    from hopattn import flash_attn_interface as fai

    q, k, v, dout = numpy_qkv(1, 3, 3, 1, 1, 8)
    cu = np.array([0, 3], np.int32)
    calls = {
        "attention": lambda: hopattn.attention(q, k, v, **kw),
        "attention_backward": lambda: hopattn.attention_backward(q, k, v, dout, **kw),
        "attention_reference": lambda: hopattn.attention_reference(q, k, v, **kw),
        "varlen_attention": lambda: hopattn.varlen_attention(q[0], k[0], v[0], cu, cu, 3, 3, **kw),
    }
    if flash_attn:
        calls.update({
            "flash_attn_func": lambda: fai.flash_attn_func(q, k, v, **kw),
            "flash_attn_qkvpacked_func": lambda: fai.flash_attn_qkvpacked_func(np.stack([q, k, v], axis=2), **kw),
            "flash_attn_varlen_func": lambda: fai.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 3, 3, **kw),
        })
    return calls


def blind_rows(seqlen_q, seqlen_k, causal=False, window_size=(-1, -1)):
    """(seqlen_q,) bool: the rows that see no key."""
    return ~visible_keys(seqlen_q, seqlen_k, causal, window_size).any(axis=1)


def check_numpy_forward(q, k, v, **kw):
    """hopattn.attention(q, k, v, return_lse=True, **kw) (numpy: the CPU reference) against
    naive_attention(q, k, v, **kw): out within NUMPY_TOLERANCE, lse within 1e-5 (-inf too); rows
    that see no key give out exactly 0 and lse -inf. Returns out, lse and those rows."""
    out, lse = hopattn.attention(q, k, v, return_lse=True, **kw)
    want_out, want_lse = naive_attention(q, k, v, **kw)
    np.testing.assert_allclose(out.astype(np.float64), want_out, **NUMPY_TOLERANCE[q.dtype.type])
    np.testing.assert_allclose(lse.astype(np.float64), want_lse, rtol=1e-5, atol=1e-5)  # -inf must match too
    blind = blind_rows(q.shape[1], k.shape[1], kw.get("causal", False), kw.get("window_size", (-1, -1)))
    assert np.all(out[:, blind] == 0) and np.all(np.isneginf(lse[:, :, blind]))
    return out, lse, blind


def check_numpy_gradients(q, k, v, dout, **kw):
    """hopattn.attention_backward(q, k, v, dout, **kw) (the CPU reference backward) against
    naive_backward: finite, within rtol 1e-5 and atol 1e-5 * max(1, the largest |gradient|).
    Returns dq, dk, dv."""
    grads = hopattn.attention_backward(q, k, v, dout, **kw)
    want = naive_backward(q, k, v, dout, **kw)
    for name, got, w in zip(("dq", "dk", "dv"), grads, want[:3]):
        assert np.all(np.isfinite(got)), name
        atol = 1e-5 * max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(got.astype(np.float64), w, rtol=1e-5, atol=atol, err_msg=name)
    return grads


def check_finite_differences(loss, inputs, grads, entries, eps, tol):
    """Central differences (loss at x + eps - loss at x - eps) / (2 eps) of loss(**inputs) at the
    indices entries[name] of each input against grads (in inputs' order): |fd - grad| <= tol *
    max(1, |fd|)."""
    for (name, x), grad in zip(inputs.items(), grads):
        for idx in entries[name]:
            plus, minus = x.copy(), x.copy()
            plus[idx] += eps
            minus[idx] -= eps
            fd = (loss(**{**inputs, name: plus}) - loss(**{**inputs, name: minus})) / (2 * eps)
            assert abs(fd - float(grad[idx])) <= tol * max(1.0, abs(fd)), (name, idx, fd, float(grad[idx]))


def cu_seqlens(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def sequences(cu_q, cu_k, used_q, used_k):
    """(rows, keys) of each sequence: the slices of the used tokens."""
    for b in range(len(cu_q) - 1):
        sq = cu_q[b + 1] - cu_q[b] if used_q is None else used_q[b]
        sk = cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b]
        yield slice(int(cu_q[b]), int(cu_q[b] + sq)), slice(int(cu_k[b]), int(cu_k[b] + sk))


def packed_qkv(lens_q, lens_k, used_q=None, used_k=None, dtype=np.float32, seed=0, amplitude=1.0):
    """Packed varlen inputs, 4 query heads, 2 kv heads, head_dim 16: q (times amplitude), k, v,
    cu_seqlens_q, cu_seqlens_k and [seqused_q, seqused_k] (int32 arrays, or None)."""
    rng = np.random.default_rng(seed)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    q = (amplitude * rng.standard_normal((cu_q[-1], 4, 16))).astype(dtype)
    k = rng.standard_normal((cu_k[-1], 2, 16)).astype(dtype)
    v = rng.standard_normal((cu_k[-1], 2, 16)).astype(dtype)
    used = [None if u is None else np.array(u, np.int32) for u in (used_q, used_k)]
    return q, k, v, cu_q, cu_k, used


def check_numpy_varlen(q, k, v, cu_q, cu_k, used_q, used_k, **kw):
    """hopattn.varlen_attention (max lengths 20, return_lse, **kw) equals hopattn.attention on each
    sequence alone bitwise (out and lse), and naive_attention on it within NUMPY_TOLERANCE."""
    out, lse = hopattn.varlen_attention(q, k, v, cu_q, cu_k, 20, 20, seqused_q=used_q, seqused_k=used_k,
                                        return_lse=True, **kw)
    for rows, keys in sequences(cu_q, cu_k, used_q, used_k):
        if rows.stop != rows.start:
            want_out, want_lse = hopattn.attention(q[None, rows], k[None, keys], v[None, keys], return_lse=True, **kw)
            np.testing.assert_array_equal(out[rows], want_out[0])
            np.testing.assert_array_equal(lse[:, rows], want_lse[0])
        formula, _ = naive_attention(q[None, rows], k[None, keys], v[None, keys], **kw)
        np.testing.assert_allclose(out[rows], formula[0], **NUMPY_TOLERANCE[np.float32])


def op_route():
    """A context in which hopattn.attention takes its custom-op route (torch.ops.hopattn.fwd)
    instead of the direct one: a TorchFunctionMode that changes nothing. Any active function mode
    other than torch.device(...) sends attention to the op, as a user's own mode would. Imports
    torch (only call it from tests that have it)."""
    from torch.overrides import TorchFunctionMode

    class PassThroughMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return PassThroughMode()


# --- torch GPU tests -------------------------------------------------------------------------------


def gpu_kernel_pair(want_backward=True, prefer_head_dim=None):
    """(torch dtype, head_dim) of a kernel in this build (with a backward kernel too, if asked):
    bf16 first, then prefer_head_dim, then the smallest head dim. Skips when there is none."""
    import torch

    require_library_or_skip_module()
    kernels = hopattn.build_info()["kernels"]
    pairs = {(d, h) for kind, d, h in kernels if kind == "fwd"}
    if want_backward:
        pairs &= {(d, h) for kind, d, h in kernels if kind == "bwd"}
    if not pairs:
        pytest.skip("no suitable kernels in this build")
    dtype_name, head_dim = sorted(pairs, key=lambda x: (x[0] != "bf16", x[1] != prefer_head_dim, x[1]))[0]
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name], head_dim


def gpu_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, seed=0, device="cuda", amplitude=1.0):
    """Random q (times amplitude), k, v and dout (batch, seqlen, heads, head_dim), seeded."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(s, h, a=1.0):
        return (a * torch.randn((batch, s, h, head_dim), generator=gen, device=device)).to(dtype)

    return (rand(seqlen_q, heads_q, amplitude), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv),
            rand(seqlen_q, heads_q))


def rel_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def cpu_qkv(batch=2, seqlen_q=5, seqlen_k=7, heads_q=4, heads_kv=2, head_dim=64, dtype=None, requires_grad=False,
            seed=0):
    """Random CPU q, k, v (batch, seqlen, heads, head_dim), seeded; float32 unless dtype is given."""
    import torch

    q, k, v, _ = gpu_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype or torch.float32, seed, "cpu")
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def optional_torch():
    """(torch or None, has an sm_90 GPU, needs_torch marker, needs_gpu marker) for test modules
    that also run without torch."""
    try:
        import torch
    except ImportError:
        torch = None
    has_sm90 = torch is not None and torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
    needs_gpu = pytest.mark.skipif(not has_sm90, reason="needs torch and an sm_90 GPU")
    return torch, has_sm90, needs_torch, needs_gpu


def custom_op_marker(torch):
    """(whether torch (None: not installed) has torch.library.custom_op, the needs_custom_op marker)."""
    has_custom_op = torch is not None and hasattr(torch.library, "custom_op")
    return has_custom_op, pytest.mark.skipif(not has_custom_op, reason="needs torch 2.4+ (torch.library.custom_op)")


# --- torch: the float64 reference, error measures and tolerances -------------------------------------


# rel-L2 bounds of bf16/fp16 kernel outputs against reference_attention (by str(dtype)), and of
# their gradients against its autograd.
REL_L2 = {"torch.bfloat16": 1e-2, "torch.float16": 3e-3}
GRAD_REL_L2 = 2e-2


def rel_err(got, want, floor):
    """rel-L2, against floor where want is (near) zero (e.g. a gradient that vanishes exactly)."""
    denom = max(want.double().norm().item(), floor)
    return (got.double() - want.double()).norm().item() / denom


def reference_attention(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0):
    """Differentiable float64 attention on (b, s, h, d) tensors (any device; q's head h reads kv
    head h // (hq // hkv)) under the causal/window mask, each score s = scale q.k capped to softcap
    * tanh(s / softcap) when softcap > 0; a row that sees no key gives out 0, lse -inf and zero
    gradients. Returns out (q's layout, float64) and lse (b, hq, sq, float64)."""
    import torch

    sq, heads_q, head_dim = q.shape[1:]
    sk, heads_kv = k.shape[1], k.shape[2]
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    mask = torch.from_numpy(visible_keys(sq, sk, causal, window_size)).to(q.device)
    has_key = mask.any(dim=1)[:, None]
    kf, vf = (t.double().repeat_interleave(group, dim=2) for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), kf) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf where no key
    scores = torch.where(has_key, scores, torch.zeros_like(scores))  # finite placeholder for blind rows
    probs = torch.softmax(scores, dim=-1) * has_key
    return torch.einsum("bhqk,bkhd->bqhd", probs, vf), lse


# --- torch on the CPU: the ops' CPU kernels and torch.compile ----------------------------------------


def torch_qkv(arrays, requires_grad=True):
    """Torch views of numpy q, k, v (leaves, requiring grad if asked) and dout."""
    import torch

    q, k, v = (torch.from_numpy(x).requires_grad_(requires_grad) for x in arrays[:3])
    return q, k, v, torch.from_numpy(arrays[3])


def _op_options(kw):
    """The ops' trailing positional arguments for kw's window_size (and softcap, when kw has one),
    and opcheck's keyword arguments for them with causal."""
    window = kw["window_size"]
    extra = (kw["softcap"],) if "softcap" in kw else ()
    named = {"causal": kw["causal"], "window_left": window[0], "window_right": window[1]}
    named.update({"softcap": kw["softcap"]} if extra else {})
    return (*window, *extra), named


def check_op_cpu_kernels(arrays, **kw):
    """hopattn::fwd's CPU kernel on torch views of the numpy (q, k, v, dout) arrays, and autograd
    through it (hopattn::bwd's), with causal, window_size and (if given) softcap = kw, bitwise
    against hopattn.attention / attention_backward on the arrays; then opcheck of hopattn::fwd.
    Returns the torch q, k, v, dout and the op's out and lse."""
    import torch

    from hopattn import torch_ops

    options, named = _op_options(kw)
    q, k, v, dout = torch_qkv(arrays)
    out, lse = torch_ops.fwd(q, k, v, kw["causal"], None, False, *options)
    want_out, want_lse = hopattn.attention(*arrays[:3], return_lse=True, **kw)
    np.testing.assert_array_equal(out.detach().numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    grads = torch.autograd.grad(out, (q, k, v), dout)  # hopattn::bwd with the forward's options
    for name, got, want in zip(("dq", "dk", "dv"), grads, hopattn.attention_backward(*arrays, **kw)):
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
    torch.library.opcheck(torch_ops.fwd, (q, k, v), named)
    return q, k, v, dout, out, lse


def check_varlen_op_cpu_per_sequence(q_np, k_np, v_np, cu_q, cu_k, used_q, used_k, **kw):
    """Autograd through hopattn::fwd_varlen's CPU kernel (max lengths 20; with causal, window_size
    and (if given) softcap = kw) runs hopattn::bwd_varlen's CPU kernel, the dense CPU backward on
    each sequence: its gradients (dout random, seed 11) bitwise against hopattn.attention_backward
    on each sequence alone. Returns the torch q, k, v and the op's index arguments."""
    import torch

    from hopattn import torch_ops

    options, _ = _op_options(kw)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in (q_np, k_np, v_np))
    used = [None if u is None else torch.from_numpy(u) for u in (used_q, used_k)]
    index = (torch.from_numpy(cu_q), torch.from_numpy(cu_k), 20, 20, *used)
    out, _ = torch_ops.fwd_varlen(q, k, v, *index, kw["causal"], None, False, False, *options)
    dout_np = np.random.default_rng(11).standard_normal(q_np.shape).astype(np.float32)
    grads = torch.autograd.grad(out, (q, k, v), torch.from_numpy(dout_np))
    want = [np.zeros_like(x) for x in (q_np, k_np, v_np)]
    for rows, keys in sequences(cu_q, cu_k, used_q, used_k):
        if rows.stop == rows.start or keys.stop == keys.start:
            continue
        g = hopattn.attention_backward(q_np[None, rows], k_np[None, keys], v_np[None, keys], dout_np[None, rows], **kw)
        want[0][rows], want[1][keys], want[2][keys] = g[0][0], g[1][0], g[2][0]
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        np.testing.assert_array_equal(got.numpy(), w, err_msg=name)
    return q, k, v, index


def compile_fullgraph_backward(block, leaves, backend="aot_eager"):
    """torch.compile(block, fullgraph=True) through a counting backend, then the sum of its output
    on leaves backpropagated: one frame compiled. Returns the compiled function, the counter and the
    leaves' gradients (their .grad cleared)."""
    import torch
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    compiled(*leaves).sum().backward()
    assert counter.frame_count == 1
    grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    return compiled, counter, grads


def check_op_route_gradients(block, leaves, grads, names="qkvw"):
    """block eager on the op route (the same op): its sum's gradients of leaves equal grads within
    1e-6."""
    import torch

    with op_route():
        block(*leaves).sum().backward()
    for name, got, t in zip(names, grads, leaves):
        torch.testing.assert_close(got, t.grad, rtol=1e-6, atol=1e-6, msg=name)


# --- torch GPU tests: checks against reference_attention ------------------------------------------------


def gpu_dtype_or_skip(head_dim, backward=False):
    """The torch dtype of a forward (and backward) kernel for head_dim in this build, bf16 first."""
    import torch

    require_library_or_skip_module()
    kernels = hopattn.build_info()["kernels"]
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if ("fwd", name, head_dim) in kernels and (not backward or ("bwd", name, head_dim) in kernels):
            return dtype
    pytest.skip(f"no {'fwd+bwd' if backward else 'fwd'} kernel for head_dim {head_dim} in this build")


def _masks(q, k, kw, device):
    """The rows that see no key and the keys no row sees, as bool tensors on device."""
    import torch

    visible = visible_keys(q.shape[1], k.shape[1], kw.get("causal", False), kw.get("window_size", (-1, -1)))
    return torch.from_numpy(~visible.any(axis=1)).to(device), torch.from_numpy(~visible.any(axis=0)).to(device)


def check_gpu_forward(q, k, v, **kw):
    """hopattn.attention(q, k, v, return_lse=True, **kw) against reference_attention(**kw): out
    finite, rel-L2 within REL_L2 (its norm, where the reference is 0), exactly 0 on rows that see no
    key; lse -inf on exactly those rows, within 1e-3 elsewhere; the CUDA reference kernel
    (hopattn.attention_reference) with the same -inf rows, 0 rows and rel-L2 bound. Returns the
    reference kernel's lse and reference_attention's."""
    import torch

    dtype = q.dtype
    out, lse = hopattn.attention(q, k, v, return_lse=True, **kw)
    want_out, want_lse = reference_attention(q, k, v, **kw)
    assert out.shape == q.shape and out.dtype == dtype and torch.isfinite(out).all()
    err = rel_l2(out, want_out) if want_out.norm() > 0 else out.float().norm().item()
    assert err < REL_L2[str(dtype)], f"rel-L2 {err:.3e}"
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))  # rows that see no key: -inf
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[finite].double(), want_lse[finite], rtol=1e-3, atol=1e-3)
    blind, _ = _masks(q, k, kw, q.device)
    assert (out[:, blind] == 0).all()
    ref_out, ref_lse = hopattn.attention_reference(q, k, v, return_lse=True, **kw)
    assert (ref_out[:, blind] == 0).all() and torch.equal(torch.isneginf(ref_lse), torch.isneginf(want_lse))
    if want_out.norm() > 0:
        assert rel_l2(ref_out, want_out) < REL_L2[str(dtype)]
    return ref_lse, want_lse


def check_gpu_gradients(q, k, v, dout, **kw):
    """Gradients of hopattn.attention(q, k, v, **kw) given dout against autograd of
    reference_attention (float64): q's dtype and shapes, finite, rel-L2 (rel_err, floor 1e-3 |dout|)
    within GRAD_REL_L2; dq 0 on rows that see no key, dk = dv = 0 on keys no row sees."""
    import torch

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    hopattn.attention(*leaves, **kw).backward(dout)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference_attention(*ref, **kw)[0].backward(dout.double())
    floor = dout.float().norm().item() * 1e-3
    for name, got, want, like in zip(("dq", "dk", "dv"), (t.grad for t in leaves), (t.grad for t in ref), (q, k, v)):
        assert got.shape == like.shape and got.dtype == q.dtype and torch.isfinite(got).all(), name
        err = rel_err(got, want, floor)
        assert err <= GRAD_REL_L2, f"{name}: rel-L2 {err:.3e}"
    blind, unseen = _masks(q, k, kw, q.device)
    assert (leaves[0].grad[:, blind] == 0).all()
    assert (leaves[1].grad[:, unseen] == 0).all() and (leaves[2].grad[:, unseen] == 0).all()


def check_gpu_varlen_per_sequence(case, lens_q, lens_k, heads_q, heads_kv, head_dim, dtype, amplitude=1.0, **kw):
    """hopattn.varlen_attention (return_lse, **kw) on random packed GPU inputs (seeded by the number
    of sequences; q times amplitude), forward and backward, against reference_attention (float64) on
    each nonempty sequence: out within REL_L2 (0 where it is), lse -inf on the same rows, gradients
    within GRAD_REL_L2 (rel_err, floor 1e-3 |dout|). case labels the failures."""
    import torch

    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    gen = torch.Generator(device="cuda").manual_seed(len(lens_q))
    q, k, v = ((a * torch.randn((int(cu[-1]), h, head_dim), generator=gen, device="cuda")).to(dtype)
               for cu, h, a in ((cu_q, heads_q, amplitude), (cu_k, heads_kv, 1.0), (cu_k, heads_kv, 1.0)))
    dout = torch.randn(q.shape, generator=gen, device="cuda").to(dtype)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse = hopattn.varlen_attention(*leaves, torch.from_numpy(cu_q).cuda(), torch.from_numpy(cu_k).cuda(),
                                        max(lens_q), max(lens_k), return_lse=True, **kw)
    out.backward(dout)
    floor = dout.float().norm().item() * 1e-3
    for rows, keys in sequences(cu_q, cu_k, None, None):
        if rows.stop == rows.start:
            continue
        ref = [t.detach()[None, s].double().requires_grad_() for t, s in ((q, rows), (k, keys), (v, keys))]
        want_out, want_lse = reference_attention(*ref, **kw)
        want_out.backward(dout[None, rows].double())
        if want_out.norm() > 0:
            assert rel_l2(out[rows], want_out[0]) < REL_L2[str(dtype)], (case, rows)
        else:
            assert (out[rows] == 0).all(), (case, rows)
        assert torch.equal(torch.isneginf(lse[:, rows]), torch.isneginf(want_lse[0])), (case, rows)
        for name, leaf, r, s in zip(("dq", "dk", "dv"), leaves, ref, (rows, keys, keys)):
            err = rel_err(leaf.grad[s], r.grad[0], floor)
            assert err <= GRAD_REL_L2, f"{case} {rows} {name}: rel-L2 {err:.3e}"


def gpu_outputs_and_gradients(calls, q, k, v, dout, names=("out", "dq", "dk", "dv")):
    """Each call on fresh leaves of q, k, v, backpropagated with dout: [(out, dq, dk, dv)], checked
    bitwise equal across the calls."""
    import torch

    results = []
    for call in calls:
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = call(*leaves)
        out.backward(dout)
        results.append((out.detach(), *(t.grad for t in leaves)))
    for other in results[1:]:
        for name, a, b in zip(names, results[0], other):
            assert torch.equal(a, b), name
    return results


def fp8_head_dim_and_dtype():
    """A (head_dim, ABI dtype code) with an FP8 kernel in this build, else skip the test."""
    from hopattn import _lib

    for direction, dtype, head_dim in hopattn.build_info()["kernels"]:
        if direction == "fp8":
            return head_dim, {"bf16": _lib.DTYPE_BF16, "fp16": _lib.DTYPE_FP16}[dtype]
    pytest.skip(f"no FP8 kernel in this build ({hopattn.build_info()['instantiations']})")


class FakeTensors:
    """Aligned fake device addresses, a fresh one per tensor (for calls that never launch)."""

    def __init__(self):
        self.next = 1 << 32

    def __call__(self, code, shape):
        from hopattn import _lib

        ptr, self.next = self.next, self.next + (1 << 32)
        return _lib.make_tensor(ptr, code, tuple(shape), _lib._contiguous_strides(shape))
