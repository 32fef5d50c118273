# hopattn's PyTorch custom operators, registered with torch.library when this module is imported:
#
#   torch.ops.hopattn.fwd(q, k, v, causal=False, softmax_scale=None, deterministic=False,
#                         window_left=-1, window_right=-1, softcap=0.0) -> (out, lse)
#   torch.ops.hopattn.bwd(dout, q, k, v, out, lse, causal, softmax_scale, deterministic,
#                         window_left=-1, window_right=-1, softcap=0.0) -> (dq, dk, dv)
#   torch.ops.hopattn.fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
#                                seqused_q=None, seqused_k=None, causal=False, softmax_scale=None,
#                                check_index_values=False, deterministic=False, window_left=-1,
#                                window_right=-1, softcap=0.0) -> (out, lse)
#   torch.ops.hopattn.bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
#                                max_seqlen_k, seqused_q, seqused_k, causal, softmax_scale,
#                                deterministic, window_left=-1, window_right=-1, softcap=0.0)
#                                -> (dq, dk, dv)
#   torch.ops.hopattn.fwd_kvcache(q, k_cache!, v_cache!, cache_seqlens, k=None, v=None, page_table=None,
#                                 causal=False, softmax_scale=None, num_splits=0,
#                                 check_index_values=False, window_left=-1, window_right=-1,
#                                 softcap=0.0) -> (out, lse)
#       (mutates k_cache and v_cache: k/v are appended in place; forward only, no autograd; the
#       window (C ABI 7) is per sequence over its cache after the append; softcap C ABI 8)
#
# window_left/window_right are hopattn.attention's window_size=(left, right), as two ints because
# a schema has no int pairs; appended last with the defaults of "no window" (-1, -1), so graphs and
# callers from before the window keep working. softcap (hopattn.attention's softcap=, 0.0: off)
# comes after them for the same reason. The backward ops take the forward's window and softcap. The
# ops leave softcap's value to the library (finite and >= 0, else InvalidArgumentError naming it);
# hopattn.attention / varlen_attention check it before reaching them.
#
# Being real operators (not Python code around a ctypes call) is what lets torch.compile trace
# them as single graph nodes (no graph break), lets autograd and AOTAutograd see the backward, and
# keeps them capturable in CUDA graphs: outputs and the backward workspace come from torch's
# caching allocator, the kernels go onto torch.cuda.current_stream(), and nothing reads device
# memory on the host or synchronises.
#
# hopattn.attention() runs these ops when torch traces or transforms the call (torch.compile,
# torch.export, fake tensors and other subclasses, dispatch/function modes, functorch, jit.trace);
# a plain eager call goes straight to the same kernel functions (ops._direct_forward /
# _direct_backward, which the CUDA kernels below call too) with less host time per call.
# hopattn.varlen_attention() does the same with the *_varlen ops (varlen._launch / _launch_backward),
# hopattn.attention_with_kvcache() with fwd_kvcache (kvcache._launch).
#
# This module imports torch; hopattn imports it only when attention() first takes the op route (or
# a user imports it, e.g. to make torch.ops.hopattn.* exist before loading a saved graph).
#
# Kernels: CUDA runs the sm90 kernels. CPU runs the library's CPU reference (double accumulation;
# slow, for tests), so the operator machinery (fake tensors, autograd, torch.library.opcheck,
# torch.compile) can be checked on a machine without a GPU. hopattn.attention() still rejects CPU
# tensors: there an accidental CPU tensor is far more likely than a wish for the slow reference.
# The library has no varlen CPU backward: bwd_varlen's CPU kernel runs the dense CPU reference
# backward on each sequence alone (varlen._backward_cpu).
import ctypes
from typing import Optional, Tuple

import torch

from . import _lib, kvcache, ops, varlen

if not hasattr(torch.library, "custom_op"):
    raise ImportError(
        f"hopattn's torch operators need torch >= 2.4 (torch.library.custom_op); found torch {torch.__version__}"
    )

# The library's dtype names, so fake-tensor errors read like the library's own.
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_CUDA_DTYPES = ("bf16", "fp16")  # the sm90 kernels
_CPU_DTYPES = ("bf16", "fp16", "fp32")  # the CPU reference


# --- operators --------------------------------------------------------------------------------------


