# The public operations: attention() on torch CUDA tensors (sm90 kernels; differentiable; straight
# through ctypes in plain eager, through the torch.library custom ops hopattn::fwd / hopattn::bwd of
# torch_ops.py when torch traces or transforms the call, e.g. under torch.compile; capturable in
# CUDA graphs either way) or numpy arrays (CPU reference), attention_backward()
# (numpy gradients through the CPU reference), attention_reference() (CUDA reference kernel), and build/device
# queries. Each of them takes FlashAttention's sliding window, window_size=(left, right), and
# softcapping, softcap= (0: off). torch is never imported here: a torch tensor can only exist if the
# caller already imported torch.
import ctypes
import operator
import struct
import sys

from . import _lib

_LAYOUT = "(batch, seqlen, heads, head_dim)"
_INT64_LIMIT = 1 << 63

# FlashAttention's window_size spelling of "no window": -1 is unbounded on that side. The public
# signatures default to this very object, so the common call skips _check_window's work.
NO_WINDOW = (-1, -1)


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


def _check_int64(name, x, bits=64):
    """x as an int (anything with __index__, not bool) that fits a C int64 field (or an int`bits`
    one): ctypes would silently wrap a larger one. The value itself is the library's to check."""
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    x = operator.index(x)
    limit = _INT64_LIMIT if bits == 64 else 1 << (bits - 1)
    if not -limit <= x < limit:
        raise _lib.InvalidArgumentError(f"{name}={x} does not fit in int{bits}")
    return x


def _check_window(window_size):
    """window_size (a tuple or list of two ints, -1 meaning unbounded on that side: FlashAttention's
    window_size) as a tuple of two ints. Only its form is checked here; its values (>= -1; right -1
    or 0 with causal) are the library's, so every binding and route reports them alike
    ("window.left=-2 must be >= 0, or -1 for unbounded")."""
    if window_size is NO_WINDOW:
        return NO_WINDOW
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size must be a (left, right) pair of ints (-1: unbounded), got {window_size!r}")
    left, right = window_size
    return _check_int64("window_size[0] (left)", left), _check_int64("window_size[1] (right)", right)


_FLOAT32_MAX = 3.4028234663852886e38  # the struct field is a C float


def _check_softcap(softcap):
    """softcap (0: off; > 0: scores become softcap * tanh(scale * q.k / softcap)) as a Python float
    that a C float holds finitely: a real number (anything with __float__, not bool), finite, >= 0.
    Anything else raises InvalidArgumentError (a ValueError) naming softcap, before any tensor is
    looked at. The plain float, 0.0 the default, is answered first: every call pays this check."""
    if type(softcap) is float and 0.0 <= softcap <= _FLOAT32_MAX:
        return softcap
    value = None
    if not isinstance(softcap, bool) and hasattr(softcap, "__float__"):
        try:
            value = float(softcap)
        except (TypeError, ValueError, OverflowError):
            value = None
    if value is None or not 0.0 <= value <= _FLOAT32_MAX:  # NaN fails the comparison too
        raise _lib.InvalidArgumentError(f"softcap must be a finite float >= 0 (0: off), got {softcap!r}")
    return value


# --- torch ----------------------------------------------------------------------------------------
#
# On torch tensors attention() reaches the kernels by one of two routes. Both end in
# _direct_forward / _direct_backward below, so they run the same kernels on the same arguments and
# give the same bits:
#
#  * direct, for plain eager calls (the common case, and the one whose host cost matters at small
#    shapes): ctypes straight from attention(), through the lean torch.autograd.Function of
#    _make_direct_function when a gradient is needed. What can be looked up once lives in _Direct;
#    the argument struct is filled by one struct.pack_into; the stream is
#    torch._C._cuda_getCurrentRawStream(device); the current device is switched only when q is
#    not on it.
#  * the custom op torch.ops.hopattn.fwd (torch_ops.py), whenever torch has to see the call as an
#    operator: torch.compile / torch.export tracing (torch.compiler.is_compiling()), tensor
#    subclasses (FakeTensor, FunctionalTensor, DTensor, nn.Parameter...), an active
#    TorchDispatchMode (FakeTensorMode, make_fx, FlopCounterMode...), a TorchFunctionMode other
#    than torch.device(...) / set_default_device, functorch transforms (vmap, grad...) and
#    torch.jit.trace. The op's CUDA kernels call _direct_forward / _direct_backward.


_torch_dtype_codes = None


