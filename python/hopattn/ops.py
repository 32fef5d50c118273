# The public operations: attention() on torch CUDA tensors (sm90 kernels, differentiable through a
# torch.autograd.Function) or numpy arrays (CPU reference), attention_backward() (numpy gradients
# through the CPU reference), attention_reference() (CUDA reference kernel), and build/device
# queries. torch is never imported here: a torch tensor can only exist if the caller already
# imported torch.
import ctypes
import sys

from . import _lib

_LAYOUT = "(batch, seqlen, heads, head_dim)"


def _torch_module_of(x):
    """The torch module if x is a torch.Tensor, else None (without importing torch)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch
    return None


def _is_numpy_array(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _check_scale(softmax_scale):
    # bool is an int in Python; reject it so softmax_scale=True is not read as scale 1.0.
    # Range checks (finite, > 0) are the library's, so both bindings report them the same way.
    if softmax_scale is None:
        return
    if isinstance(softmax_scale, bool) or not hasattr(softmax_scale, "__float__"):
        raise TypeError(f"softmax_scale must be a float or None, got {type(softmax_scale).__name__}")


# --- torch ----------------------------------------------------------------------------------------


_torch_dtype_codes = None


def _torch_dtype_code(torch, name, t):
    global _torch_dtype_codes
    if _torch_dtype_codes is None:
        _torch_dtype_codes = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_FP16, torch.float32: _lib.DTYPE_FP32}
    code = _torch_dtype_codes.get(t.dtype)
    if code is None:
        raise _lib.InvalidArgumentError(f"{name}: dtype {t.dtype} is not supported (bfloat16, float16)")
    return code


def _torch_tensor(torch, name, t):
    return _lib.make_tensor(t.data_ptr(), _torch_dtype_code(torch, name, t), tuple(t.shape), t.stride())


def _check_torch_inputs(torch, q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor like q, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise _lib.InvalidArgumentError(
                f"{name}: expected a CUDA tensor, got device '{t.device}' (move it with .cuda(); "
                "numpy arrays run on the CPU reference instead)"
            )
        if t.device != q.device:
            raise _lib.InvalidArgumentError(f"{name}: on device '{t.device}' but q is on '{q.device}'")
        if t.dim() != 4:
            raise _lib.InvalidArgumentError(f"{name}: expected 4 dims {_LAYOUT}, got shape {tuple(t.shape)}")
        if t.layout != torch.strided:
            raise _lib.InvalidArgumentError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}")


def _run_torch(c_fn, what, torch, q, k, v, causal, softmax_scale, return_lse):
    _check_torch_inputs(torch, q, k, v)
    batch, seqlen_q, heads_q, head_dim = q.shape
    # The device guard makes the library's CUDA calls (and torch's allocations) target q's device,
    # and picks that device's current stream, so multi-GPU callers need no set_device of their own.
    with torch.cuda.device(q.device):
        out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
        lse = None
        if return_lse:
            lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
        args = _lib.make_fwd_args(
            _torch_tensor(torch, "q", q),
            _torch_tensor(torch, "k", k),
            _torch_tensor(torch, "v", v),
            _torch_tensor(torch, "out", out),
            _torch_tensor(torch, "lse", lse) if lse is not None else None,
            causal,
            softmax_scale,
        )
        stream = torch.cuda.current_stream(q.device).cuda_stream
        _lib.check(c_fn(ctypes.byref(args), ctypes.c_void_p(stream)), what)
    return (out, lse) if return_lse else out


def _torch_dout(torch, dout, q):
    """dout as the library takes it: q's dtype, contiguous last dim, 16-byte aligned rows. Autograd
    often hands over expanded (stride 0) or otherwise odd gradients; those get one dense copy."""
    if dout.dtype != q.dtype:
        dout = dout.to(q.dtype)
    per16 = max(16 // dout.element_size(), 1)
    usable = (
        dout.dim() == 4
        and dout.stride(-1) == 1
        and dout.data_ptr() % 16 == 0
        and all(dout.size(i) <= 1 or dout.stride(i) % per16 == 0 for i in range(3))
    )
    if not usable:
        # clone, not contiguous(): contiguous() returns a misaligned contiguous view unchanged.
        dout = dout.clone(memory_format=torch.contiguous_format)
    return dout


def _run_torch_backward(torch, q, k, v, out, dout, lse, causal, softmax_scale, deterministic):
    """dq, dk, dv (torch.empty_like q, k, v) from hopattn_backward on the current stream."""
    lib = _lib.load()
    with torch.cuda.device(q.device):
        dout = _torch_dout(torch, dout, q)
        dq = torch.empty_like(q)
        dk = torch.empty_like(k)
        dv = torch.empty_like(v)
        args = _lib.make_bwd_args(
            _torch_tensor(torch, "q", q),
            _torch_tensor(torch, "k", k),
            _torch_tensor(torch, "v", v),
            _torch_tensor(torch, "out", out),
            _torch_tensor(torch, "dout", dout),
            _torch_tensor(torch, "lse", lse),
            _torch_tensor(torch, "dq", dq),
            _torch_tensor(torch, "dk", dk),
            _torch_tensor(torch, "dv", dv),
            causal,
            softmax_scale,
            deterministic,
        )
        nbytes = int(lib.hopattn_backward_workspace_size(ctypes.byref(args)))
        workspace = None  # kept referenced until the call is enqueued; the allocator orders reuse by stream
        workspace_ptr = None
        if nbytes:
            # Uninitialised is fine (the library initialises what it needs on the stream).
            workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
            workspace_ptr = workspace.data_ptr()
            if workspace_ptr % _BWD_WORKSPACE_ALIGNMENT:
                raise _lib.HopattnError(
                    f"workspace: torch allocated {nbytes} bytes at {workspace_ptr:#x}, which is not "
                    f"{_BWD_WORKSPACE_ALIGNMENT}-byte aligned"
                )
        stream = torch.cuda.current_stream(q.device).cuda_stream
        status = lib.hopattn_backward(
            ctypes.byref(args), ctypes.c_void_p(workspace_ptr), ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)
        )
        _lib.check(status, "hopattn backward")
        del workspace
    return dq, dk, dv


_BWD_WORKSPACE_ALIGNMENT = 256
_attention_function = None


def _torch_attention_function(torch):
    """The torch.autograd.Function behind differentiable attention(), built on first use so this
    module never imports torch itself."""
    global _attention_function
    if _attention_function is not None:
        return _attention_function
    from torch.autograd.function import once_differentiable

    class HopattnAttentionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, softmax_scale, return_lse, deterministic):
            lib = _lib.load()
            out, lse = _run_torch(lib.hopattn_forward, "hopattn forward", torch, q, k, v, causal, softmax_scale, True)
            # Only the inputs and the two outputs are kept: backward recomputes P from lse.
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal = causal
            ctx.softmax_scale = softmax_scale
            ctx.deterministic = deterministic
            if return_lse:
                ctx.mark_non_differentiable(lse)
                return out, lse
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, *unused_dlse):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = _run_torch_backward(
                torch, q, k, v, out, dout, lse, ctx.causal, ctx.softmax_scale, ctx.deterministic
            )
            return dq, dk, dv, None, None, None, None

    _attention_function = HopattnAttentionFunction
    return _attention_function


def _torch_needs_grad(torch, q, k, v):
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v))


# --- numpy ----------------------------------------------------------------------------------------


_numpy_dtype_codes = None


def _numpy_dtype_code(name, a):
    global _numpy_dtype_codes
    if _numpy_dtype_codes is None:
        import numpy as np

        # Keyed by dtype object: a dict hit is far cheaper than dtype.name on every call.
        _numpy_dtype_codes = {np.dtype(np.float32): _lib.DTYPE_FP32, np.dtype(np.float16): _lib.DTYPE_FP16}
    code = _numpy_dtype_codes.get(a.dtype)
    if code is None and a.dtype.name == "bfloat16" and a.dtype.itemsize == 2:  # ml_dtypes.bfloat16
        code = _lib.DTYPE_BF16
    if code is None or not a.dtype.isnative:
        raise _lib.InvalidArgumentError(
            f"{name}: numpy dtype {a.dtype} is not supported (float32, float16, or ml_dtypes bfloat16; native byte order)"
        )
    return code


def _numpy_tensor(name, a):
    code = _numpy_dtype_code(name, a)
    item = a.itemsize
    strides = a.strides
    if any(s % item for s in strides):
        raise _lib.InvalidArgumentError(f"{name}: byte strides {strides} are not multiples of the item size {item}")
    return _lib.make_tensor(a.__array_interface__["data"][0], code, a.shape, [s // item for s in strides])


def _run_numpy(q, k, v, causal, softmax_scale, return_lse):
    import numpy as np

    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray like q, got {type(a).__name__}")
        if a.ndim != 4:
            raise _lib.InvalidArgumentError(f"{name}: expected 4 dims {_LAYOUT}, got shape {a.shape}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = np.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype)
    lse = np.empty((batch, heads_q, seqlen_q), dtype=np.float32) if return_lse else None
    args = _lib.make_fwd_args(
        _numpy_tensor("q", q),
        _numpy_tensor("k", k),
        _numpy_tensor("v", v),
        _numpy_tensor("out", out),
        _numpy_tensor("lse", lse) if lse is not None else None,
        causal,
        softmax_scale,
    )
    # q, k, v, out and lse stay referenced by this frame, so their buffers outlive the call.
    _lib.check(_lib.load().hopattn_forward_cpu(ctypes.byref(args)), "hopattn CPU reference")
    return (out, lse) if return_lse else out


def _run_numpy_backward(q, k, v, dout, causal, softmax_scale):
    import numpy as np

    for name, a in (("q", q), ("k", k), ("v", v), ("dout", dout)):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray like q, got {type(a).__name__}")
        if a.ndim != 4:
            raise _lib.InvalidArgumentError(f"{name}: expected 4 dims {_LAYOUT}, got shape {a.shape}")
    # Gradients come back in the inputs' dtype (the library checks k, v and dout against q's).
    dq = np.empty(q.shape, dtype=q.dtype)
    dk = np.empty(k.shape, dtype=q.dtype)
    dv = np.empty(v.shape, dtype=q.dtype)
    args = _lib.make_bwd_args(
        _numpy_tensor("q", q),
        _numpy_tensor("k", k),
        _numpy_tensor("v", v),
        None,  # out: recomputed by the CPU reference
        _numpy_tensor("dout", dout),
        None,  # lse: recomputed
        _numpy_tensor("dq", dq),
        _numpy_tensor("dk", dk),
        _numpy_tensor("dv", dv),
        causal,
        softmax_scale,
        False,  # the CPU reference is deterministic anyway
    )
    _lib.check(_lib.load().hopattn_backward_cpu(ctypes.byref(args)), "hopattn CPU reference backward")
    return dq, dk, dv


# --- public API -----------------------------------------------------------------------------------


def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False, deterministic=False):
    """Exact softmax attention; differentiable on torch tensors.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim), with
    heads_q a multiple of heads_kv (GQA/MQA). Any strides, but the last dim must be contiguous.

    * torch CUDA tensors (bfloat16/float16, head_dim 64/128/256, Hopper GPU): runs the sm90 kernel
      on the current stream; nothing is synchronised, outputs come from torch's allocator.
    * numpy arrays (float32/float16): runs the CPU reference (double accumulation), for testing.
      Gradients of the numpy path: attention_backward().

    causal: bottom-right aligned mask (query i sees key j iff j <= i + seqlen_k - seqlen_q); a row
    that sees no key gets out = 0 and lse = -inf. softmax_scale defaults to 1/sqrt(head_dim).

    Returns out (batch, seqlen_q, heads_q, head_dim), contiguous, q's dtype; with return_lse=True
    returns (out, lse) where lse (batch, heads_q, seqlen_q) float32 is the natural-log
    log-sum-exp of the scaled scores.

    Autograd: when grad mode is on and q, k or v requires grad, out is differentiable with respect
    to q, k and v (the sm90 backward kernels: head_dim 64/128 today; lse is computed internally and
    saved, with q, k, v and out, for the backward pass). lse is never differentiable. Gradients are
    in q's dtype; with GQA dk/dv are summed over each group's query heads. deterministic=True makes
    the backward bitwise reproducible (dq's cross-block sum is ordered, at some speed cost); it has
    no effect on the forward or on numpy inputs. Without grad, no history is recorded and nothing
    beyond the requested outputs is computed.
    """
    _check_scale(softmax_scale)
    torch = _torch_module_of(q)
    if torch is not None:
        lib = _lib.load()
        if _torch_needs_grad(torch, q, k, v):
            _check_torch_inputs(torch, q, k, v)
            fn = _torch_attention_function(torch)
            return fn.apply(q, k, v, bool(causal), softmax_scale, bool(return_lse), bool(deterministic))
        return _run_torch(lib.hopattn_forward, "hopattn forward", torch, q, k, v, causal, softmax_scale, return_lse)
    if _is_numpy_array(q):
        return _run_numpy(q, k, v, causal, softmax_scale, return_lse)
    raise TypeError(f"q: expected a torch.Tensor (CUDA) or numpy.ndarray, got {type(q).__name__}")


def attention_backward(q, k, v, dout, causal=False, softmax_scale=None):
    """Gradients (dq, dk, dv) of attention(q, k, v, causal, softmax_scale) given dout = dL/dout, on
    numpy arrays through the CPU reference (double accumulation; out and lse are recomputed).

    q, k, v as for attention(); dout like out: (batch, seqlen_q, heads_q, head_dim) in q's dtype,
    any strides with a contiguous last dim. Returns new C-contiguous arrays dq (like q), dk, dv
    (like k, v; with GQA summed over the query heads of each group), all in q's dtype (float32 or
    float16). Rows that see no key contribute nothing (their dq is 0).

    For torch tensors use autograd instead: hopattn.attention(q, k, v).backward(dout).
    """
    _check_scale(softmax_scale)
    if _torch_module_of(q) is not None:
        raise TypeError(
            "q: attention_backward takes numpy arrays; for torch tensors use autograd "
            "(out = hopattn.attention(q, k, v, ...); out.backward(dout))"
        )
    if _is_numpy_array(q):
        return _run_numpy_backward(q, k, v, dout, causal, softmax_scale)
    raise TypeError(f"q: expected a numpy.ndarray, got {type(q).__name__}")


def attention_reference(q, k, v, causal=False, softmax_scale=None, return_lse=False):
    """Same forward contract as attention(), computed by the simple CUDA reference kernel (torch
    tensors; any head_dim up to 512, any CUDA GPU) or the CPU reference (numpy arrays). For tests;
    not differentiable (the result carries no autograd history)."""
    _check_scale(softmax_scale)
    torch = _torch_module_of(q)
    if torch is not None:
        lib = _lib.load()
        return _run_torch(
            lib.hopattn_forward_reference_cuda, "hopattn CUDA reference", torch, q, k, v, causal, softmax_scale, return_lse
        )
    if _is_numpy_array(q):
        return _run_numpy(q, k, v, causal, softmax_scale, return_lse)
    raise TypeError(f"q: expected a torch.Tensor (CUDA) or numpy.ndarray, got {type(q).__name__}")


def version():
    """The library's version string, e.g. '0.1.0+<git commit>'."""
    return _lib.load().hopattn_version().decode()


def build_info():
    """What the loaded library was built with: version, ABI, path and the compiled sm90 kernels
    (instantiations like 'fwd:bf16:128'; a head_dim/dtype missing here raises NotImplementedError)."""
    lib = _lib.load()
    listing = lib.hopattn_build_instantiations().decode()
    instantiations = [s for s in listing.split(",") if s]
    kernels = []
    for item in instantiations:
        direction, dtype, head_dim = item.split(":")
        kernels.append((direction, dtype, int(head_dim)))
    return {
        "version": lib.hopattn_version().decode(),
        "abi_version": lib.hopattn_abi_version(),
        "library": str(_lib.library_path()),
        "instantiations": instantiations,
        "kernels": kernels,
    }


def check_device():
    """Raise UnsupportedDeviceError unless the current CUDA device can run the sm90 kernels."""
    _lib.check(_lib.load().hopattn_check_device(), "hopattn device check")


def is_available():
    """True when the library loads and the current CUDA device is a Hopper GPU."""
    try:
        check_device()
    except (_lib.LibraryNotFoundError, _lib.HopattnError):
        return False
    return True
