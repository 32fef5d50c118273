# Variable-length (packed) batches, FlashAttention-3's varlen API: hopattn.varlen_attention over the
# C ABI's hopattn_forward_varlen_with_workspace / hopattn_backward_varlen (torch CUDA tensors: the sm90 kernels, on
# the current stream; differentiable) and hopattn_forward_varlen_cpu (numpy arrays: the CPU
# reference, forward only: numpy has no autograd). As in ops.py, torch is never imported here.
#
# Python checks only what it needs to build the C struct (array types, the dtypes and devices it
# passes on, int32 contiguous index tensors); the library checks every argument and value and its
# message becomes the exception's, as for hopattn.attention. Two routes, as hopattn.attention's
# (ops.py): a plain eager call goes straight to the library through ctypes (through the
# torch.autograd.Function of _make_direct_function when a gradient is needed); under torch.compile
# and other tracing (fake tensors, subclasses, dispatch/function modes, functorch, jit.trace) the
# call is the custom op torch.ops.hopattn.fwd_varlen (torch_ops.py), whose autograd runs
# hopattn::bwd_varlen; their CUDA kernels are _launch and _launch_backward below.
import ctypes
import functools

from . import _lib
from .ops import (
    NO_WINDOW,
    _check_int64,
    _check_numpy_inputs,
    _check_scale,
    _check_softcap,
    _check_torch_inputs,
    _check_window,
    _direct,
    _direct_autograd,
    _is_numpy_array,
    _numpy_tensor,
    _only_device_modes,
    _torch_dout,
    _torch_module_of,
    _torch_ops_module,
    _torch_tensor,
    _workspace,
)

VARLEN_LAYOUT = "(total_tokens, heads, head_dim)"


def _check_index(name, t, is_int32, is_contiguous):
    """cu_seqlens / seqused are read as packed int32 vectors."""
    if not is_int32:
        raise _lib.InvalidArgumentError(f"{name}: dtype must be int32, got {t.dtype}")
    if not is_contiguous:
        raise _lib.InvalidArgumentError(f"{name} must be contiguous (a packed int32 vector)")


def _index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k):
    return {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k, "seqused_q": seqused_q, "seqused_k": seqused_k}


def _args(tensor, q, k, v, out, lse, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, check_index_values,
          window, softcap=0.0):
    """HopattnVarlenFwdArgs; tensor(name, x, code=None) makes one HopattnTensor (ops._numpy_tensor,
    or ops._torch_tensor bound to torch). Absent seqused (None) and lse (None) are left out; window
    is a (left, right) pair (ops._check_window), applied per sequence; softcap a float
    (ops._check_softcap), 0.0 for none."""
    idx = {name: None if t is None else tensor(name, t, _lib.DTYPE_INT32) for name, t in index.items()}
    return _lib.make_varlen_fwd_args(
        tensor("q", q), tensor("k", k), tensor("v", v), tensor("out", out),
        None if lse is None else tensor("lse", lse),
        idx["cu_seqlens_q"], idx["cu_seqlens_k"], idx["seqused_q"], idx["seqused_k"],
        max_seqlen_q, max_seqlen_k, causal, softmax_scale, check_index_values, window, softcap,
    )


# --- numpy: the CPU reference ---------------------------------------------------------------------


def _run_numpy(q, k, v, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, return_lse, window, softcap=0.0):
    import numpy as np

    _check_numpy_inputs((("q", q), ("k", k), ("v", v)), 3, VARLEN_LAYOUT)
    for name, a in index.items():
        if a is None:
            continue
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray (int32) like q, got {type(a).__name__}")
        _check_index(name, a, a.dtype == np.int32, a.flags.c_contiguous)
    total_q, heads_q, _ = q.shape
    out = np.empty(q.shape, dtype=q.dtype)
    lse = np.empty((heads_q, total_q), dtype=np.float32) if return_lse else None
    # The CPU reference reads (and checks) the index values itself: check_index_values is moot here.
    args = _args(_numpy_tensor, q, k, v, out, lse, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, False,
                 window, softcap)
    _lib.check(_lib.load().hopattn_forward_varlen_cpu(ctypes.byref(args)), "hopattn varlen CPU reference")
    return (out, lse) if return_lse else out


# --- torch ----------------------------------------------------------------------------------------