def _torch_dtype_code(torch, name, t):
    global _torch_dtype_codes
    if _torch_dtype_codes is None:
        _torch_dtype_codes = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_FP16, torch.float32: _lib.DTYPE_FP32}
    code = _torch_dtype_codes.get(t.dtype)
    if code is None:
        raise _lib.InvalidArgumentError(f"{name}: dtype {t.dtype} is not supported (bfloat16, float16)")
    return code


def _torch_tensor(torch, name, t, code=None):
    """A HopattnTensor for t; code (a _lib.DTYPE_*) defaults to t's attention dtype."""
    if code is None:
        code = _torch_dtype_code(torch, name, t)
    return _lib.make_tensor(t.data_ptr(), code, tuple(t.shape), t.stride())


def _check_torch_inputs(torch, q, k, v, ndim=4, layout=_LAYOUT):
    """q, k and v are dense CUDA tensors on q's device with `ndim` dims (described as `layout`)."""
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
        if t.dim() != ndim:
            raise _lib.InvalidArgumentError(f"{name}: expected {ndim} dims {layout}, got shape {tuple(t.shape)}")
        if t.layout != torch.strided:
            raise _lib.InvalidArgumentError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}")


def _torch_forward_outputs(torch, q, return_lse=True):
    """Fresh out (contiguous, like q) and lse ((batch, heads_q, seqlen_q) float32, or None), as
    _direct_forward allocates them; for the op's CPU kernel and fake (torch.compile) implementation."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device) if return_lse else None
    return out, lse


def _torch_grad_outputs(torch, q, k, v):
    """Fresh dq, dk, dv (empty_like q, k, v); shared by the direct path and the real and fake hopattn::bwd."""
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _torch_dout(torch, dout, q, ndim=4):
    """dout as the library takes it: q's dtype, `ndim` dims (4, or varlen's packed 3) with a
    contiguous last dim, 16-byte aligned rows. Autograd often hands over expanded (stride 0) or
    otherwise odd gradients; those get one dense copy."""
    if dout.dtype != q.dtype:
        dout = dout.to(q.dtype)
    per16 = max(16 // dout.element_size(), 1)
    sizes = dout.shape
    strides = dout.stride()
    usable = (
        len(sizes) == ndim
        and strides[-1] == 1
        and dout.data_ptr() % 16 == 0
        and all(sizes[i] <= 1 or strides[i] % per16 == 0 for i in range(ndim - 1))
    )
    if not usable:
        # clone, not contiguous(): contiguous() returns a misaligned contiguous view unchanged.
        dout = dout.clone(memory_format=torch.contiguous_format)
    return dout


# The C structs filled in one struct.pack_into: formats derived from _lib's ctypes declarations
# (native alignment, as the C compiler lays them out) and checked byte for byte against the ctypes
# constructors once per process (_Direct.__init__); on any mismatch the direct path keeps using
# the constructors.
_STRUCT_CODES = {
    ctypes.c_void_p: "P",
    ctypes.c_int32: "i",
    ctypes.c_uint32: "I",
    ctypes.c_int64: "q",
    ctypes.c_float: "f",
}


def _struct_format(cls):
    parts = []
    for _, ctype in cls._fields_:
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            parts.append(_struct_format(ctype))
        elif isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
            parts.append(f"{ctype._length_}{_STRUCT_CODES[ctype._type_]}")
        else:
            parts.append(_STRUCT_CODES[ctype])
    return "".join(parts)


_NO_TENSOR = (0,) * 11  # HopattnTensor(): data NULL, ndim 0 (lse not computed)
_PACK_ERRORS = (struct.error, OverflowError)


def _packer(cls, n_tensors, tail):
    """struct.Struct(...).pack_into for cls, or None if its bytes differ from the ctypes
    constructor's for sample values (n_tensors HopattnTensors followed by the scalars `tail`)."""
    try:
        packer = struct.Struct("@" + _struct_format(cls))
    except (KeyError, struct.error):
        return None
    if packer.size > ctypes.sizeof(cls):
        return None
    values, tensors = [], []
    for i in range(n_tensors):
        ndim = 3 + i % 2
        sizes = [1000 * i + j + 1 for j in range(ndim)]
        strides = [-(100 * i + j + 7) for j in range(ndim)]
        tensors.append(_lib.make_tensor(0x10000 * (i + 1), i % 3, sizes, strides))
        pad = [0] * (4 - ndim)
        values += [0x10000 * (i + 1), i % 3, ndim, *sizes, *pad, *strides, *pad]
    want = cls(*tensors, *tail)
    got = cls()
    packer.pack_into(got, 0, *values, *tail)
    return packer.pack_into if bytes(got) == bytes(want) else None


