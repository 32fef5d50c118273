# Loads libhopattn.so through ctypes and mirrors include/hopattn/hopattn_c.h: the structs, the
# function signatures and the status codes. Everything above this file speaks Python objects;
# everything below it is the C ABI, so a change to hopattn_c.h needs a matching change here only.
import ctypes
import os
import threading
from pathlib import Path

# Must equal HOPATTN_ABI_VERSION in hopattn_c.h; checked at load so a stale .so fails loudly
# instead of misreading structs. 7: hopattn_kvcache_args gained the sliding window. 9: the FP8
# varlen structs and entry points (hopattn_fp8_varlen_attention_args, hopattn_fp8_varlen_fwd_args).
# 10: hopattn_forward_varlen_with_workspace and its size query (the dynamic tile order's counter).
# 11: hopattn_forward_with_workspace (the forward's tail split).
ABI_VERSION = 12

# enum hopattn_dtype
DTYPE_BF16 = 0
DTYPE_FP16 = 1
DTYPE_FP32 = 2
DTYPE_INT32 = 3  # index tensors only (cu_seqlens, seqused)
DTYPE_E4M3 = 4  # fp8 e4m3fn: q/k/v of forward_fp8, out of quantize_fp8

# enum hopattn_status
STATUS_SUCCESS = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_UNSUPPORTED_DEVICE = 3
STATUS_CUDA_ERROR = 4

LIBRARY_ENV = "HOPATTN_LIBRARY"
LIBRARY_NAME = "libhopattn.so"


class HopattnTensor(ctypes.Structure):
    """struct hopattn_tensor: a strided view, sizes and strides counted in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("sizes", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


# The ABI 6 tail of the four attention structs: the window (read only when has_window) and softcap
# (0: off; > 0: scores become softcap * tanh(scale * q.k / softcap) before the softmax; the Python
# API's softcap=, checked by ops._check_softcap).
_WINDOW_SOFTCAP_FIELDS = [
    ("has_window", ctypes.c_int32),
    ("window_left", ctypes.c_int64),
    ("window_right", ctypes.c_int64),
    ("softcap", ctypes.c_float),
]


class HopattnFwdArgs(ctypes.Structure):
    """struct hopattn_fwd_args (ABI 6: the window fields, read only when has_window)."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
    ] + _WINDOW_SOFTCAP_FIELDS


class HopattnBwdArgs(ctypes.Structure):
    """struct hopattn_bwd_args (ABI 2)."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("dout", HopattnTensor),
        ("lse", HopattnTensor),
        ("dq", HopattnTensor),
        ("dk", HopattnTensor),
        ("dv", HopattnTensor),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("deterministic", ctypes.c_int32),
    ] + _WINDOW_SOFTCAP_FIELDS


class HopattnVarlenFwdArgs(ctypes.Structure):
    """struct hopattn_varlen_fwd_args (ABI 4): packed (total_tokens, heads, head_dim) q/k/v/out,
    lse (heads_q, total_q) or NULL, int32 cu_seqlens (batch + 1) and optional seqused (batch)."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("cu_seqlens_q", HopattnTensor),
        ("cu_seqlens_k", HopattnTensor),
        ("seqused_q", HopattnTensor),
        ("seqused_k", HopattnTensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("check_index_values", ctypes.c_int32),
    ] + _WINDOW_SOFTCAP_FIELDS


class HopattnVarlenBwdArgs(ctypes.Structure):
    """struct hopattn_varlen_bwd_args (ABI 5): hopattn_varlen_fwd_args' tensors and options plus
    dout, dq, dk, dv (packed like out, q, k, v); lse is required, seqused optional."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("dout", HopattnTensor),
        ("lse", HopattnTensor),
        ("dq", HopattnTensor),
        ("dk", HopattnTensor),
        ("dv", HopattnTensor),
        ("cu_seqlens_q", HopattnTensor),
        ("cu_seqlens_k", HopattnTensor),
        ("seqused_q", HopattnTensor),
        ("seqused_k", HopattnTensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("deterministic", ctypes.c_int32),
        ("check_index_values", ctypes.c_int32),
    ] + _WINDOW_SOFTCAP_FIELDS


# FP8 (ABI 3). Optional tensors (lse, descales) are left out as HopattnTensor(): data NULL, ndim 0.


class HopattnFp8AttentionArgs(ctypes.Structure):
    """struct hopattn_fp8_attention_args: bf16/fp16 q, k, v quantised inside the call."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("incoherent", ctypes.c_int32),
        ("block_quant", ctypes.c_int32),
        ("seed", ctypes.c_uint32),
        ("rotate_v", ctypes.c_int32),
        ("quantize_v", ctypes.c_int32),
    ]