def _check_torch(torch, q, k, v, index, require_cuda=True):
    """q, k, v: dense CUDA tensors of 3 dims on one device; the index tensors int32, contiguous, on
    q's device (the kernel reads them there). require_cuda=False (the custom op's CPU kernel and
    fake implementation) accepts any one device."""
    if require_cuda:
        _check_torch_inputs(torch, q, k, v, 3, VARLEN_LAYOUT)
    else:
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 3:
                raise _lib.InvalidArgumentError(f"{name}: expected 3 dims {VARLEN_LAYOUT}, got shape {tuple(t.shape)}")
            if t.device != q.device:
                raise _lib.InvalidArgumentError(f"{name}: on device '{t.device}' but q is on '{q.device}'")
    for name, t in index.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor (int32) like q, got {type(t).__name__}")
        if t.device != q.device:
            raise _lib.InvalidArgumentError(f"{name}: on device '{t.device}' but q is on '{q.device}'")
        _check_index(name, t, t.dtype == torch.int32, t.is_contiguous())


def _plain_eager(st, tensors):
    """The direct route's condition, as hopattn.attention tests it (see ops.py): plain tensors,
    nothing tracing, transforming or intercepting torch calls (a torch.device(...) mode aside,
    which only fills in devices that _launch names anyway)."""
    T = st.Tensor
    return (
        all(t is None or type(t) is T for t in tensors)
        and not st.dispatch_modes()
        and not st.functorch()
        and st.jit_tracing() is None
        and (not st.function_modes() or _only_device_modes(st))
    )


def _launch(torch, q, k, v, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, check_index_values, with_lse,
            window, softcap=0.0):
    """out (total_q, heads_q, head_dim), contiguous in q's dtype, and with with_lse lse (heads_q,
    total_q) float32, from hopattn_forward_varlen on q's device and its current stream (nothing
    synchronises unless check_index_values), or from the CPU reference for CPU tensors (the custom
    op's CPU kernel). Inputs already checked by _check_torch."""
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32) if with_lse else None
    args = _args(functools.partial(_torch_tensor, torch), q, k, v, out, lse, index, max_seqlen_q, max_seqlen_k, causal,
                 softmax_scale, check_index_values, window, softcap)
    if q.device.type == "cpu":
        _lib.check(_lib.load().hopattn_forward_varlen_cpu(ctypes.byref(args)), "hopattn varlen CPU reference")
    else:
        st = _direct(torch)
        lib = st.lib or st.load()
        dev = q.get_device()
        prev = st.exchange_device(dev)  # a no-op when q is on the current device
        try:
            # 0 for invalid arguments: the call then names what is wrong. Otherwise the tile counter
            # of the dynamic tile order (hopattn.hpp, forward_varlen's workspace form).
            nbytes = lib.hopattn_forward_varlen_workspace_size(ctypes.byref(args))
            workspace, workspace_ptr = _workspace(q, nbytes, torch.uint8)
            status = lib.hopattn_forward_varlen_with_workspace(ctypes.byref(args), workspace_ptr, nbytes,
                                                               st.raw_stream(dev))
            del workspace
        finally:
            st.restore_device(prev)
        _lib.check(status, "hopattn varlen forward")
    return (out, lse) if with_lse else out


def _op_forward(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, causal,
                softmax_scale, check_index_values, window, softcap=0.0, require_cuda=True):
    """(out, lse) for the kernels of torch.ops.hopattn.fwd_varlen (torch_ops.py): checks, then _launch."""
    index = _index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    _check_torch(torch, q, k, v, index, require_cuda)
    return _launch(torch, q, k, v, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, check_index_values, True,
                   window, softcap)


# --- torch: the backward ----------------------------------------------------------------------------


def _grad_outputs(torch, q, k, v):
    """Fresh dq, dk, dv like q, k, v (zeros_like: strides as empty_like's); shared by the direct
    route and the real and fake hopattn::bwd_varlen. Zeros, not empty: the library writes every row
    of every sequence (rows past seqused get 0) but not the rows past cu_seqlens[batch], which
    take no part in the result and so have gradient 0. Left uninitialised they would hand garbage
    (NaN, possibly) to whatever produced q, k and v (FlashAttention's issue #1228)."""
    return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


def _bwd_args(tensor, q, k, v, out, dout, lse, dq, dk, dv, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
              deterministic, check_index_values, window, softcap=0.0):
    """HopattnVarlenBwdArgs; tensor as for _args."""
    idx = {name: None if t is None else tensor(name, t, _lib.DTYPE_INT32) for name, t in index.items()}
    return _lib.make_varlen_bwd_args(
        tensor("q", q), tensor("k", k), tensor("v", v), tensor("out", out), tensor("dout", dout), tensor("lse", lse),
        tensor("dq", dq), tensor("dk", dk), tensor("dv", dv),
        idx["cu_seqlens_q"], idx["cu_seqlens_k"], idx["seqused_q"], idx["seqused_k"],
        max_seqlen_q, max_seqlen_k, causal, softmax_scale, deterministic, check_index_values, window, softcap,
    )