class _Direct:
    """What the direct path looks up once per process; built on the first torch call."""

    def __init__(self, torch):
        C = torch._C
        self.torch = torch
        self.Tensor = torch.Tensor
        self.strided = torch.strided
        self.float32 = torch.float32
        self.uint8 = torch.uint8
        self.contiguous_format = torch.contiguous_format
        self.empty_like = torch.empty_like
        self.is_grad_enabled = torch.is_grad_enabled
        self.codes = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_FP16, torch.float32: _lib.DTYPE_FP32}
        # Is torch tracing, transforming or intercepting calls? Each is one C call (~0.1 µs).
        self.dispatch_modes = C._len_torch_dispatch_stack
        self.function_modes = C._is_torch_function_mode_enabled
        self.functorch = C._are_functorch_transforms_active
        self.jit_tracing = C._get_tracing_state
        self.disable_torch_function = C.DisableTorchFunction
        try:
            from torch.utils._device import DeviceContext
        except ImportError:
            DeviceContext = None
        self.device_context = DeviceContext
        # The CUDA device and stream as plain ints (what torch.cuda.device / current_stream wrap).
        # Only called once a CUDA tensor has been seen, so a CPU-only torch never reaches them.
        self.current_device = getattr(C, "_cuda_getDevice", None) or torch.cuda.current_device
        self.exchange_device = getattr(C, "_cuda_exchangeDevice", None) or self._exchange_device
        self.restore_device = getattr(C, "_cuda_maybeExchangeDevice", None) or self._exchange_device
        self.raw_stream = getattr(C, "_cuda_getCurrentRawStream", None) or self._raw_stream
        self.FwdArgs = _lib.HopattnFwdArgs
        self.BwdArgs = _lib.HopattnBwdArgs
        # Sample tails: causal, has_softmax_scale, softmax_scale (and the backward's deterministic), then
        # has_window and bounds that need all 64 bits, then softcap.
        self.pack_fwd = _packer(_lib.HopattnFwdArgs, 5, (1, 1, 0.5, 1, 1 << 40, -(1 << 35), 0.25))
        self.pack_bwd = _packer(_lib.HopattnBwdArgs, 9, (1, 1, 0.5, 1, 1, 1 << 40, -(1 << 35), 0.25))
        self.lib = None  # loaded by the first kernel call, after the inputs are checked
        self.apply = _make_direct_function(torch, self)

    def load(self):
        self.lib = _lib.load()
        return self.lib

    def _exchange_device(self, index):
        prev = self.torch.cuda.current_device()
        self.torch.cuda.set_device(index)
        return prev

    def _raw_stream(self, index):
        return self.torch.cuda.current_stream(index).cuda_stream


_direct_state = None


def _direct(torch):
    global _direct_state
    if _direct_state is None:
        _direct_state = _Direct(torch)
    return _direct_state


def _only_device_modes(st):
    """True when every active TorchFunctionMode is a torch.device(...) context or
    torch.set_default_device: those only give factory calls without a device one, and the direct
    path names its devices, so it may run with torch functions disabled under them."""
    DeviceContext = st.device_context
    if DeviceContext is None:
        return False
    C = st.torch._C
    return all(type(C._get_function_stack_at(i)) is DeviceContext for i in range(C._len_torch_function_stack()))


def _check_qkv(st, q, k, v):
    """_check_torch_inputs' rules in a few C calls (q is a torch.Tensor); on any failure the error
    is _check_torch_inputs' own. Returns the dtype codes of q, k and v."""
    T = st.Tensor
    strided = st.strided
    dev = q.get_device()
    if not (
        isinstance(k, T)
        and isinstance(v, T)
        and q.is_cuda
        and k.is_cuda
        and v.is_cuda
        and k.get_device() == dev
        and v.get_device() == dev
        and q.dim() == 4
        and k.dim() == 4
        and v.dim() == 4
        and q.layout is strided
        and k.layout is strided
        and v.layout is strided
    ):
        _check_torch_inputs(st.torch, q, k, v)
    codes = st.codes
    qc = codes.get(q.dtype)
    kc = codes.get(k.dtype)
    vc = codes.get(v.dtype)
    if qc is None or kc is None or vc is None:
        for name, t in (("q", q), ("k", k), ("v", v)):
            _torch_dtype_code(st.torch, name, t)  # raises for the first unsupported one
    return qc, kc, vc