@torch.library.custom_op("hopattn::fwd", mutates_args=(), device_types="cuda")
def _fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    deterministic: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """out (batch, seqlen_q, heads_q, head_dim) in q's dtype and lse (batch, heads_q, seqlen_q)
    float32; see hopattn.attention. deterministic only reaches the backward (autograd keeps it)."""
    st = ops._direct(torch)
    return ops._direct_forward(st, "hopattn_forward", "hopattn forward", q, k, v, causal, softmax_scale, True,
                               (window_left, window_right), softcap)


@torch.library.custom_op("hopattn::bwd", mutates_args=(), device_types="cuda")
def _bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    softmax_scale: Optional[float],
    deterministic: bool,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (empty_like q, k, v, then written by the sm90 backward) given dout = dL/dout."""
    return ops._direct_backward(ops._direct(torch), q, k, v, out, dout, lse, causal, softmax_scale, deterministic,
                                (window_left, window_right), softcap)


@torch.library.custom_op("hopattn::fwd_varlen", mutates_args=(), device_types="cuda")
def _fwd_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_q: Optional[torch.Tensor] = None,
    seqused_k: Optional[torch.Tensor] = None,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    check_index_values: bool = False,
    deterministic: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """out (total_q, heads_q, head_dim) in q's dtype and lse (heads_q, total_q) float32; see
    hopattn.varlen_attention. deterministic only reaches the backward (autograd keeps it)."""
    return varlen._op_forward(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                              seqused_k, causal, softmax_scale, check_index_values, (window_left, window_right),
                              softcap)


@torch.library.custom_op("hopattn::bwd_varlen", mutates_args=(), device_types="cuda")
def _bwd_varlen(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_q: Optional[torch.Tensor],
    seqused_k: Optional[torch.Tensor],
    causal: bool,
    softmax_scale: Optional[float],
    deterministic: bool,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (zeros_like q, k, v, then written by the sm90 varlen backward) given dout = dL/dout
    of a fwd_varlen call with the same arguments."""
    return varlen._op_backward(torch, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               seqused_q, seqused_k, causal, softmax_scale, deterministic, (window_left, window_right),
                               softcap)


@torch.library.custom_op("hopattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"), device_types="cuda")
def _fwd_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    k: Optional[torch.Tensor] = None,
    v: Optional[torch.Tensor] = None,
    page_table: Optional[torch.Tensor] = None,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    num_splits: int = 0,
    check_index_values: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """out (batch, seqlen_q, heads_q, head_dim) in q's dtype and lse (batch, heads_q, seqlen_q)
    float32, after appending k/v (if given) to k_cache/v_cache in place at cache_seqlens; see
    hopattn.attention_with_kvcache (window_left/window_right: its window_size). Forward only."""
    return kvcache._op_forward(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale,
                               num_splits, check_index_values, (window_left, window_right), softcap=softcap)


# The OpOverloads: what hopattn.attention / varlen_attention call, and what a traced graph records.
fwd = torch.ops.hopattn.fwd.default
bwd = torch.ops.hopattn.bwd.default
fwd_varlen = torch.ops.hopattn.fwd_varlen.default
bwd_varlen = torch.ops.hopattn.bwd_varlen.default
fwd_kvcache = torch.ops.hopattn.fwd_kvcache.default


# --- CPU kernels (the CPU reference) ----------------------------------------------------------------


def _cpu_tensor(name, t):
    return ops._torch_tensor(torch, name, t)


@_fwd.register_kernel("cpu")
def _fwd_cpu(q, k, v, causal=False, softmax_scale=None, deterministic=False, window_left=-1, window_right=-1,
             softcap=0.0):
    _check_shapes(q, k, v)
    out, lse = ops._torch_forward_outputs(torch, q)
    args = _lib.make_fwd_args(
        _cpu_tensor("q", q), _cpu_tensor("k", k), _cpu_tensor("v", v),
        _cpu_tensor("out", out), _cpu_tensor("lse", lse), causal, softmax_scale, (window_left, window_right),
        softcap,
    )
    _lib.check(_lib.load().hopattn_forward_cpu(ctypes.byref(args)), "hopattn CPU reference")
    return out, lse