class HopattnFp8FwdArgs(ctypes.Structure):
    """struct hopattn_fp8_fwd_args: e4m3 q, k, v with optional fp32 descales."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("q_descale", HopattnTensor),
        ("k_descale", HopattnTensor),
        ("v_descale", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
    ]


class HopattnFp8VarlenAttentionArgs(ctypes.Structure):
    """struct hopattn_fp8_varlen_attention_args (ABI 9): HopattnFp8AttentionArgs on a packed batch,
    bf16/fp16 (total_tokens, heads, head_dim) q/k/v/out, lse (heads_q, total_q) or absent, int32
    cu_seqlens (batch + 1) and optional seqused (batch), as HopattnVarlenFwdArgs. Note the field
    order of the tail: rotate_v before seed, then check_index_values (not the fixed-length order)."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("cu_seqlens_q", HopattnTensor),
        ("cu_seqlens_k", HopattnTensor),
        ("seqused_q", HopattnTensor),
        ("seqused_k", HopattnTensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("incoherent", ctypes.c_int32),
        ("block_quant", ctypes.c_int32),
        ("rotate_v", ctypes.c_int32),
        ("seed", ctypes.c_uint32),
        ("check_index_values", ctypes.c_int32),
    ]


class HopattnFp8VarlenFwdArgs(ctypes.Structure):
    """struct hopattn_fp8_varlen_fwd_args (ABI 9): HopattnFp8FwdArgs on a packed batch, e4m3 q/k/v
    with optional fp32 descales per (sequence, head[, block]), the index tensors as
    HopattnVarlenFwdArgs."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("q_descale", HopattnTensor),
        ("k_descale", HopattnTensor),
        ("v_descale", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("cu_seqlens_q", HopattnTensor),
        ("cu_seqlens_k", HopattnTensor),
        ("seqused_q", HopattnTensor),
        ("seqused_k", HopattnTensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("check_index_values", ctypes.c_int32),
    ]


class HopattnFp8QuantizeArgs(ctypes.Structure):
    """struct hopattn_fp8_quantize_args."""

    _fields_ = [
        ("in_", HopattnTensor),  # `in` in C; a Python keyword
        ("out", HopattnTensor),
        ("descale", HopattnTensor),
        ("rotate", ctypes.c_int32),
        ("block_quant", ctypes.c_int32),
        ("seed", ctypes.c_uint32),
    ]


# --- exceptions ---------------------------------------------------------------------------------
# Each also derives from the builtin a caller would naturally catch (ValueError for bad input...),
# while HopattnError lets callers catch everything from this library at once.


class HopattnError(Exception):
    """Base class of errors reported by libhopattn; `status` holds the C status code."""

    status = -1


class InvalidArgumentError(HopattnError, ValueError):
    status = STATUS_INVALID_ARGUMENT


class UnsupportedError(HopattnError, NotImplementedError):
    status = STATUS_UNSUPPORTED


class UnsupportedDeviceError(HopattnError, RuntimeError):
    status = STATUS_UNSUPPORTED_DEVICE


class CudaError(HopattnError, RuntimeError):
    status = STATUS_CUDA_ERROR


class LibraryNotFoundError(ImportError):
    """libhopattn.so could not be located or loaded."""


_ERROR_BY_STATUS = {
    STATUS_INVALID_ARGUMENT: InvalidArgumentError,
    STATUS_UNSUPPORTED: UnsupportedError,
    STATUS_UNSUPPORTED_DEVICE: UnsupportedDeviceError,
    STATUS_CUDA_ERROR: CudaError,
}


# --- loading ------------------------------------------------------------------------------------

_lock = threading.Lock()
_lib = None
_lib_path = None


def packaged_library_path() -> Path:
    """Where `pip install .` puts the library: hopattn/lib/libhopattn.so next to this file."""
    return Path(__file__).resolve().parent / "lib" / LIBRARY_NAME


def find_library() -> Path:
    """The library to load: $HOPATTN_LIBRARY if set, else the packaged copy."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise LibraryNotFoundError(
                f"{LIBRARY_ENV}={env!r} does not name an existing file; point it at a built "
                f"{LIBRARY_NAME} (e.g. build/{LIBRARY_NAME}) or unset it to use the packaged copy"
            )
        return path
    path = packaged_library_path()
    if path.is_file():
        return path
    raise LibraryNotFoundError(
        f"{LIBRARY_NAME} not found. Either set {LIBRARY_ENV} to a built library "
        f"(cmake --build build && export {LIBRARY_ENV}=$PWD/build/{LIBRARY_NAME}), "
        f"or install the package with `pip install .` so it lands at {path}"
    )