def _fwd_args(st, q, k, v, out, lse, qs, ks, vs, qc, kc, vc, causal, softmax_scale, window=NO_WINDOW, softcap=0.0):
    """HopattnFwdArgs for _direct_forward: out fresh and contiguous like q (shape qs), lse fresh
    (b, h, s) float32 or None, window checked by _check_window, softcap by _check_softcap; byte for
    byte what _lib.make_fwd_args gives for the same tensors."""
    pack = st.pack_fwd
    # make_tensor substitutes strides for empty tensors and size-1 last dims: those take its path.
    if pack is not None and qs[3] != 1 and ks[3] != 1 and vs[3] != 1 and 0 not in qs and 0 not in ks and 0 not in vs:
        b, sq, hq, d = qs
        args = st.FwdArgs()
        try:
            pack(
                args, 0,
                q.data_ptr(), qc, 4, *qs, *q.stride(),
                k.data_ptr(), kc, 4, *ks, *k.stride(),
                v.data_ptr(), vc, 4, *vs, *v.stride(),
                out.data_ptr(), qc, 4, *qs, sq * hq * d, hq * d, d, 1,
                *(_NO_TENSOR if lse is None else (lse.data_ptr(), _lib.DTYPE_FP32, 3, b, hq, sq, 0, hq * sq, sq, 1, 0)),
                1 if causal else 0,
                *((0, 0.0) if softmax_scale is None else (1, float(softmax_scale))),
                *_lib._window_fields(window),
                softcap,
            )
            return args
        except _PACK_ERRORS:  # e.g. a scale beyond float32's range: ctypes' conversion decides, as before
            pass
    torch = st.torch
    return _lib.make_fwd_args(
        _torch_tensor(torch, "q", q),
        _torch_tensor(torch, "k", k),
        _torch_tensor(torch, "v", v),
        _torch_tensor(torch, "out", out),
        _torch_tensor(torch, "lse", lse) if lse is not None else None,
        causal,
        softmax_scale,
        window,
        softcap,
    )


_WORKSPACE_ALIGNMENT = 256  # every workspace of the library


def _workspace(q, nbytes, uint8):
    """(tensor, pointer) of nbytes uninitialised bytes on q's device, or (None, None) for 0 (uint8:
    torch.uint8). The library initialises what it uses on the stream; the caller keeps the tensor
    referenced until the call is enqueued, and torch's allocator orders any reuse of the memory
    after it on the stream. Every workspace of the library (forward, varlen, backward) comes here."""
    if not nbytes:
        return None, None
    workspace = q.new_empty((nbytes,), dtype=uint8)
    ptr = workspace.data_ptr()
    if ptr % _WORKSPACE_ALIGNMENT:
        raise _lib.HopattnError(
            f"workspace: torch allocated {nbytes} bytes at {ptr:#x}, which is not {_WORKSPACE_ALIGNMENT}-byte aligned"
        )
    return workspace, ptr


def _direct_forward(st, c_name, what, q, k, v, causal, softmax_scale, with_lse, window=NO_WINDOW, softcap=0.0):
    """Run the forward kernel `c_name` of the library ('hopattn_forward' or
    'hopattn_forward_reference_cuda') on q's device and its current stream. q is a torch.Tensor.
    Returns (out, lse) with with_lse, else out (the library then skips lse). window: a
    (left, right) pair of ints (_check_window), NO_WINDOW for none; softcap: a float from
    _check_softcap, 0.0 for none.

    The per-call host cost of hopattn.attention is mostly this function, so it is kept flat:
    _check_torch_inputs' rules in a few C calls (its own error on any failure), one allocation
    call per output, HopattnFwdArgs filled by one pack_into, and ints for device and stream."""
    qc, kc, vc = _check_qkv(st, q, k, v)
    dev = q.get_device()
    qs, ks, vs = q.shape, k.shape, v.shape
    b, sq, hq, _ = qs
    # out: contiguous, q's dtype and device, like _torch_forward_outputs (empty_like parses least).
    out = st.empty_like(q, memory_format=st.contiguous_format)
    lse = q.new_empty((b, hq, sq), dtype=st.float32) if with_lse else None
    args = _fwd_args(st, q, k, v, out, lse, qs, ks, vs, qc, kc, vc, causal, softmax_scale, window, softcap)
    lib = st.lib or st.load()
    # The kernel's tail split (hopattn.hpp, forward's workspace form) applies to unmasked problems
    # without softcap, at head_dim 64 and 128, with two key tiles or more (tiles of 128 keys or
    # more): the others skip the size query and its host time (the library decides the rest).
    split = (c_name == "hopattn_forward" and not causal and window == NO_WINDOW and not softcap
             and ks[1] > 128 and qs[3] in (64, 128))
    fn = getattr(lib, c_name)
    prev = None
    if st.current_device() != dev:  # what `with torch.cuda.device(q.device)` does, without its Python layers
        prev = st.exchange_device(dev)
    try:
        nbytes = lib.hopattn_forward_workspace_size(args) if split else 0  # follows the device's SM count
        if nbytes:
            workspace, ptr = _workspace(q, nbytes, st.uint8)
            status = lib.hopattn_forward_with_workspace(args, ptr, nbytes, st.raw_stream(dev))
            del workspace
        else:
            status = fn(args, st.raw_stream(dev))  # ctypes passes the struct by reference
    finally:
        if prev is not None:
            st.restore_device(prev)
    if status:
        _lib.check(status, what)
    if with_lse:
        return out, lse
    return out