@_bwd.register_kernel("cpu")
def _bwd_cpu(dout, q, k, v, out, lse, causal, softmax_scale, deterministic, window_left=-1, window_right=-1,
             softcap=0.0):
    _check_shapes(q, k, v)
    dout = ops._torch_dout(torch, dout, q)  # q's dtype, dense rows (autograd may pass expanded grads)
    dq, dk, dv = ops._torch_grad_outputs(torch, q, k, v)
    # out and lse are passed so the library checks them against q; the reference recomputes both.
    args = _lib.make_bwd_args(
        _cpu_tensor("q", q), _cpu_tensor("k", k), _cpu_tensor("v", v), _cpu_tensor("out", out),
        _cpu_tensor("dout", dout), _cpu_tensor("lse", lse),
        _cpu_tensor("dq", dq), _cpu_tensor("dk", dk), _cpu_tensor("dv", dv),
        causal, softmax_scale, deterministic, (window_left, window_right), softcap,
    )
    _lib.check(_lib.load().hopattn_backward_cpu(ctypes.byref(args)), "hopattn CPU reference backward")
    return dq, dk, dv


@_fwd_varlen.register_kernel("cpu")
def _fwd_varlen_cpu(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None, seqused_k=None,
                    causal=False, softmax_scale=None, check_index_values=False, deterministic=False, window_left=-1,
                    window_right=-1, softcap=0.0):
    # The CPU reference always checks the index values: check_index_values has nothing to add.
    return varlen._op_forward(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                              seqused_k, causal, softmax_scale, False, (window_left, window_right), softcap,
                              require_cuda=False)


@_bwd_varlen.register_kernel("cpu")
def _bwd_varlen_cpu(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                    seqused_k, causal, softmax_scale, deterministic, window_left=-1, window_right=-1, softcap=0.0):
    # The dense CPU reference per sequence (it is deterministic anyway); it recomputes out and lse.
    return varlen._op_backward(torch, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               seqused_q, seqused_k, causal, softmax_scale, deterministic, (window_left, window_right),
                               softcap, require_cuda=False)


@_fwd_kvcache.register_kernel("cpu")
def _fwd_kvcache_cpu(q, k_cache, v_cache, cache_seqlens, k=None, v=None, page_table=None, causal=False,
                     softmax_scale=None, num_splits=0, check_index_values=False, window_left=-1, window_right=-1,
                     softcap=0.0):
    # The CPU reference always checks the index values (and ignores num_splits).
    return kvcache._op_forward(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale,
                               num_splits, False, (window_left, window_right), require_cuda=False, softcap=softcap)


# --- fake (meta) implementations: shapes and dtypes for torch.compile ---------------------------------