def _declare(lib):
    """Set argtypes/restype so ctypes neither truncates pointers nor guesses int returns."""
    args_p = ctypes.POINTER(HopattnFwdArgs)
    bwd_args_p = ctypes.POINTER(HopattnBwdArgs)
    varlen_p = ctypes.POINTER(HopattnVarlenFwdArgs)
    varlen_bwd_p = ctypes.POINTER(HopattnVarlenBwdArgs)
    fp8_attn_p = ctypes.POINTER(HopattnFp8AttentionArgs)
    fp8_fwd_p = ctypes.POINTER(HopattnFp8FwdArgs)
    fp8_quant_p = ctypes.POINTER(HopattnFp8QuantizeArgs)
    fp8_varlen_attn_p = ctypes.POINTER(HopattnFp8VarlenAttentionArgs)
    fp8_varlen_fwd_p = ctypes.POINTER(HopattnFp8VarlenFwdArgs)
    workspace_call = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]  # workspace, bytes, stream
    sigs = {
        "hopattn_abi_version": ([], ctypes.c_int),
        "hopattn_version": ([], ctypes.c_char_p),
        "hopattn_last_error": ([], ctypes.c_char_p),
        "hopattn_build_instantiations": ([], ctypes.c_char_p),
        "hopattn_forward": ([args_p, ctypes.c_void_p], ctypes.c_int),
        "hopattn_forward_reference_cuda": ([args_p, ctypes.c_void_p], ctypes.c_int),
        "hopattn_forward_cpu": ([args_p], ctypes.c_int),
        "hopattn_forward_workspace_size": ([args_p], ctypes.c_size_t),
        "hopattn_forward_with_workspace": ([args_p, *workspace_call], ctypes.c_int),
        "hopattn_check_device": ([], ctypes.c_int),
        "hopattn_forward_varlen": ([varlen_p, ctypes.c_void_p], ctypes.c_int),
        "hopattn_forward_varlen_cpu": ([varlen_p], ctypes.c_int),
        "hopattn_forward_varlen_workspace_size": ([varlen_p], ctypes.c_size_t),
        "hopattn_forward_varlen_with_workspace": (
            [varlen_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p],
            ctypes.c_int,
        ),
        "hopattn_backward_workspace_size": ([bwd_args_p], ctypes.c_size_t),
        "hopattn_backward": ([bwd_args_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_int),
        "hopattn_backward_cpu": ([bwd_args_p], ctypes.c_int),
        "hopattn_attention_fp8_workspace_size": ([fp8_attn_p], ctypes.c_size_t),
        "hopattn_attention_fp8": ([fp8_attn_p, *workspace_call], ctypes.c_int),
        "hopattn_forward_fp8_workspace_size": ([fp8_fwd_p], ctypes.c_size_t),
        "hopattn_forward_fp8": ([fp8_fwd_p, *workspace_call], ctypes.c_int),
        "hopattn_quantize_fp8": ([fp8_quant_p, ctypes.c_void_p], ctypes.c_int),
        "hopattn_attention_fp8_varlen_workspace_size": ([fp8_varlen_attn_p], ctypes.c_size_t),
        "hopattn_attention_fp8_varlen": ([fp8_varlen_attn_p, *workspace_call], ctypes.c_int),
        "hopattn_forward_fp8_varlen_workspace_size": ([fp8_varlen_fwd_p], ctypes.c_size_t),
        "hopattn_forward_fp8_varlen": ([fp8_varlen_fwd_p, *workspace_call], ctypes.c_int),
        "hopattn_backward_varlen_workspace_size": ([varlen_bwd_p], ctypes.c_size_t),
        "hopattn_backward_varlen": ([varlen_bwd_p, *workspace_call], ctypes.c_int),
    }
    for name, (argtypes, restype) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype


def load():
    """The loaded ctypes library (loaded once, on first use, so `import hopattn` never fails)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = find_library()
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                raise LibraryNotFoundError(f"could not load {path}: {e}") from e
            # The version first: a stale library lacks newer symbols, and "ABI version 3, expected 4"
            # says more than the first missing symbol would.
            try:
                lib.hopattn_abi_version.argtypes = []
                lib.hopattn_abi_version.restype = ctypes.c_int
            except AttributeError as e:
                raise LibraryNotFoundError(f"{path} is missing a hopattn C ABI symbol: {e}") from e
            abi = lib.hopattn_abi_version()
            if abi != ABI_VERSION:
                raise LibraryNotFoundError(
                    f"{path} has C ABI version {abi}, but this Python package expects {ABI_VERSION}; "
                    "rebuild the library or reinstall the package"
                )
            try:
                _declare(lib)
            except AttributeError as e:
                raise LibraryNotFoundError(f"{path} is missing a hopattn C ABI symbol: {e}") from e
            _lib_path = path
            _lib = lib
    return _lib


def library_path():
    """Path of the loaded library (loads it if needed)."""
    load()
    return _lib_path


def last_error() -> str:
    msg = load().hopattn_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int, what: str) -> None:
    """Raise the exception matching a non-zero status, carrying hopattn_last_error()."""
    if status == STATUS_SUCCESS:
        return
    cls = _ERROR_BY_STATUS.get(status, HopattnError)
    raise cls(f"{what}: {last_error() or f'failed with status {status}'}")


_Int64x4 = ctypes.c_int64 * 4


def make_tensor(data_ptr: int, dtype_code: int, sizes, strides) -> HopattnTensor:
    """Fill a HopattnTensor; sizes/strides are sequences of at most 4 ints (strides in elements).
    Called several times per attention call, so it stays lean (one constructor, no loops)."""
    ndim = len(sizes)
    if ndim > 4 or len(strides) != ndim:
        raise ValueError("hopattn tensors have at most 4 dims and one stride per dim")
    strides = addressing_strides(sizes, strides)
    return HopattnTensor(data_ptr or None, dtype_code, ndim, _Int64x4(*sizes), _Int64x4(*strides))


def addressing_strides(sizes, strides):
    """The strides the C structs carry: strides of an empty array, or of a size-1 last dim, address
    nothing, and numpy reports 0 for them; contiguous values are substituted so the library's layout
    checks see a normal tensor. Shared by make_tensor and the packed-struct fast paths."""
    if 0 in sizes:
        return _contiguous_strides(sizes)
    if sizes and sizes[-1] == 1:
        return (*strides[:-1], 1)
    return strides


def _contiguous_strides(sizes):
    """Row-major strides as the library computes them (hopattn::make_tensor, and its exact-layout
    checks of lse and descales): plain products, so a dim after a zero-size one has stride 0."""
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    return strides


def _scale_fields(softmax_scale):
    return (0, 0.0) if softmax_scale is None else (1, float(softmax_scale))


_NO_WINDOW_FIELDS = (0, -1, -1)


def _window_fields(window_size):
    """(has_window, left, right) of the C structs; None or (-1, -1) is no window. The direct torch
    route calls this on every call, so the common no-window tuple is answered first."""
    if window_size is None or (type(window_size) is tuple and window_size == (-1, -1)):
        return _NO_WINDOW_FIELDS
    left, right = window_size
    left, right = int(left), int(right)
    return _NO_WINDOW_FIELDS if (left, right) == (-1, -1) else (1, left, right)


def make_fwd_args(q, k, v, out, lse, causal: bool, softmax_scale, window_size=None,
                  softcap: float = 0.0) -> HopattnFwdArgs:
    """Pack HopattnTensors into HopattnFwdArgs; lse may be None (not computed); window_size is
    (left, right) with -1 for unbounded, or None; softcap 0 is off."""
    if lse is None:
        lse = HopattnTensor()  # data NULL: the library skips lse
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnFwdArgs(q, k, v, out, lse, 1 if causal else 0, has_scale, scale, *_window_fields(window_size),
                          softcap)


def make_bwd_args(q, k, v, out, dout, lse, dq, dk, dv, causal: bool, softmax_scale, deterministic: bool,
                  window_size=None, softcap: float = 0.0) -> HopattnBwdArgs:
    """Pack HopattnTensors into HopattnBwdArgs; out and lse may be None (NULL tensors: the CPU
    reference recomputes them; the GPU path requires both). window_size and softcap: the forward's."""
    if out is None:
        out = HopattnTensor()
    if lse is None:
        lse = HopattnTensor()
    has_scale, scale = (0, 0.0) if softmax_scale is None else (1, float(softmax_scale))
    return HopattnBwdArgs(
        q, k, v, out, dout, lse, dq, dk, dv, 1 if causal else 0, has_scale, scale, 1 if deterministic else 0,
        *_window_fields(window_size), softcap,
    )


def make_varlen_fwd_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q: int,
                         max_seqlen_k: int, causal: bool, softmax_scale, check_index_values: bool,
                         window_size=None, softcap: float = 0.0) -> HopattnVarlenFwdArgs:
    """Pack HopattnTensors into HopattnVarlenFwdArgs; lse, seqused_q and seqused_k may be None
    (lse not computed; every token of each sequence used)."""
    absent = HopattnTensor
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnVarlenFwdArgs(
        q, k, v, out,
        absent() if lse is None else lse,
        cu_seqlens_q, cu_seqlens_k,
        absent() if seqused_q is None else seqused_q,
        absent() if seqused_k is None else seqused_k,
        max_seqlen_q, max_seqlen_k,
        1 if causal else 0, has_scale, scale, 1 if check_index_values else 0,
        *_window_fields(window_size), softcap,
    )