def _launch_backward(torch, q, k, v, out, dout, lse, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                     deterministic, window, softcap=0.0, check_index_values=False):
    """dq, dk, dv (_grad_outputs) from hopattn_backward_varlen on q's device and its current stream,
    with its workspace from torch's allocator (uint8, on that stream); or, for CPU tensors (the
    custom op's CPU kernel), from the CPU reference one sequence at a time (_backward_cpu). q, k, v
    and the index tensors already checked by _check_torch (the forward's, or _op_backward's)."""
    dout = _torch_dout(torch, dout, q, ndim=3)
    dq, dk, dv = _grad_outputs(torch, q, k, v)
    if q.device.type == "cpu":
        _backward_cpu(torch, q, k, v, out, dout, lse, dq, dk, dv, index, max_seqlen_q, max_seqlen_k, causal,
                      softmax_scale, window, softcap)
        return dq, dk, dv
    args = _bwd_args(functools.partial(_torch_tensor, torch), q, k, v, out, dout, lse, dq, dk, dv, index, max_seqlen_q,
                     max_seqlen_k, causal, softmax_scale, deterministic, check_index_values, window, softcap)
    st = _direct(torch)
    lib = st.lib or st.load()
    dev = q.get_device()
    prev = st.exchange_device(dev)  # a no-op when q is on the current device; the size may depend on it
    try:
        nbytes = lib.hopattn_backward_varlen_workspace_size(ctypes.byref(args))
        workspace, workspace_ptr = _workspace(q, nbytes, torch.uint8)
        status = lib.hopattn_backward_varlen(ctypes.byref(args), workspace_ptr, nbytes, st.raw_stream(dev))
        del workspace
    finally:
        st.restore_device(prev)
    _lib.check(status, "hopattn varlen backward")
    return dq, dk, dv


def _backward_cpu(torch, q, k, v, out, dout, lse, dq, dk, dv, index, max_seqlen_q, max_seqlen_k, causal,
                  softmax_scale, window, softcap=0.0):
    """The custom op's CPU kernel (tests only; the library has no varlen CPU backward): the
    library's checks of the forward's arguments and index values (hopattn_forward_varlen_cpu into
    a scratch out), then hopattn_backward_cpu on each sequence alone as a batch of 1, writing into
    views of dq, dk, dv (zeros elsewhere). out and lse are the reference's to recompute. The
    window is per sequence, aligned by the used lengths, as the varlen forward's; softcap as the forward's."""
    tensor = functools.partial(_torch_tensor, torch)
    scratch = torch.empty_like(q, memory_format=torch.contiguous_format)
    check = _args(tensor, q, k, v, scratch, None, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, False,
                  window, softcap)
    _lib.check(_lib.load().hopattn_forward_varlen_cpu(ctypes.byref(check)), "hopattn varlen CPU reference backward")
    cu_q, cu_k = index["cu_seqlens_q"].tolist(), index["cu_seqlens_k"].tolist()
    used_q = None if index["seqused_q"] is None else index["seqused_q"].tolist()
    used_k = None if index["seqused_k"] is None else index["seqused_k"].tolist()
    for b in range(len(cu_q) - 1):
        len_q = cu_q[b + 1] - cu_q[b] if used_q is None else used_q[b]
        len_k = cu_k[b + 1] - cu_k[b] if used_k is None else used_k[b]
        if len_q == 0 or len_k == 0:  # no query or no key: every gradient of the sequence is 0
            continue
        rows, keys = slice(cu_q[b], cu_q[b] + len_q), slice(cu_k[b], cu_k[b] + len_k)
        args = _lib.make_bwd_args(
            tensor("q", q[None, rows]), tensor("k", k[None, keys]), tensor("v", v[None, keys]), None,
            tensor("dout", dout[None, rows]), None,
            tensor("dq", dq[None, rows]), tensor("dk", dk[None, keys]), tensor("dv", dv[None, keys]),
            causal, softmax_scale, False, window, softcap,
        )
        _lib.check(_lib.load().hopattn_backward_cpu(ctypes.byref(args)), "hopattn varlen CPU reference backward")


def _op_backward(torch, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                 seqused_k, causal, softmax_scale, deterministic, window, softcap=0.0, require_cuda=True):
    """(dq, dk, dv) for the kernels of torch.ops.hopattn.bwd_varlen (torch_ops.py): checks, then
    _launch_backward."""
    index = _index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    _check_torch(torch, q, k, v, index, require_cuda)
    _check_dout(dout, q)
    return _launch_backward(torch, q, k, v, out, dout, lse, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                            deterministic, window, softcap)


