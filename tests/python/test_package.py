# Packaging checks that need neither the library nor torch: importing is cheap and lazy, the
# version matches pyproject.toml, and a missing library produces an error that says how to fix it.
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hopattn
from hopattn import _lib

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_version_matches_pyproject():
    text = (REPO_ROOT / "pyproject.toml").read_text()
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    assert match and match.group(1) == hopattn.__version__


def test_import_loads_neither_torch_nor_the_library():
    code = (
        "import sys, hopattn, hopattn._lib as L; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert L._lib is None, 'library loaded at import'"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(hopattn.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_missing_env_library_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv(_lib.LIBRARY_ENV, str(tmp_path / "nope.so"))
    with pytest.raises(hopattn.LibraryNotFoundError, match="HOPATTN_LIBRARY"):
        _lib.find_library()


def test_missing_packaged_library_names_both_options(monkeypatch, tmp_path):
    monkeypatch.delenv(_lib.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(_lib, "packaged_library_path", lambda: tmp_path / "lib" / _lib.LIBRARY_NAME)
    with pytest.raises(hopattn.LibraryNotFoundError) as info:
        _lib.find_library()
    assert "HOPATTN_LIBRARY" in str(info.value) and "pip install" in str(info.value)


def test_struct_layout_matches_header():
    # hopattn_tensor: void* + 2 x int32 + 2 x int64[4] = 80 bytes; hopattn_fwd_args: 5 tensors + 4 x 4 bytes
    # (causal, has_softmax_scale, softmax_scale, has_window) + 2 x int64 window bounds + float softcap,
    # padded to 440 bytes.
    assert _lib.ctypes.sizeof(_lib.HopattnTensor) == 80
    assert _lib.HopattnFwdArgs.causal.offset == 400
    assert _lib.HopattnFwdArgs.has_window.offset == 412
    assert _lib.HopattnFwdArgs.window_left.offset == 416
    assert _lib.HopattnFwdArgs.window_right.offset == 424
    assert _lib.HopattnFwdArgs.softcap.offset == 432
    assert _lib.ctypes.sizeof(_lib.HopattnFwdArgs) == 440
    # hopattn_bwd_args: 9 tensors (720 bytes) + causal, has_softmax_scale, softmax_scale, deterministic,
    # has_window (740), padding to 744, the two int64 window bounds, softcap, padding to 768.
    assert _lib.HopattnBwdArgs.causal.offset == 720
    assert _lib.HopattnBwdArgs.softmax_scale.offset == 728
    assert _lib.HopattnBwdArgs.deterministic.offset == 732
    assert _lib.HopattnBwdArgs.has_window.offset == 736
    assert _lib.HopattnBwdArgs.window_left.offset == 744
    assert _lib.HopattnBwdArgs.window_right.offset == 752
    assert _lib.HopattnBwdArgs.softcap.offset == 760
    assert _lib.ctypes.sizeof(_lib.HopattnBwdArgs) == 768


def test_abi_version_matches_header():
    header = (REPO_ROOT / "include" / "hopattn" / "hopattn_c.h").read_text()
    match = re.search(r"^#define HOPATTN_ABI_VERSION (\d+)", header, re.MULTILINE)
    assert match and int(match.group(1)) == _lib.ABI_VERSION


def test_status_codes_map_to_builtin_exceptions():
    for status, builtin in [(1, ValueError), (2, NotImplementedError), (3, RuntimeError), (4, RuntimeError)]:
        assert issubclass(_lib._ERROR_BY_STATUS[status], builtin)
        assert issubclass(_lib._ERROR_BY_STATUS[status], hopattn.HopattnError)