def make_varlen_bwd_args(q, k, v, out, dout, lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k,
                        max_seqlen_q: int, max_seqlen_k: int, causal: bool, softmax_scale, deterministic: bool,
                        check_index_values: bool, window_size=None,
                         softcap: float = 0.0) -> HopattnVarlenBwdArgs:
    """Pack HopattnTensors into HopattnVarlenBwdArgs; seqused_q and seqused_k may be None (every
    token of each sequence used), lse None only to see the library's error (it is required)."""
    absent = HopattnTensor
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnVarlenBwdArgs(
        q, k, v, out, dout,
        absent() if lse is None else lse,
        dq, dk, dv,
        cu_seqlens_q, cu_seqlens_k,
        absent() if seqused_q is None else seqused_q,
        absent() if seqused_k is None else seqused_k,
        max_seqlen_q, max_seqlen_k,
        1 if causal else 0, has_scale, scale, 1 if deterministic else 0, 1 if check_index_values else 0,
        *_window_fields(window_size), softcap,
    )


def make_fp8_attention_args(q, k, v, out, lse, causal: bool, softmax_scale, incoherent: bool, block_quant: bool,
                            seed: int, rotate_v: bool = False, quantize_v: bool = True) -> HopattnFp8AttentionArgs:
    """Pack HopattnTensors into HopattnFp8AttentionArgs; lse may be None (not computed)."""
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnFp8AttentionArgs(
        q, k, v, out, HopattnTensor() if lse is None else lse, 1 if causal else 0, has_scale, scale,
        1 if incoherent else 0, 1 if block_quant else 0, seed, 1 if rotate_v else 0, 1 if quantize_v else 0,
    )