def _tensor_fields(t, code):
    """HopattnTensor's fields for a 4-dim tensor, or None where make_tensor would substitute strides."""
    sizes = t.shape
    if len(sizes) != 4 or sizes[3] == 1 or 0 in sizes:
        return None
    return (t.data_ptr(), code, 4, *sizes, *t.stride())


def _bwd_args(st, q, k, v, out, dout, lse, dq, dk, dv, codes, causal, softmax_scale, deterministic, window=NO_WINDOW,
              softcap=0.0):
    """HopattnBwdArgs (codes: q's, k's and v's dtype codes; dout in q's dtype, dq, dk, dv
    empty_like q, k, v); byte for byte what _lib.make_bwd_args gives for the same tensors."""
    pack = st.pack_bwd
    if pack is not None:
        qc, kc, vc = codes
        lse_sizes = lse.shape
        lse_code = st.codes.get(lse.dtype)
        fields = (
            _tensor_fields(q, qc),
            _tensor_fields(k, kc),
            _tensor_fields(v, vc),
            _tensor_fields(out, st.codes.get(out.dtype)),
            _tensor_fields(dout, qc),
            (lse.data_ptr(), lse_code, 3, *lse_sizes, 0, *lse.stride(), 0)
            if len(lse_sizes) == 3 and lse_sizes[2] != 1 and 0 not in lse_sizes and lse_code is not None
            else None,
            _tensor_fields(dq, qc),
            _tensor_fields(dk, kc),
            _tensor_fields(dv, vc),
        )
        if None not in fields and fields[3][1] is not None:  # else: make_tensor's substitutions or errors
            args = st.BwdArgs()
            try:
                pack(
                    args, 0,
                    *fields[0], *fields[1], *fields[2], *fields[3], *fields[4], *fields[5], *fields[6],
                    *fields[7], *fields[8],
                    1 if causal else 0,
                    *((0, 0.0) if softmax_scale is None else (1, float(softmax_scale))),
                    1 if deterministic else 0,
                    *_lib._window_fields(window),
                    softcap,
                )
                return args
            except _PACK_ERRORS:
                pass
    torch = st.torch
    return _lib.make_bwd_args(
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
        window,
        softcap,
    )




def _direct_backward(st, q, k, v, out, dout, lse, causal, softmax_scale, deterministic, window=NO_WINDOW, softcap=0.0):
    """dq, dk, dv (torch.empty_like q, k, v) from hopattn_backward on q's device and current stream;
    causal, softmax_scale, window and softcap those of the forward call that produced out and lse."""
    codes = _check_qkv(st, q, k, v)
    torch = st.torch
    dout = _torch_dout(torch, dout, q)
    dq, dk, dv = _torch_grad_outputs(torch, q, k, v)
    args = _bwd_args(st, q, k, v, out, dout, lse, dq, dk, dv, codes, causal, softmax_scale, deterministic, window,
                     softcap)
    lib = st.lib or st.load()
    dev = q.get_device()
    prev = None
    if st.current_device() != dev:  # the workspace size may depend on the device, so it is inside too
        prev = st.exchange_device(dev)
    try:
        nbytes = lib.hopattn_backward_workspace_size(args)
        workspace, workspace_ptr = _workspace(q, nbytes, st.uint8)
        status = lib.hopattn_backward(args, workspace_ptr, nbytes, st.raw_stream(dev))
        del workspace
    finally:
        if prev is not None:
            st.restore_device(prev)
    if status:
        _lib.check(status, "hopattn backward")
    return dq, dk, dv