def _check_shapes(q, k, v):
    """The cheap, metadata-only part of the library's validation, with the library's wording, for
    tracing (the library itself, with every rule, runs when the kernel does). Reads no data."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise _lib.InvalidArgumentError(f"{name}: expected 4 dims {ops._LAYOUT}, got shape {tuple(t.shape)}")
        if t.device != q.device:
            raise _lib.InvalidArgumentError(f"{name}: on device '{t.device}' but q is on '{q.device}'")
    allowed = _CUDA_DTYPES if q.device.type == "cuda" else _CPU_DTYPES
    dtype = _DTYPE_NAMES.get(q.dtype, str(q.dtype))
    if dtype not in allowed:
        raise _lib.UnsupportedError(f"q: dtype {dtype} is not supported on {q.device.type} ({', '.join(allowed)})")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise _lib.InvalidArgumentError(
                f"{name}: dtype {_DTYPE_NAMES.get(t.dtype, str(t.dtype))} differs from q's {dtype}"
            )
    batch, _, heads_q, head_dim = q.shape
    _, seqlen_k, heads_kv, _ = k.shape
    for name, t in (("k", k), ("v", v)):
        if t.shape[0] != batch:
            raise _lib.InvalidArgumentError(f"{name}.sizes[0] (batch)={t.shape[0]} but q has batch {batch}")
        if t.shape[3] != head_dim:
            raise _lib.InvalidArgumentError(f"{name}.sizes[3] (head_dim)={t.shape[3]} but q has head_dim {head_dim}")
    if v.shape[1] != seqlen_k:
        raise _lib.InvalidArgumentError(f"v.sizes[1] (seqlen_k)={v.shape[1]} but k has seqlen_k {seqlen_k}")
    if v.shape[2] != heads_kv:
        raise _lib.InvalidArgumentError(f"v.sizes[2] (heads_kv)={v.shape[2]} but k has heads_kv {heads_kv}")
    if heads_kv == 0:
        if heads_q != 0:
            raise _lib.InvalidArgumentError("k.sizes[2] (heads_kv) is 0 but q has heads")
    elif heads_q % heads_kv != 0:
        raise _lib.InvalidArgumentError(f"heads_q={heads_q} is not a multiple of heads_kv={heads_kv} (GQA/MQA)")


@_fwd.register_fake
def _fwd_fake(q, k, v, causal=False, softmax_scale=None, deterministic=False, window_left=-1, window_right=-1,
              softcap=0.0):
    _check_shapes(q, k, v)
    return ops._torch_forward_outputs(torch, q)


@_bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, causal, softmax_scale, deterministic, window_left=-1, window_right=-1,
              softcap=0.0):
    _check_shapes(q, k, v)
    if tuple(dout.shape) != tuple(q.shape):
        raise _lib.InvalidArgumentError(f"dout: shape {tuple(dout.shape)} differs from q's {tuple(q.shape)}")
    return ops._torch_grad_outputs(torch, q, k, v)


@_fwd_varlen.register_fake
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None, seqused_k=None,
                     causal=False, softmax_scale=None, check_index_values=False, deterministic=False, window_left=-1,
                     window_right=-1, softcap=0.0):
    # Metadata only (no index values exist here): layout, devices and the index tensors' dtype;
    # the library checks the rest when the kernel runs.
    index = varlen._index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    varlen._check_torch(torch, q, k, v, index, require_cuda=False)
    total_q, heads_q, _ = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty((heads_q, total_q), dtype=torch.float32)


@_bwd_varlen.register_fake
def _bwd_varlen_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                     seqused_k, causal, softmax_scale, deterministic, window_left=-1, window_right=-1, softcap=0.0):
    index = varlen._index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    varlen._check_torch(torch, q, k, v, index, require_cuda=False)
    varlen._check_dout(dout, q)
    return varlen._grad_outputs(torch, q, k, v)


@_fwd_kvcache.register_fake
def _fwd_kvcache_fake(q, k_cache, v_cache, cache_seqlens, k=None, v=None, page_table=None, causal=False,
                      softmax_scale=None, num_splits=0, check_index_values=False, window_left=-1, window_right=-1,
                      softcap=0.0):
    # Metadata only: layout, devices and the index tensors' dtype; the library checks the rest (and
    # does the append) when the kernel runs.
    kvcache._check_new(k, v)
    kvcache._check_torch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, require_cuda=False)
    batch, seqlen_q, heads_q, _ = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)


# --- autograd -----------------------------------------------------------------------------------------


def _setup_context(ctx, inputs, output):
    q, k, v, causal, softmax_scale, deterministic, window_left, window_right, softcap = inputs
    out, lse = output
    # Only these five tensors: the backward recomputes the probabilities from lse.
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mark_non_differentiable(lse)
    ctx.causal = causal
    ctx.softmax_scale = softmax_scale
    ctx.deterministic = deterministic
    ctx.window = (window_left, window_right)  # the backward masks exactly what the forward did
    ctx.softcap = softcap  # ...and caps the scores alike


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = bwd(dout, q, k, v, out, lse, ctx.causal, ctx.softmax_scale, ctx.deterministic, *ctx.window,
                     ctx.softcap)
    return dq, dk, dv, None, None, None, None, None, None


_fwd.register_autograd(_backward, setup_context=_setup_context)


def _setup_context_varlen(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, used_q, used_k, causal, softmax_scale, _check_values, deterministic, window_left,
     window_right, softcap) = inputs
    out, lse = output
    # As hopattn::fwd's, plus the index tensors (seqused may be None); the values were checked by
    # the forward (when asked), so the backward does not check them again.
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, used_q, used_k)
    ctx.mark_non_differentiable(lse)
    ctx.varlen_args = (max_q, max_k, causal, softmax_scale, deterministic, window_left, window_right, softcap)


def _backward_varlen(ctx, dout, _dlse):
    q, k, v, out, lse, cu_q, cu_k, used_q, used_k = ctx.saved_tensors
    max_q, max_k, causal, softmax_scale, deterministic, window_left, window_right, softcap = ctx.varlen_args
    dq, dk, dv = bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, used_q, used_k, causal, softmax_scale,
                            deterministic, window_left, window_right, softcap)
    # No gradient for the index tensors, max_seqlen_*, seqused_* and the options.
    return (dq, dk, dv, *(None,) * 13)


_fwd_varlen.register_autograd(_backward_varlen, setup_context=_setup_context_varlen)


# hopattn::fwd_kvcache has no autograd formula (FA3's flash_attn_with_kvcache is forward only):
# hopattn.attention_with_kvcache raises NotImplementedError before reaching the op when a gradient
# is required, and torch's default for a custom op without one refuses the backward.