def make_fp8_fwd_args(q, k, v, q_descale, k_descale, v_descale, out, lse, causal: bool, softmax_scale) -> HopattnFp8FwdArgs:
    """Pack HopattnTensors into HopattnFp8FwdArgs; the descales and lse may be None (left out:
    a missing descale means 1, a missing lse is not computed)."""
    absent = HopattnTensor
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnFp8FwdArgs(
        q, k, v,
        absent() if q_descale is None else q_descale,
        absent() if k_descale is None else k_descale,
        absent() if v_descale is None else v_descale,
        out,
        absent() if lse is None else lse,
        1 if causal else 0, has_scale, scale,
    )


def make_fp8_varlen_attention_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k,
                                   max_seqlen_q: int, max_seqlen_k: int, causal: bool, softmax_scale,
                                   incoherent: bool, block_quant: bool, seed: int, rotate_v: bool = False,
                                   check_index_values: bool = False) -> HopattnFp8VarlenAttentionArgs:
    """Pack HopattnTensors into HopattnFp8VarlenAttentionArgs; lse, seqused_q and seqused_k may be
    None (lse not computed; every token of each sequence used)."""
    absent = HopattnTensor
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnFp8VarlenAttentionArgs(
        q, k, v, out,
        absent() if lse is None else lse,
        cu_seqlens_q, cu_seqlens_k,
        absent() if seqused_q is None else seqused_q,
        absent() if seqused_k is None else seqused_k,
        max_seqlen_q, max_seqlen_k,
        1 if causal else 0, has_scale, scale,
        1 if incoherent else 0, 1 if block_quant else 0, 1 if rotate_v else 0, seed,
        1 if check_index_values else 0,
    )


