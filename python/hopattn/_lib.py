# Loads libhopattn.so through ctypes and mirrors include/hopattn/hopattn_c.h: the structs, the
# function signatures and the status codes. Everything above this file speaks Python objects;
# everything below it is the C ABI, so a change to hopattn_c.h needs a matching change here only.
import ctypes
import os
import threading
from pathlib import Path

# Must equal HOPATTN_ABI_VERSION in hopattn_c.h; checked at load so a stale .so fails loudly
# instead of misreading structs.
ABI_VERSION = 2

# enum hopattn_dtype
DTYPE_BF16 = 0
DTYPE_FP16 = 1
DTYPE_FP32 = 2

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


class HopattnFwdArgs(ctypes.Structure):
    """struct hopattn_fwd_args."""

    _fields_ = [
        ("q", HopattnTensor),
        ("k", HopattnTensor),
        ("v", HopattnTensor),
        ("out", HopattnTensor),
        ("lse", HopattnTensor),
        ("causal", ctypes.c_int32),
        ("has_softmax_scale", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
    ]


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
    sigs = {
        "hopattn_abi_version": ([], ctypes.c_int),
        "hopattn_version": ([], ctypes.c_char_p),
        "hopattn_last_error": ([], ctypes.c_char_p),
        "hopattn_build_instantiations": ([], ctypes.c_char_p),
        "hopattn_forward": ([args_p, ctypes.c_void_p], ctypes.c_int),
        "hopattn_forward_reference_cuda": ([args_p, ctypes.c_void_p], ctypes.c_int),
        "hopattn_forward_cpu": ([args_p], ctypes.c_int),
        "hopattn_forward_workspace_size": ([args_p], ctypes.c_size_t),
        "hopattn_check_device": ([], ctypes.c_int),
        "hopattn_backward_workspace_size": ([bwd_args_p], ctypes.c_size_t),
        "hopattn_backward": ([bwd_args_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_int),
        "hopattn_backward_cpu": ([bwd_args_p], ctypes.c_int),
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
            try:
                _declare(lib)
            except AttributeError as e:
                raise LibraryNotFoundError(f"{path} is missing a hopattn C ABI symbol: {e}") from e
            abi = lib.hopattn_abi_version()
            if abi != ABI_VERSION:
                raise LibraryNotFoundError(
                    f"{path} has C ABI version {abi}, but this Python package expects {ABI_VERSION}; "
                    "rebuild the library or reinstall the package"
                )
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
    # Strides of an empty array, or of a size-1 last dim, address nothing, and numpy reports 0
    # for them; substitute contiguous values so the library's layout checks see a normal tensor.
    if 0 in sizes:
        strides = _contiguous_strides(sizes)
    elif ndim and sizes[-1] == 1:
        strides = (*strides[:-1], 1)
    return HopattnTensor(data_ptr or None, dtype_code, ndim, _Int64x4(*sizes), _Int64x4(*strides))


def _contiguous_strides(sizes):
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(sizes[i + 1], 1)
    return strides


def make_fwd_args(q, k, v, out, lse, causal: bool, softmax_scale) -> HopattnFwdArgs:
    """Pack HopattnTensors into HopattnFwdArgs; lse may be None (not computed)."""
    if lse is None:
        lse = HopattnTensor()  # data NULL: the library skips lse
    if softmax_scale is None:
        return HopattnFwdArgs(q, k, v, out, lse, 1 if causal else 0, 0, 0.0)
    return HopattnFwdArgs(q, k, v, out, lse, 1 if causal else 0, 1, float(softmax_scale))


def make_bwd_args(q, k, v, out, dout, lse, dq, dk, dv, causal: bool, softmax_scale, deterministic: bool) -> HopattnBwdArgs:
    """Pack HopattnTensors into HopattnBwdArgs; out and lse may be None (NULL tensors: the CPU
    reference recomputes them; the GPU path requires both)."""
    if out is None:
        out = HopattnTensor()
    if lse is None:
        lse = HopattnTensor()
    has_scale, scale = (0, 0.0) if softmax_scale is None else (1, float(softmax_scale))
    return HopattnBwdArgs(
        q, k, v, out, dout, lse, dq, dk, dv, 1 if causal else 0, has_scale, scale, 1 if deterministic else 0
    )