def _direct_autograd(torch, st, name, run_forward, run_backward, n_inputs):
    """The apply of a torch.autograd.Function for a direct (ctypes) route, shared by hopattn.attention
    and hopattn.varlen_attention. run_forward(ctx, *inputs) -> (out, lse, return_lse) launches the
    forward and saves what the backward needs; run_backward(ctx, dout) -> one gradient (or None)
    per input. lse is never differentiable, and no zero gradient is materialised for it."""
    from torch.autograd.function import once_differentiable

    def backward_impl(ctx, dout, *unused_dlse):
        if dout is None:  # out took no part in the loss
            return (None,) * n_inputs
        return run_backward(ctx, dout)

    # With create_graph=True the gradients would carry no history (ctypes): once_differentiable
    # makes a double backward raise instead, as the ops' backward (no autograd of its own) does. Its
    # no_grad context costs a few µs, so a plain backward (grad mode off) skips it.
    backward_once = once_differentiable(backward_impl)

    def forward(ctx, *inputs):
        out, lse, return_lse = run_forward(ctx, *inputs)
        ctx.set_materialize_grads(False)
        if return_lse:
            ctx.mark_non_differentiable(lse)
            return out, lse
        return out

    def backward(ctx, dout, *unused_dlse):
        if st.is_grad_enabled():
            return backward_once(ctx, dout, *unused_dlse)
        return backward_impl(ctx, dout, *unused_dlse)

    function = type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    # Function.apply's Python layer binds setup_context arguments and handles functorch
    # transforms; these Functions have no setup_context and the direct route never runs under a
    # transform, so the C apply underneath it is called directly (several µs less per call).
    base_apply = getattr(getattr(torch._C, "_FunctionBase", None), "__dict__", {}).get("apply")
    if base_apply is not None and hasattr(base_apply, "__get__"):
        return base_apply.__get__(None, function)
    return function.apply


def _make_direct_function(torch, st):
    """hopattn.attention's autograd on the direct path when a gradient is needed. It saves and
    recomputes exactly what hopattn::fwd's registered autograd does: q, k, v, out and lse (and
    keeps the options, the window and softcap included, for the backward)."""

    def run_forward(ctx, q, k, v, causal, softmax_scale, return_lse, deterministic, window, softcap):
        out, lse = _direct_forward(st, "hopattn_forward", "hopattn forward", q, k, v, causal, softmax_scale, True,
                                   window, softcap)
        ctx.save_for_backward(q, k, v, out, lse)  # the backward recomputes P from lse
        ctx.hopattn_args = (causal, softmax_scale, deterministic, window, softcap)
        return out, lse, return_lse

    def run_backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, softmax_scale, deterministic, window, softcap = ctx.hopattn_args
        if torch.compiler.is_compiling():  # compiled autograd traces this: the op is traceable
            dq, dk, dv = _torch_ops_module().bwd(dout, q, k, v, out, lse, causal, softmax_scale, deterministic,
                                                 *window, softcap)
        else:
            dq, dk, dv = _direct_backward(st, q, k, v, out, dout, lse, causal, softmax_scale, deterministic, window,
                                          softcap)
        return dq, dk, dv, None, None, None, None, None, None

    return _direct_autograd(torch, st, "HopattnAttentionFunction", run_forward, run_backward, 9)


def _torch_ops_module():
    """hopattn.torch_ops (which registers hopattn::fwd / hopattn::bwd), imported on the first torch
    tensor so that `import hopattn` never imports torch. Under torch.compile dynamo runs this
    import while tracing, so the ops exist before the traced call refers to them. Deliberately no
    module-level cache: dynamo would guard on the cache being empty and recompile once it is set."""
    from . import torch_ops

    return torch_ops


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