def make_fp8_varlen_fwd_args(q, k, v, q_descale, k_descale, v_descale, out, lse, cu_seqlens_q, cu_seqlens_k,
                             seqused_q, seqused_k, max_seqlen_q: int, max_seqlen_k: int, causal: bool, softmax_scale,
                             check_index_values: bool = False) -> HopattnFp8VarlenFwdArgs:
    """Pack HopattnTensors into HopattnFp8VarlenFwdArgs; the descales, lse, seqused_q and seqused_k
    may be None (a missing descale means 1, a missing lse is not computed, a missing seqused uses
    every token of each sequence)."""
    absent = HopattnTensor
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnFp8VarlenFwdArgs(
        q, k, v,
        absent() if q_descale is None else q_descale,
        absent() if k_descale is None else k_descale,
        absent() if v_descale is None else v_descale,
        out,
        absent() if lse is None else lse,
        cu_seqlens_q, cu_seqlens_k,
        absent() if seqused_q is None else seqused_q,
        absent() if seqused_k is None else seqused_k,
        max_seqlen_q, max_seqlen_k,
        1 if causal else 0, has_scale, scale, 1 if check_index_values else 0,
    )


def make_fp8_quantize_args(in_, out, descale, rotate: bool, block_quant: bool, seed: int) -> HopattnFp8QuantizeArgs:
    return HopattnFp8QuantizeArgs(in_, out, descale, 1 if rotate else 0, 1 if block_quant else 0, seed)


# torch dtype -> enum hopattn_dtype, for every dtype the C ABI names (e4m3 only where this torch
# has torch.float8_e4m3fn). Built on first use from the torch module passed in: this module never
# imports torch.
_torch_codes = (None, None)  # (torch module, {dtype: code})


def torch_dtype_codes(torch) -> dict:
    global _torch_codes
    module, codes = _torch_codes
    if module is not torch:
        codes = {torch.bfloat16: DTYPE_BF16, torch.float16: DTYPE_FP16, torch.float32: DTYPE_FP32, torch.int32: DTYPE_INT32}
        e4m3 = getattr(torch, "float8_e4m3fn", None)
        if e4m3 is not None:
            codes[e4m3] = DTYPE_E4M3
        _torch_codes = (torch, codes)
    return codes


# --- KV-cache decoding (hopattn_c.h: hopattn_kvcache_args) ----------------------------------------
# hopattn.kvcache declares the three entry points' signatures on first use (not in _declare), so a
# library built without them still loads for everything else.


class HopattnKvcacheArgs(ctypes.Structure):
    """struct hopattn_kvcache_args: q/out (batch, seqlen_q, heads_q, head_dim), the K/V cache
    (contiguous or paged), int32 cache_seqlens and optional page_table, optional k_new/v_new
    (appended in place) and lse. Optional tensors are left out as HopattnTensor(). ABI 7 appended
    the sliding window (read only when has_window; per sequence with seqlen_k the cache length
    after the append), ABI 8 the softcap (0: off)."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k_cache", HopattnTensor),
        ("v_cache", HopattnTensor),
        ("cache_seqlens", HopattnTensor),
        ("page_table", HopattnTensor),
        ("k_new", HopattnTensor),
        ("v_new", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("num_splits", ctypes.c_int32),
        ("check_index_values", ctypes.c_int32),
        ("has_window", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
    ]


def make_kvcache_args(q, k_cache, v_cache, cache_seqlens, page_table, k_new, v_new, out, lse, causal: bool,
                      softmax_scale, num_splits: int, check_index_values: bool,
                      window_size=None, softcap=0.0) -> HopattnKvcacheArgs:
    """Pack HopattnTensors into HopattnKvcacheArgs; page_table, k_new, v_new and lse may be None;
    window_size is (left, right) with -1 for unbounded, or None (no window); softcap 0 is off."""
    absent = HopattnTensor
    has_scale, scale = _scale_fields(softmax_scale)
    return HopattnKvcacheArgs(
        q, k_cache, v_cache, cache_seqlens,
        absent() if page_table is None else page_table,
        absent() if k_new is None else k_new,
        absent() if v_new is None else v_new,
        out,
        absent() if lse is None else lse,
        1 if causal else 0, has_scale, scale, num_splits, 1 if check_index_values else 0,
        *_window_fields(window_size), float(softcap),
    )