def _check_dout(dout, q):
    if tuple(dout.shape) != tuple(q.shape):
        raise _lib.InvalidArgumentError(f"dout: shape {tuple(dout.shape)} differs from q's {tuple(q.shape)}")
    if dout.device != q.device:
        raise _lib.InvalidArgumentError(f"dout: on device '{dout.device}' but q is on '{q.device}'")


def _make_direct_function(torch, st):
    """varlen_attention's autograd on the direct route when a gradient is needed (ops._direct_autograd).
    It saves and recomputes exactly what hopattn::fwd_varlen's registered autograd does: q, k, v,
    out, lse and the index tensors (and keeps the options, the window and softcap included, for the
    backward)."""
    no_grads = (None,) * 13  # cu_seqlens_q ... softcap: the index tensors and the options

    def run_forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, used_q, used_k, causal, softmax_scale, return_lse,
                    check_index_values, deterministic, window, softcap):
        out, lse = _launch(torch, q, k, v, _index_arrays(cu_q, cu_k, used_q, used_k), max_q, max_k, causal,
                           softmax_scale, check_index_values, True, window, softcap)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, used_q, used_k)  # P is recomputed from lse
        ctx.hopattn_args = (max_q, max_k, causal, softmax_scale, deterministic, window, softcap)
        return out, lse, return_lse

    def run_backward(ctx, dout):
        q, k, v, out, lse, cu_q, cu_k, used_q, used_k = ctx.saved_tensors
        max_q, max_k, causal, softmax_scale, deterministic, window, softcap = ctx.hopattn_args
        if torch.compiler.is_compiling():  # compiled autograd traces this: the op is traceable
            dq, dk, dv = _torch_ops_module().bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, used_q,
                                                        used_k, causal, softmax_scale, deterministic, *window, softcap)
        else:
            dq, dk, dv = _launch_backward(torch, q, k, v, out, dout, lse, _index_arrays(cu_q, cu_k, used_q, used_k),
                                          max_q, max_k, causal, softmax_scale, deterministic, window, softcap)
        return (dq, dk, dv, *no_grads)

    return _direct_autograd(torch, st, "HopattnVarlenFunction", run_forward, run_backward, 16)


_direct_apply = None  # (torch module, apply of _make_direct_function), built on the first gradient


def _direct_function(torch, st):
    global _direct_apply
    if _direct_apply is None or _direct_apply[0] is not torch:
        _direct_apply = (torch, _make_direct_function(torch, st))
    return _direct_apply[1]


def _run_torch(torch, q, k, v, index, max_seqlen_q, max_seqlen_k, causal, softmax_scale, return_lse,
               check_index_values, deterministic, window, softcap=0.0):
    _check_torch(torch, q, k, v, index)
    scale = None if softmax_scale is None else float(softmax_scale)
    # is_compiling() first, as in hopattn.attention: dynamo reads it as True and never looks further.
    if not torch.compiler.is_compiling():
        st = _direct(torch)
        if _plain_eager(st, (q, k, v, *index.values())):
            if st.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
                return _direct_function(torch, st)(
                    q, k, v, index["cu_seqlens_q"], index["cu_seqlens_k"], max_seqlen_q, max_seqlen_k,
                    index["seqused_q"], index["seqused_k"], causal, scale, return_lse, check_index_values,
                    deterministic, window, softcap,
                )
            return _launch(torch, q, k, v, index, max_seqlen_q, max_seqlen_k, causal, scale, check_index_values,
                           return_lse, window, softcap)
    out, lse = _torch_ops_module().fwd_varlen(
        q, k, v, index["cu_seqlens_q"], index["cu_seqlens_k"], max_seqlen_q, max_seqlen_k, index["seqused_q"],
        index["seqused_k"], causal, scale, check_index_values, deterministic, *window, softcap,
    )
    return (out, lse) if return_lse else out