def _numpy_tensor(name, a, code=None):
    """A HopattnTensor for a; code (a _lib.DTYPE_*) defaults to a's attention dtype."""
    if code is None:
        code = _numpy_dtype_code(name, a)
    item = a.itemsize
    strides = a.strides
    if any(s % item for s in strides):
        raise _lib.InvalidArgumentError(f"{name}: byte strides {strides} are not multiples of the item size {item}")
    return _lib.make_tensor(a.__array_interface__["data"][0], code, a.shape, [s // item for s in strides])


def _check_numpy_inputs(named_arrays, ndim=4, layout=_LAYOUT):
    """Each (name, a) is a numpy.ndarray (TypeError) with `ndim` dims, described as `layout`."""
    import numpy as np

    for name, a in named_arrays:
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray like q, got {type(a).__name__}")
        if a.ndim != ndim:
            raise _lib.InvalidArgumentError(f"{name}: expected {ndim} dims {layout}, got shape {a.shape}")


def _run_numpy(q, k, v, causal, softmax_scale, return_lse, window=NO_WINDOW, softcap=0.0):
    import numpy as np

    _check_numpy_inputs((("q", q), ("k", k), ("v", v)))
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
        window,
        softcap,
    )
    # q, k, v, out and lse stay referenced by this frame, so their buffers outlive the call.
    _lib.check(_lib.load().hopattn_forward_cpu(ctypes.byref(args)), "hopattn CPU reference")
    return (out, lse) if return_lse else out


def _run_numpy_backward(q, k, v, dout, causal, softmax_scale, window=NO_WINDOW, softcap=0.0):
    import numpy as np

    _check_numpy_inputs((("q", q), ("k", k), ("v", v), ("dout", dout)))
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
        window,
        softcap,
    )
    _lib.check(_lib.load().hopattn_backward_cpu(ctypes.byref(args)), "hopattn CPU reference backward")
    return dq, dk, dv


# --- public API -----------------------------------------------------------------------------------


def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False, deterministic=False, window_size=NO_WINDOW,
              softcap=0.0):
    """Exact softmax attention; differentiable on torch tensors.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim), with
    heads_q a multiple of heads_kv (GQA/MQA). Any strides, but the last dim must be contiguous.

    * torch CUDA tensors (bfloat16/float16, head_dim 64/128/256, Hopper GPU): runs the sm90 kernel
      on the current stream; nothing is synchronised, outputs come from torch's allocator.
    * numpy arrays (float32/float16): runs the CPU reference (double accumulation), for testing.
      Gradients of the numpy path: attention_backward().

    causal: bottom-right aligned mask (query i sees key j iff j <= i + seqlen_k - seqlen_q); a row
    that sees no key gets out = 0 and lse = -inf. softmax_scale defaults to 1/sqrt(head_dim).
    window_size: (left, right) sliding window, FlashAttention's: query i sees key j iff
    i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right (bottom-right aligned
    like causal), -1 leaving that side unbounded; (-1, -1), the default, is no window. causal is
    the window's right = 0, so with causal=True right must be -1 or 0. The backward uses the same
    window. Python checks only that it is a pair of ints; the library rejects bad values
    (below -1, or right > 0 with causal) with InvalidArgumentError naming window.left/window.right.
    softcap: score softcapping (Gemma 2, Grok; FlashAttention's softcap): with softcap > 0 each
    score becomes softcap * tanh(softmax_scale * q.k / softcap) before the masks and the softmax,
    so lse is the log-sum-exp of the capped scores; 0.0, the default, is off. It must be a finite
    float >= 0 (ValueError naming softcap otherwise, bool included). The backward uses the same
    softcap. Not on the FP8 or KV-cache paths.

    Returns out (batch, seqlen_q, heads_q, head_dim), contiguous, q's dtype; with return_lse=True
    returns (out, lse) where lse (batch, heads_q, seqlen_q) float32 is the natural-log
    log-sum-exp of the scaled scores.

    Autograd: when grad mode is on and q, k or v requires grad, out is differentiable with respect
    to q, k and v (the sm90 backward kernels: head_dim 64/128/256; q, k, v, out and lse are saved
    for the backward pass). lse is never differentiable. Gradients are in q's dtype; with GQA dk/dv
    are summed over each group's query heads. deterministic=True makes the backward bitwise
    reproducible (dq's cross-block sum is ordered, at some speed cost); it has no effect on the
    forward or on numpy inputs. Without grad, no history is recorded.

    Two routes, the same kernels and bits: a plain eager call goes straight to the library through
    ctypes (and a lean torch.autograd.Function when a gradient is needed), for the least host time
    per call; under torch.compile / torch.export, fake tensors or other tensor subclasses, dispatch
    or function modes (other than torch.device), functorch transforms and torch.jit.trace it runs
    the custom op torch.ops.hopattn.fwd (its backward: hopattn::bwd; see hopattn.torch_ops), so
    torch.compile(fullgraph=True) traces it without a graph break. Both routes can be captured in
    CUDA graphs. The op always writes lse (batch * heads_q * seqlen_q floats); so does the direct
    route when a gradient is needed.
    """
    _check_scale(softmax_scale)
    window = _check_window(window_size)
    softcap = _check_softcap(softcap)
    torch = _torch_module_of(q)
    if torch is not None:
        # Plain eager: the direct route. is_compiling() comes first: dynamo reads it as True, so a
        # traced call never looks at the state below (no guard on it, nothing it cannot trace).
        if not torch.compiler.is_compiling():
            st = _direct_state or _direct(torch)
            T = st.Tensor
            if (
                type(q) is T
                and type(k) is T
                and type(v) is T
                and not st.dispatch_modes()
                and not st.functorch()
                and st.jit_tracing() is None
            ):
                if not st.function_modes():
                    if st.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
                        scale = None if softmax_scale is None else float(softmax_scale)
                        return st.apply(q, k, v, bool(causal), scale, bool(return_lse), bool(deterministic), window,
                                        softcap)
                    return _direct_forward(
                        st, "hopattn_forward", "hopattn forward", q, k, v, causal, softmax_scale, return_lse, window,
                        softcap,
                    )
                if _only_device_modes(st):
                    # Under torch.device(...) / set_default_device every tensor method would detour
                    # through the mode's Python handler; the direct route names its devices anyway.
                    # With torch functions disabled no mode is enabled, so this call goes direct.
                    with st.disable_torch_function():
                        return attention(q, k, v, causal, softmax_scale, return_lse, deterministic, window, softcap)
        # The op route. Checked here, before dispatch: the custom op would route a CPU tensor to its
        # CPU-reference kernel and reject a non-tensor with a schema error instead of these messages.
        _check_torch_inputs(torch, q, k, v)
        scale = None if softmax_scale is None else float(softmax_scale)
        out, lse = _torch_ops_module().fwd(q, k, v, bool(causal), scale, bool(deterministic), *window, softcap)
        return (out, lse) if return_lse else out
    if _is_numpy_array(q):
        return _run_numpy(q, k, v, causal, softmax_scale, return_lse, window, softcap)
    raise TypeError(f"q: expected a torch.Tensor (CUDA) or numpy.ndarray, got {type(q).__name__}")


