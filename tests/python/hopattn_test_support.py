# Shared by the binding tests: load libhopattn.so or skip the calling module (fail instead under
# HOPATTN_REQUIRE_LIBRARY=1 / --require-library), a float64 numpy attention and backward to compare
# with (causal and sliding-window masks), and the torch GPU tests' kernel choice, random inputs and
# error measure (torch imported only by those).
import os

import numpy as np
import pytest

import hopattn


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


def naive_attention(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1)):
    """The textbook formula in float64: returns out (b, sq, hq, d) and lse (b, hq, sq).

    Head h of q reads kv head h // (hq // hkv); a row that sees no key gives out 0, lse -inf."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    group = heads_q // heads_kv
    k = np.repeat(k, group, axis=2)
    v = np.repeat(v, group, axis=2)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
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


def naive_backward(q, k, v, dout, causal=False, softmax_scale=None, window_size=(-1, -1)):
    """The textbook backward in float64, written independently of the library:
    P = softmax(scale Q K^T) (the causal/window mask; a row with no visible key has P = 0),
    D = rowsum(dO * O), dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = scale dS K,
    dK = scale dS^T Q; dK/dV summed over the query heads of each GQA group. Returns dq, dk, dv, out."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    group = heads_q // heads_kv
    kr = np.repeat(k, group, axis=2)  # query head h reads kv head h // group
    vr = np.repeat(v, group, axis=2)
    visible = visible_keys(seqlen_q, seqlen_k, causal, window_size)
    scores = np.einsum("bqhd,bkhd->bhqk", q, kr) * scale
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
    dq = scale * np.einsum("bhqk,bkhd->bqhd", ds, kr)
    dk = scale * np.einsum("bhqk,bqhd->bkhd", ds, q)
    dk = dk.reshape(batch, seqlen_k, heads_kv, group, head_dim).sum(axis=3)
    dv = dv.reshape(batch, seqlen_k, heads_kv, group, head_dim).sum(axis=3)
    return dq, dk, dv, out


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


def gpu_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, seed=0, device="cuda"):
    """Random q, k, v and dout (batch, seqlen, heads, head_dim), seeded."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(s, h):
        return torch.randn((batch, s, h, head_dim), generator=gen, device=device).to(dtype)

    return rand(seqlen_q, heads_q), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv), rand(seqlen_q, heads_q)


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