# --- public API -----------------------------------------------------------------------------------


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                     softmax_scale=None, seqused_q=None, seqused_k=None, return_lse=False, check_index_values=False,
                     deterministic=False, window_size=NO_WINDOW, softcap=0.0):
    """Exact softmax attention over a batch of sequences of different lengths, packed along the
    token dim (FlashAttention-3's varlen layout); differentiable on torch CUDA tensors.

    q: (total_q, heads_q, head_dim); k, v: (total_k, heads_kv, head_dim), heads_q a multiple of
    heads_kv (GQA/MQA); any strides with a contiguous last dim. Sequence b is rows
    cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q and cu_seqlens_k[b] .. cu_seqlens_k[b+1] of k and v.
    cu_seqlens_q, cu_seqlens_k: int32, contiguous, batch + 1 entries, prefix sums starting at 0.
    max_seqlen_q, max_seqlen_k: ints at least the longest sequence of each side (the GPU kernel
    sizes its grid from max_seqlen_q). seqused_q, seqused_k: optional int32 (batch,): only the
    first seqused[b] tokens of sequence b take part; the other query rows get out 0, lse -inf.
    Zero-length sequences are fine.

    causal: bottom-right aligned per sequence (query i of sequence b sees key j iff
    j <= i + len_k(b) - len_q(b)); a row that sees no key gets out 0 and lse -inf.
    softmax_scale defaults to 1/sqrt(head_dim). window_size: (left, right) sliding window per
    sequence, as hopattn.attention's (query i of sequence b sees key j iff
    i + len_k(b) - len_q(b) - left <= j <= i + len_k(b) - len_q(b) + right, -1 unbounded; the
    lengths are the seqused ones when given); the backward uses the same window. softcap: score
    softcapping as hopattn.attention's (> 0: each score becomes
    softcap * tanh(softmax_scale * q.k / softcap); 0.0, the default, is off; a finite float >= 0,
    else ValueError naming softcap); the backward uses the same softcap.

    * torch CUDA tensors (bfloat16/float16, the index tensors int32 on the same device): the sm90
      kernel on the current stream, one launch for the batch; nothing synchronises the host unless
      check_index_values=True, which copies the index tensors to the host (a sync) and checks their
      values (start at 0, non-decreasing, within the token counts and max_seqlen, seqused in range)
      as the CPU reference always does; HOPATTN_DEBUG_CHECKS=1 turns it on for every call. Without
      it, wrong index values give wrong rows, not out-of-bounds writes. V's rows just past a
      sequence shorter than one key tile (80-176 keys) must be finite: its tile reads on into them
      and masks their scores (FA3 does so past every sequence); longer ones' last tile ends at their
      last key.
    * numpy arrays (float32/float16/ml_dtypes bfloat16; int32 index arrays): the CPU reference.

    Returns out (total_q, heads_q, head_dim), contiguous, q's dtype; with return_lse=True
    (out, lse) with lse (heads_q, total_q) float32, the natural-log log-sum-exp of the scaled
    scores. Rows of q past cu_seqlens_q[batch] are not written (their contents are unspecified).

    Autograd (torch CUDA tensors): when grad mode is on and q, k or v requires grad, out is
    differentiable with respect to q, k and v (the sm90 varlen backward, one launch for the batch,
    on the head dims and dtypes with a backward kernel; q, k, v, out, lse and the index tensors are
    saved, the backward's workspace comes from torch's allocator on the current stream). Gradients
    are in q's dtype and packed like q, k, v; with GQA dk/dv are summed over each group's query
    heads; rows past seqused, and rows past cu_seqlens[batch], get gradient 0. The index tensors,
    lse and the other arguments get none. deterministic=True makes the backward bitwise
    reproducible (no effect on the forward or on numpy inputs). The backward does not re-check the
    index values (the forward did, with check_index_values; HOPATTN_DEBUG_CHECKS=1 checks both).
    numpy inputs are forward only (the CPU reference has no varlen backward).

    Two routes, the same kernels and bits, as hopattn.attention: a plain eager call goes straight to
    the library (through a torch.autograd.Function when a gradient is needed); under torch.compile
    and other tracing the call is the custom op torch.ops.hopattn.fwd_varlen (no graph break), whose
    backward is hopattn::bwd_varlen.
    """
    _check_scale(softmax_scale)
    window = _check_window(window_size)
    softcap = _check_softcap(softcap)
    # Ints that fit the struct's int64; their values (non-negative, not below a real length) are the library's.
    max_seqlen_q = _check_int64("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _check_int64("max_seqlen_k", max_seqlen_k)
    index = _index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    torch = _torch_module_of(q)
    if torch is not None:
        return _run_torch(torch, q, k, v, index, max_seqlen_q, max_seqlen_k, bool(causal), softmax_scale,
                          bool(return_lse), bool(check_index_values), bool(deterministic), window, softcap)
    if _is_numpy_array(q):
        return _run_numpy(q, k, v, index, max_seqlen_q, max_seqlen_k, bool(causal), softmax_scale, bool(return_lse),
                          window, softcap)
    raise TypeError(f"q: expected a torch.Tensor (CUDA) or numpy.ndarray, got {type(q).__name__}")