def attention_backward(q, k, v, dout, causal=False, softmax_scale=None, window_size=NO_WINDOW, softcap=0.0):
    """Gradients (dq, dk, dv) of attention(q, k, v, causal, softmax_scale, window_size=window_size,
    softcap=softcap) given dout = dL/dout, on numpy arrays through the CPU reference (double
    accumulation; out and lse are recomputed).

    q, k, v as for attention(); dout like out: (batch, seqlen_q, heads_q, head_dim) in q's dtype,
    any strides with a contiguous last dim. Returns new C-contiguous arrays dq (like q), dk, dv
    (like k, v; with GQA summed over the query heads of each group), all in q's dtype (float32 or
    float16). Rows that see no key contribute nothing (their dq is 0), nor do keys outside every
    row's window (their dk and dv are 0).

    For torch tensors use autograd instead: hopattn.attention(q, k, v).backward(dout).
    """
    _check_scale(softmax_scale)
    window = _check_window(window_size)
    softcap = _check_softcap(softcap)
    if _torch_module_of(q) is not None:
        raise TypeError(
            "q: attention_backward takes numpy arrays; for torch tensors use autograd "
            "(out = hopattn.attention(q, k, v, ...); out.backward(dout))"
        )
    if _is_numpy_array(q):
        return _run_numpy_backward(q, k, v, dout, causal, softmax_scale, window, softcap)
    raise TypeError(f"q: expected a numpy.ndarray, got {type(q).__name__}")


def attention_reference(q, k, v, causal=False, softmax_scale=None, return_lse=False, window_size=NO_WINDOW,
                        softcap=0.0):
    """Same forward contract as attention() (window_size and softcap included), computed by the
    simple CUDA reference kernel (torch tensors; any head_dim up to 512, any CUDA GPU) or the CPU
    reference (numpy arrays). For tests; not differentiable (the result carries no autograd history)."""
    _check_scale(softmax_scale)
    window = _check_window(window_size)
    softcap = _check_softcap(softcap)
    torch = _torch_module_of(q)
    if torch is not None:
        return _direct_forward(
            _direct(torch), "hopattn_forward_reference_cuda", "hopattn CUDA reference", q, k, v, causal, softmax_scale,
            return_lse, window, softcap,
        )
    if _is_numpy_array(q):
        return _run_numpy(q, k, v, causal, softmax_scale, return_lse, window, softcap)
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
