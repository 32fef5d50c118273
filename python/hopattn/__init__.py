# hopattn: exact FlashAttention-style attention for NVIDIA Hopper, as a thin ctypes binding over
# libhopattn.so. Importing never loads the library or torch; the first call does (see _lib.py for
# where the library is looked up: $HOPATTN_LIBRARY, else hopattn/lib/libhopattn.so).

# Kept equal to [project].version in pyproject.toml (tests/python/test_package.py checks it).
__version__ = "0.1.0"

from ._lib import (  # noqa: E402
    CudaError,
    HopattnError,
    InvalidArgumentError,
    LibraryNotFoundError,
    UnsupportedDeviceError,
    UnsupportedError,
)
from .ops import attention, attention_backward, attention_reference, build_info, check_device, is_available, version  # noqa: E402
from .fp8 import attention_fp8, attention_fp8_varlen, forward_fp8, forward_fp8_varlen, quantize_fp8  # noqa: E402
from .varlen import varlen_attention  # noqa: E402
from .kvcache import attention_with_kvcache  # noqa: E402

__all__ = [
    "__version__",
    "attention",
    "attention_backward",
    "attention_reference",
    "varlen_attention",
    "attention_with_kvcache",
    "attention_fp8",
    "forward_fp8",
    "quantize_fp8",
    "attention_fp8_varlen",
    "forward_fp8_varlen",
    "build_info",
    "check_device",
    "is_available",
    "version",
    "HopattnError",
    "InvalidArgumentError",
    "UnsupportedError",
    "UnsupportedDeviceError",
    "CudaError",
    "LibraryNotFoundError",
]
