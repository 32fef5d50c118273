# The FP8 binding: hopattn.attention_fp8 / forward_fp8 / quantize_fp8 (python/hopattn/fp8.py) over
# the C ABI's FP8 structs (python/hopattn/_lib.py).
#  - Everywhere: the ctypes struct layouts against hand-derived offsets, the header's field lists
#    and (with a C compiler) offsetof; the dtype codes; argument checks made before the library.
#  - With the library (no GPU needed): the structs as libhopattn reads them, through its
#    validation and workspace-size queries on addresses that are never dereferenced.
#  - With torch and an sm_90 GPU: accuracy against float64 attention and the numpy model
#    (hopattn.fp8_reference), forward_fp8 on torch-quantised inputs, quantize_fp8 against the
#    model and its determinism, errors naming the argument.
import ctypes
import math
import re
import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

import hopattn
from hopattn import _lib
from hopattn import fp8_reference as f8
from hopattn_test_support import FakeTensors, fp8_head_dim_and_dtype, optional_torch, require_library_or_skip_module

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = REPO_ROOT / "include" / "hopattn" / "hopattn_c.h"

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()


# --- struct layouts (no library) ------------------------------------------------------------------
# Derived by hand from hopattn_c.h for LP64 (x86-64/aarch64 Linux): hopattn_tensor is
# void* (0) + int32 dtype (8) + int32 ndim (12) + int64[4] sizes (16) + int64[4] strides (48) = 80
# bytes, 8-byte aligned; the args structs are tensors back to back, then 4-byte scalars, then
# padding to a multiple of 8.
TENSOR = 80
EXPECTED_LAYOUTS = {
    "HopattnTensor": (80, {"data": 0, "dtype": 8, "ndim": 12, "sizes": 16, "strides": 48}),
    # 5 tensors (400) + causal, has_softmax_scale, softmax_scale, has_window (416) + int64 window bounds
    # + float softcap (ABI 6) -> padded to 440
    "HopattnFwdArgs": (440, {"q": 0, "k": 80, "v": 160, "out": 240, "lse": 320, "causal": 400,
                             "has_softmax_scale": 404, "softmax_scale": 408, "has_window": 412, "window_left": 416,
                             "window_right": 424, "softcap": 432}),
    # 9 tensors (720) + 5 x 4 bytes (740) -> padded to 744 for the int64 window bounds
    "HopattnBwdArgs": (768, {"q": 0, "dq": 6 * TENSOR, "dv": 8 * TENSOR, "causal": 720, "has_softmax_scale": 724,
                             "softmax_scale": 728, "deterministic": 732, "has_window": 736, "window_left": 744,
                             "window_right": 752, "softcap": 760}),
    # 5 tensors (400) + causal, has_softmax_scale, softmax_scale, incoherent, block_quant, seed,
    # rotate_v, quantize_v (ABI 12) = 432
    "HopattnFp8AttentionArgs": (432, {"q": 0, "k": 80, "v": 160, "out": 240, "lse": 320, "causal": 400,
                                      "has_softmax_scale": 404, "softmax_scale": 408, "incoherent": 412,
                                      "block_quant": 416, "seed": 420, "rotate_v": 424, "quantize_v": 428}),
    # 8 tensors (640) + 3 scalars (652) -> padded to 656
    "HopattnFp8FwdArgs": (656, {"q": 0, "k": 80, "v": 160, "q_descale": 240, "k_descale": 320, "v_descale": 400,
                                "out": 480, "lse": 560, "causal": 640, "has_softmax_scale": 644,
                                "softmax_scale": 648}),
    # 3 tensors (240) + rotate, block_quant, seed (252) -> padded to 256
    "HopattnFp8QuantizeArgs": (256, {"in_": 0, "out": 80, "descale": 160, "rotate": 240, "block_quant": 244,
                                     "seed": 248}),
    # Not FP8, checked here with the others (ABI 4, window ABI 6): 9 tensors (720) + two int64
    # max_seqlen (736) + causal, has_softmax_scale, softmax_scale, check_index_values, has_window
    # (756) -> padded to 760 for the int64 window bounds
    "HopattnVarlenFwdArgs": (784, {"q": 0, "lse": 320, "cu_seqlens_q": 400, "cu_seqlens_k": 480, "seqused_q": 560,
                                   "seqused_k": 640, "max_seqlen_q": 720, "max_seqlen_k": 728, "causal": 736,
                                   "has_softmax_scale": 740, "softmax_scale": 744, "check_index_values": 748,
                                   "has_window": 752, "window_left": 760, "window_right": 768, "softcap": 776}),
    # ABI 5 (window ABI 6): 13 tensors (1040) + two int64 max_seqlen (1056) + causal, has_softmax_scale,
    # softmax_scale, deterministic, check_index_values, has_window (1080) + int64 window bounds
    "HopattnVarlenBwdArgs": (1104, {"q": 0, "dout": 4 * TENSOR, "lse": 5 * TENSOR, "dv": 8 * TENSOR,
                                    "cu_seqlens_q": 9 * TENSOR, "seqused_k": 12 * TENSOR, "max_seqlen_q": 1040,
                                    "max_seqlen_k": 1048, "causal": 1056, "has_softmax_scale": 1060,
                                    "softmax_scale": 1064, "deterministic": 1068, "check_index_values": 1072,
                                    "has_window": 1076, "window_left": 1080, "window_right": 1088, "softcap": 1096}),
}

# ctypes class -> C struct name
C_NAMES = {
    "HopattnTensor": "hopattn_tensor",
    "HopattnFwdArgs": "hopattn_fwd_args",
    "HopattnBwdArgs": "hopattn_bwd_args",
    "HopattnFp8AttentionArgs": "hopattn_fp8_attention_args",
    "HopattnFp8FwdArgs": "hopattn_fp8_fwd_args",
    "HopattnFp8QuantizeArgs": "hopattn_fp8_quantize_args",
    "HopattnVarlenFwdArgs": "hopattn_varlen_fwd_args",
    "HopattnVarlenBwdArgs": "hopattn_varlen_bwd_args",
}


def _c_field(name):
    return "in" if name == "in_" else name


@pytest.mark.parametrize("cls_name", sorted(EXPECTED_LAYOUTS))
def test_struct_layout_matches_hand_derived_offsets(cls_name):
    cls = getattr(_lib, cls_name)
    size, offsets = EXPECTED_LAYOUTS[cls_name]
    assert ctypes.sizeof(cls) == size
    for field, offset in offsets.items():
        assert getattr(cls, field).offset == offset, field


_C_TYPES = {
    "hopattn_tensor": lambda: _lib.HopattnTensor,
    "int32_t": lambda: ctypes.c_int32,
    "int64_t": lambda: ctypes.c_int64,
    "uint32_t": lambda: ctypes.c_uint32,
    "float": lambda: ctypes.c_float,
    "void*": lambda: ctypes.c_void_p,
}


def header_struct_fields(c_name):
    """[(field, ctypes type)] of `typedef struct c_name {...} c_name;` in hopattn_c.h, in order."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.DOTALL)
    m = re.search(r"typedef struct " + c_name + r" \{(.*?)\} " + c_name + ";", text, re.DOTALL)
    assert m, f"struct {c_name} not found in {HEADER}"
    fields = []
    for decl in (d.strip() for d in m.group(1).split(";")):
        if not decl:
            continue
        decl = decl.replace("void* ", "void *").replace("void *", "void* ")
        ctype, names = decl.split(None, 1)
        for name in (n.strip() for n in names.split(",")):
            arr = re.fullmatch(r"(\w+)\[(\d+)\]", name)
            t = _C_TYPES[ctype]()
            if arr:
                name, t = arr.group(1), t * int(arr.group(2))
            fields.append((name, t))
    return fields


@pytest.mark.parametrize("cls_name", sorted(C_NAMES))
def test_struct_fields_follow_the_header(cls_name):
    cls = getattr(_lib, cls_name)
    want = header_struct_fields(C_NAMES[cls_name])
    got = [(_c_field(n), t) for n, t in cls._fields_]
    assert [n for n, _ in got] == [n for n, _ in want]
    for (name, t_got), (_, t_want) in zip(got, want):
        assert ctypes.sizeof(t_got) == ctypes.sizeof(t_want) and ctypes.alignment(t_got) == ctypes.alignment(t_want), name
        if not issubclass(t_want, ctypes.Array):
            assert t_got is t_want, name


def test_struct_layout_matches_the_c_compiler(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = []
    for cls_name, c_name in C_NAMES.items():
        lines.append(f'printf("{cls_name} size %zu\\n", sizeof({c_name}));')
        for field, _ in getattr(_lib, cls_name)._fields_:
            lines.append(f'printf("{cls_name} {field} %zu\\n", offsetof({c_name}, {_c_field(field)}));')
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "hopattn/hopattn_c.h"\nint main(void) {\n'
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-I", str(REPO_ROOT / "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        cls_name, field, value = line.split()
        cls = getattr(_lib, cls_name)
        got = ctypes.sizeof(cls) if field == "size" else getattr(cls, field).offset
        assert got == int(value), line


def test_abi_version_and_codes_match_the_header():
    text = HEADER.read_text()
    assert int(re.search(r"#define HOPATTN_ABI_VERSION (\d+)", text).group(1)) == _lib.ABI_VERSION == 12
    enum = re.search(r"enum hopattn_dtype \{(.*?)\}", text, re.DOTALL).group(1)
    codes = {name: int(value) for name, value in re.findall(r"HOPATTN_(\w+) = (\d+)", enum)}
    assert codes == {"BF16": _lib.DTYPE_BF16, "FP16": _lib.DTYPE_FP16, "FP32": _lib.DTYPE_FP32,
                     "INT32": _lib.DTYPE_INT32, "E4M3": _lib.DTYPE_E4M3}
    assert (_lib.DTYPE_INT32, _lib.DTYPE_E4M3) == (3, 4)


def test_library_symbols_are_declared():
    # What _declare sets up must name every FP8 entry point of the header.
    text = HEADER.read_text()
    for fn in re.findall(r"\b(hopattn_\w*fp8\w*)\(", text):
        assert fn in Path(_lib.__file__).read_text(), fn


def test_torch_dtype_codes_without_torch():
    # Any module with these attributes works (the binding never imports torch itself).
    fake = types.SimpleNamespace(bfloat16="bf16", float16="fp16", float32="fp32", int32="i32", float8_e4m3fn="e4m3")
    codes = _lib.torch_dtype_codes(fake)
    assert codes == {"bf16": 0, "fp16": 1, "fp32": 2, "i32": 3, "e4m3": 4}
    old = types.SimpleNamespace(bfloat16="bf16", float16="fp16", float32="fp32", int32="i32")  # torch < 2.1
    assert "e4m3" not in _lib.torch_dtype_codes(old)


@needs_torch
def test_torch_dtype_codes():
    codes = _lib.torch_dtype_codes(torch)
    assert codes[torch.bfloat16] == _lib.DTYPE_BF16 and codes[torch.float16] == _lib.DTYPE_FP16
    assert codes[torch.float32] == _lib.DTYPE_FP32 and codes[torch.int32] == _lib.DTYPE_INT32
    if hasattr(torch, "float8_e4m3fn"):
        assert codes[torch.float8_e4m3fn] == _lib.DTYPE_E4M3
    assert torch.float64 not in codes


def test_pack_helpers_fill_every_field():
    t = [_lib.make_tensor(0x1000 * (i + 1), _lib.DTYPE_E4M3, (1, 2, 3, 16), (96, 48, 16, 1)) for i in range(8)]
    a = _lib.make_fp8_attention_args(t[0], t[1], t[2], t[3], None, True, 0.25, False, True, 0xFFFFFFFF)
    assert (a.causal, a.has_softmax_scale, a.softmax_scale, a.incoherent, a.block_quant, a.seed) == (1, 1, 0.25, 0, 1, 0xFFFFFFFF)
    assert a.rotate_v == 0 and a.quantize_v == 1
    assert _lib.make_fp8_attention_args(t[0], t[1], t[2], t[3], None, True, 0.25, True, True, 1, True).rotate_v == 1
    assert _lib.make_fp8_attention_args(t[0], t[1], t[2], t[3], None, True, 0.25, True, True, 1, False, False).quantize_v == 0
    assert a.lse.data is None and a.lse.ndim == 0 and a.out.data == 0x4000
    f = _lib.make_fp8_fwd_args(t[0], t[1], t[2], None, t[4], None, t[6], t[7], False, None)
    assert f.q_descale.data is None and f.q_descale.ndim == 0 and f.v_descale.ndim == 0
    assert f.k_descale.data == 0x5000 and f.out.data == 0x7000 and f.lse.data == 0x8000
    assert (f.causal, f.has_softmax_scale) == (0, 0)
    qa = _lib.make_fp8_quantize_args(t[0], t[1], t[2], False, True, 7)
    assert (qa.in_.data, qa.rotate, qa.block_quant, qa.seed) == (0x1000, 0, 1, 7)


# --- Python-side argument checks (no library, no GPU) -----------------------------------------------


def test_fp8_ops_reject_numpy_and_bad_seeds():
    x = np.zeros((1, 4, 1, 64), dtype=np.float16)
    with pytest.raises(TypeError, match="q: attention_fp8 takes torch CUDA tensors"):
        hopattn.attention_fp8(x, x, x)
    with pytest.raises(TypeError, match="q: forward_fp8"):
        hopattn.forward_fp8(x, x, x)
    with pytest.raises(TypeError, match="x: quantize_fp8"):
        hopattn.quantize_fp8(x)
    for bad in (-1, 1 << 32):
        with pytest.raises(hopattn.InvalidArgumentError, match="seed"):
            hopattn.attention_fp8(x, x, x, seed=bad)
        with pytest.raises(ValueError, match="seed"):
            hopattn.quantize_fp8(x, seed=bad)
    for bad in (1.5, True, "0"):
        with pytest.raises(TypeError, match="seed"):
            hopattn.attention_fp8(x, x, x, seed=bad)
    with pytest.raises(TypeError, match="softmax_scale"):
        hopattn.attention_fp8(x, x, x, softmax_scale=True)


def test_fp8_ops_are_exported():
    for name in ("attention_fp8", "forward_fp8", "quantize_fp8"):
        assert name in hopattn.__all__ and callable(getattr(hopattn, name))


@needs_torch
def test_fp8_ops_reject_cpu_tensors():
    x = torch.zeros((1, 4, 1, 64), dtype=torch.bfloat16)
    with pytest.raises(hopattn.InvalidArgumentError, match="q: expected a CUDA tensor"):
        hopattn.attention_fp8(x, x, x)
    with pytest.raises(hopattn.InvalidArgumentError, match="x: expected a CUDA tensor"):
        hopattn.quantize_fp8(x)


# --- through the library, no GPU needed -------------------------------------------------------------
# Addresses below are fake (aligned, never dereferenced): only the workspace-size queries and calls
# that fail validation are made, so nothing is launched even on a GPU machine. The one kind of call
# that passes validation (quantize with seqlen 0) has nothing to launch.


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()
    return _lib.load()


def _fwd_problem(d, out_code, b=2, sq=300, sk=300, hq=4, hkv=2):
    t = FakeTensors()
    E4, F32 = _lib.DTYPE_E4M3, _lib.DTYPE_FP32
    nq, nk = math.ceil(sq / 128), math.ceil(sk / 128)
    return dict(
        q=t(E4, (b, sq, hq, d)), k=t(E4, (b, sk, hkv, d)), v=t(E4, (b, sk, hkv, d)),
        q_descale=t(F32, (b, hq, nq)), k_descale=t(F32, (b, hkv, nk)), v_descale=t(F32, (b, hkv)),
        out=t(out_code, (b, sq, hq, d)), lse=t(F32, (b, hq, sq)), causal=True, softmax_scale=None,
    ), t


def _call_invalid(lib, fn, size_fn, args, *extra):
    """Checks the query says 0 (invalid), then the call's status and message (nothing launches)."""
    if size_fn is not None:
        assert getattr(lib, size_fn)(ctypes.byref(args)) == 0
    status = getattr(lib, fn)(ctypes.byref(args), *extra)
    return status, _lib.last_error()


def test_forward_fp8_struct_as_the_library_reads_it(lib):
    d, out_code = fp8_head_dim_and_dtype()
    fields, t = _fwd_problem(d, out_code)
    ok = _lib.make_fp8_fwd_args(**fields)
    nbytes = lib.hopattn_forward_fp8_workspace_size(ctypes.byref(ok))
    assert nbytes >= 2 * 300 * 2 * d  # V^T: b * heads_kv * head_dim * padded seqlen_k
    # Per-head descales and left-out ones are fine too.
    per_head = dict(fields, q_descale=t(_lib.DTYPE_FP32, (2, 4, 1)), k_descale=None, v_descale=None, lse=None)
    assert lib.hopattn_forward_fp8_workspace_size(ctypes.byref(_lib.make_fp8_fwd_args(**per_head))) == nbytes
    # Each field, made wrong alone, is the one the library names.
    bad = {
        "q_descale": t(_lib.DTYPE_FP32, (2, 4, 2)),
        "k_descale": t(_lib.DTYPE_FP32, (2, 4, 3)),
        "v_descale": t(_lib.DTYPE_FP32, (2, 2, 1)),
        "lse": t(_lib.DTYPE_FP32, (2, 4, 299)),
        "out": t(out_code, (2, 300, 4, d + 16)),
    }
    for name, tensor in bad.items():
        args = _lib.make_fp8_fwd_args(**dict(fields, **{name: tensor}))
        status, msg = _call_invalid(lib, "hopattn_forward_fp8", "hopattn_forward_fp8_workspace_size", args,
                                    None, 0, None)
        assert status == _lib.STATUS_INVALID_ARGUMENT and msg.startswith(name), (name, msg)
    # softmax_scale is read only when has_softmax_scale is set.
    args = _lib.make_fp8_fwd_args(**dict(fields, softmax_scale=-1.0))
    status, msg = _call_invalid(lib, "hopattn_forward_fp8", "hopattn_forward_fp8_workspace_size", args, None, 0, None)
    assert status == _lib.STATUS_INVALID_ARGUMENT and "softmax_scale" in msg
    args.has_softmax_scale = 0
    assert lib.hopattn_forward_fp8_workspace_size(ctypes.byref(args)) == nbytes
    # 16-bit q belongs to attention_fp8.
    args = _lib.make_fp8_fwd_args(**dict(fields, q=t(out_code, (2, 300, 4, d))))
    status, msg = _call_invalid(lib, "hopattn_forward_fp8", "hopattn_forward_fp8_workspace_size", args, None, 0, None)
    assert status == _lib.STATUS_INVALID_ARGUMENT and msg.startswith("q: dtype must be e4m3")


def test_attention_fp8_struct_as_the_library_reads_it(lib):
    d, code = fp8_head_dim_and_dtype()
    t = FakeTensors()
    b, s, hq, hkv = 4, 1024, 16, 16

    def args(**kw):
        base = dict(q=t(code, (b, s, hq, d)), k=t(code, (b, s, hkv, d)), v=t(code, (b, s, hkv, d)),
                    out=t(code, (b, s, hq, d)), lse=t(_lib.DTYPE_FP32, (b, hq, s)), causal=False,
                    softmax_scale=None, incoherent=True, block_quant=True, seed=3)
        return _lib.make_fp8_attention_args(**dict(base, **kw))

    per_block = lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args()))
    per_head = lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args(block_quant=False)))
    e4m3_bytes = 3 * b * s * hq * d
    # block_quant adds (b, h, 8) descales over (b, h, 1): more than the 256-byte rounding.
    assert per_block > per_head >= e4m3_bytes
    assert lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args(incoherent=False, seed=0))) == per_block
    # A rotated V needs its e4m3 copy in the ordinary layout too (b * s * hkv * d bytes).
    rotated_v = lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args(rotate_v=True)))
    assert rotated_v == per_block + b * s * hkv * d
    assert lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args(rotate_v=True, incoherent=False))) == per_block
    # quantize_v=False: no V^T (b * hkv * d * 1024 bytes) and no V descales.
    v16 = lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args(quantize_v=False)))
    assert 0 < v16 <= per_block - b * s * hkv * d
    for kw, name in ((dict(lse=t(_lib.DTYPE_FP32, (b, hq, s + 1))), "lse"), (dict(softmax_scale=0.0), "softmax_scale"),
                     (dict(q=t(_lib.DTYPE_FP32, (b, s, hq, d))), "q: dtype must be bf16 or fp16"),
                     (dict(quantize_v=False, rotate_v=True), "rotate_v: must be false with quantize_v = false")):
        status, msg = _call_invalid(lib, "hopattn_attention_fp8", "hopattn_attention_fp8_workspace_size", args(**kw),
                                    None, 0, None)
        assert status == _lib.STATUS_INVALID_ARGUMENT and msg.startswith(name), (kw, msg)
    a = args(softmax_scale=0.0)
    a.has_softmax_scale = 0
    assert lib.hopattn_attention_fp8_workspace_size(ctypes.byref(a)) == per_block


def test_quantize_fp8_struct_as_the_library_reads_it(lib):
    t = FakeTensors()
    # seqlen 0: a call that passes validation has nothing to launch (UNSUPPORTED_DEVICE without a
    # Hopper GPU, SUCCESS with one); either way the status shows which fields the library read.
    passed = (_lib.STATUS_SUCCESS, _lib.STATUS_UNSUPPORTED_DEVICE)

    def call(d, descale_blocks, rotate, block_quant, in_code=_lib.DTYPE_BF16):
        if descale_blocks:
            descale = t(_lib.DTYPE_FP32, (2, 3, descale_blocks))
        else:  # (2, 3, 0) with the strides the library's contiguity check expects of an empty tensor
            descale = _lib.HopattnTensor(1 << 20, _lib.DTYPE_FP32, 3, (2, 3, 0, 0), (0, 0, 1, 0))
        a = _lib.make_fp8_quantize_args(t(in_code, (2, 0, 3, d)), t(_lib.DTYPE_E4M3, (2, 0, 3, d)), descale,
                                        rotate, block_quant, 5)
        return lib.hopattn_quantize_fp8(ctypes.byref(a), None), _lib.last_error()

    status, msg = call(128, 1, rotate=True, block_quant=True)  # per block: ceil(0 / 128) = 0 blocks
    assert status == _lib.STATUS_INVALID_ARGUMENT and msg.startswith("descale.sizes[2]=1"), msg
    assert call(128, 0, rotate=True, block_quant=True)[0] in passed
    assert call(128, 1, rotate=True, block_quant=False)[0] in passed
    status, msg = call(96, 1, rotate=True, block_quant=False)
    assert status == _lib.STATUS_UNSUPPORTED and "rotation" in msg and "head_dim" in msg, msg
    assert call(96, 1, rotate=False, block_quant=False)[0] in passed
    status, msg = call(128, 0, rotate=True, block_quant=True, in_code=_lib.DTYPE_E4M3)
    assert status == _lib.STATUS_INVALID_ARGUMENT and msg.startswith("in: dtype"), msg


# --- GPU ----------------------------------------------------------------------------------------------

FP8_BOUND = 6e-2  # relative L2 against float64 attention on ordinary (N(0, 1)) inputs
# Relative L2 between the kernel and the numpy model on the same inputs. Not tighter: the model
# rounds P = exp(s - final row max) to e4m3, the kernel rounds it against the running max of the
# key blocks seen so far, so the two round different values and their P errors are independent:
# measured 1.05e-2 (attention_fp8) to 1.8e-2 (forward_fp8 per-tensor, 300 keys) on the H200.
MODEL_BOUND = 3e-2
LSE_BOUND = 0.25  # max |lse - fp64 lse|: a row's scores carry the e4m3 error of Q and K (model: <= 0.08)


@pytest.fixture(scope="module")
def gpu():
    if not HAS_SM90:
        pytest.skip("needs torch and an sm_90 GPU")
    require_library_or_skip_module()
    built = {(dt, hd) for direction, dt, hd in hopattn.build_info()["kernels"] if direction == "fp8"}
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    return built


def skip_unless_built(built, dtype, head_dim):
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    if (name, head_dim) not in built:
        pytest.skip(f"fp8:{name}:{head_dim} not in this build ({hopattn.build_info()['instantiations']})")


def randn(shape, dtype, seed, outliers=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
    if outliers:  # the FlashAttention-3 paper's protocol: + N(0, 100) * Bernoulli(0.001)
        spikes = torch.randn(shape, generator=gen, device="cuda") * 10.0
        x = x + spikes * (torch.rand(shape, generator=gen, device="cuda") < 1e-3)
    return x.to(dtype)


def make_qkv(b, sq, sk, hq, hkv, d, dtype=torch.bfloat16 if torch else None, seed=0, outliers=False):
    return (randn((b, sq, hq, d), dtype, seed, outliers), randn((b, sk, hkv, d), dtype, seed + 1, outliers),
            randn((b, sk, hkv, d), dtype, seed + 2, outliers))


def reference(q, k, v, causal, softmax_scale=None):
    """float64 attention on the GPU: out (b, sq, hq, d), lse (b, hq, sq); bottom-right causal; rows
    that see no key give out 0 and lse -inf."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    qf = q.double()
    kf = k.double().repeat_interleave(hq // hkv, dim=2)
    vf = v.double().repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kf) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    return torch.einsum("bhqk,bkhd->bqhd", p, vf), lse


def rel_l2(got, want):
    got, want = got.double(), want.double()
    denom = want.norm().item()
    return (got - want).norm().item() / denom if denom else got.norm().item()


def rmse(got, want):
    return (got.double() - want.double()).pow(2).mean().sqrt().item()


def model_output(q, k, v, causal, incoherent, block_quant, seed, rotate_v=False, quantize_v=True):
    """The numpy model of attention_fp8 on the same (16-bit) inputs: Q, K rotated by
    random_rotation(d, seed) when incoherent, quantised per 128-row block (or per head); V per head,
    rotated by the same M first when incoherent and rotate_v (and O rotated back: the dequantised
    V is rotated back here, the same product). quantize_v=False: V as given (bf16 here) and P
    rounded to bf16."""
    qn, kn, vn = (t.double().cpu().numpy() for t in (q, k, v))
    gran = "block" if block_quant else "head"
    if incoherent:
        m = f8.random_rotation(qn.shape[-1], seed)
        qn, kn = qn @ m, kn @ m
    if incoherent and rotate_v:
        vd = f8.quantize(vn @ m, "head")[0] @ m.T
    else:
        vd = f8.quantize(vn, "head")[0]
    qd, kd = f8.quantize(qn, gran, 128)[0], f8.quantize(kn, gran, 128)[0]
    if not quantize_v:
        assert q.dtype == torch.bfloat16  # the model rounds P to bf16
        return torch.from_numpy(f8.attention_from_fp8(qd, kd, vn, causal, p_format="bf16")).to(q.device)
    return torch.from_numpy(f8.attention_from_fp8(qd, kd, vd, causal)).to(q.device)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("seqlen", [1, 17, 300])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_against_float64(gpu, head_dim, seqlen, causal):
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    q, k, v = make_qkv(2, seqlen, seqlen, 4, 2, head_dim, seed=seqlen + head_dim)  # GQA 2:1
    out, lse = hopattn.attention_fp8(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (2, 4, seqlen) and lse.dtype == torch.float32
    assert torch.isfinite(out).all()
    assert rel_l2(out, want) <= FP8_BOUND
    assert (lse.double() - want_lse).abs().max().item() <= LSE_BOUND


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(17, 300), (300, 17), (129, 128)])
def test_attention_fp8_cross_lengths(gpu, dtype, seqlen_q, seqlen_k):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    skip_unless_built(gpu, dtype, 128)
    q, k, v = make_qkv(1, seqlen_q, seqlen_k, 4, 2, 128, dtype=dtype, seed=5)
    for causal in (False, True):
        out, lse = hopattn.attention_fp8(q, k, v, causal=causal, return_lse=True, softmax_scale=0.1)
        want, want_lse = reference(q, k, v, causal, softmax_scale=0.1)
        assert out.dtype == dtype
        assert rel_l2(out, want) <= FP8_BOUND
        # Bottom-right causal with seqlen_q > seqlen_k: the first rows see no key (0 and -inf).
        empty = ~torch.isfinite(want_lse)
        assert torch.equal(~torch.isfinite(lse), empty)
        assert (out.transpose(1, 2)[empty] == 0).all()
        finite = ~empty
        assert (lse[finite].double() - want_lse[finite]).abs().max().item() <= LSE_BOUND


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("incoherent,block_quant", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_matches_the_numpy_model(gpu, head_dim, incoherent, block_quant, causal):
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    seed = 1234567
    q, k, v = make_qkv(1, 384, 384, 2, 2, head_dim, seed=11, outliers=True)
    out = hopattn.attention_fp8(q, k, v, causal=causal, incoherent=incoherent, block_quant=block_quant, seed=seed)
    want, _ = reference(q, k, v, causal)
    model = model_output(q, k, v, causal, incoherent, block_quant, seed)
    # The same error as the model predicts (within a factor 2) ...
    ratio = rmse(out, want) / rmse(model, want)
    assert 0.5 <= ratio <= 2.0, ratio
    # ... and in fact the same numbers, up to fp32 arithmetic and bf16 output rounding.
    assert rel_l2(out, model) <= MODEL_BOUND


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_rotated_v_matches_the_numpy_model(gpu, head_dim, causal):
    """rotate_v: V M is quantised and the kernel writes O M^T; a wrong un-rotation (signs, the
    transform's lane/register split) would be an O(1) error, not the few percent allowed here."""
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    seed = 99
    q, k, v = make_qkv(2, 333, 333, 4, 2, head_dim, seed=5, outliers=True)
    out = hopattn.attention_fp8(q, k, v, causal=causal, seed=seed, rotate_v=True)
    want, _ = reference(q, k, v, causal)
    model = model_output(q, k, v, causal, True, True, seed, rotate_v=True)
    ratio = rmse(out, want) / rmse(model, want)
    assert 0.5 <= ratio <= 2.0, ratio
    assert rel_l2(out, model) <= MODEL_BOUND, rel_l2(out, model)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_16bit_pv_matches_the_numpy_model(gpu, head_dim, causal):
    """quantize_v=False: only Q K^T in e4m3, V read as it is (here a strided view, the v half of a
    packed kv tensor), P in bf16. The same numbers as the model, and below the all-e4m3 error."""
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    seed = 7
    q, k, v = make_qkv(2, 333, 333, 4, 2, head_dim, seed=9, outliers=True)
    kv = torch.stack((k, v), dim=3)  # (b, s, hkv, 2, d): v = kv[:, :, :, 1] has a row stride of 2 * hkv * d
    v = kv[:, :, :, 1]
    assert not v.is_contiguous()
    out = hopattn.attention_fp8(q, k, v, causal=causal, seed=seed, quantize_v=False)
    want, _ = reference(q, k, v, causal)
    model = model_output(q, k, v, causal, True, True, seed, quantize_v=False)
    assert rel_l2(out, model) <= MODEL_BOUND, rel_l2(out, model)
    e8 = rmse(hopattn.attention_fp8(q, k, v, causal=causal, seed=seed), want)
    assert rmse(out, want) < 0.95 * e8, (rmse(out, want), e8)
    with pytest.raises(hopattn.InvalidArgumentError, match="rotate_v"):
        hopattn.attention_fp8(q, k, v, seed=seed, quantize_v=False, rotate_v=True)


def test_attention_fp8_techniques_reduce_the_outlier_error(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    q, k, v = make_qkv(1, 1024, 1024, 4, 4, 128, seed=3, outliers=True)
    want, _ = reference(q, k, v, False)
    both = rmse(hopattn.attention_fp8(q, k, v), want)
    neither = rmse(hopattn.attention_fp8(q, k, v, incoherent=False, block_quant=False), want)
    assert both < neither


def test_attention_fp8_seed_strides_and_no_grad(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    q, k, v = make_qkv(2, 200, 200, 4, 2, 128, seed=8)
    a = hopattn.attention_fp8(q, k, v, seed=1)
    assert torch.equal(a, hopattn.attention_fp8(q, k, v, seed=1))  # deterministic
    assert not torch.equal(a, hopattn.attention_fp8(q, k, v, seed=2))  # the seed picks the rotation
    # (b, h, s, d) buffers viewed as (b, s, h, d): same result as the contiguous inputs.
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)
    assert not qt.is_contiguous()
    assert torch.equal(a, hopattn.attention_fp8(qt, kt, v, seed=1))
    # Not differentiable: no history even when the inputs require grad.
    qg = q.clone().requires_grad_()
    out = hopattn.attention_fp8(qg, k, v, seed=1)
    assert out.grad_fn is None and not out.requires_grad
    # On a side stream, ordered after work queued there.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        q2 = q * 1
        b = hopattn.attention_fp8(q2, k, v, seed=1)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(a, b)


def test_attention_fp8_empty(gpu):
    skip_unless_built(gpu, torch.bfloat16, 64)
    q, k, v = make_qkv(1, 5, 0, 2, 2, 64)
    out, lse = hopattn.attention_fp8(q, k, v, return_lse=True)
    assert (out == 0).all() and torch.isneginf(lse).all()
    q, k, v = make_qkv(0, 5, 5, 2, 2, 64)
    assert hopattn.attention_fp8(q, k, v).shape == (0, 5, 2, 64)


def e4m3(x_scaled):
    """Rounds float32 values (already scaled into range) to e4m3fn, saturating like the kernel."""
    return x_scaled.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def quantize_per_tensor(x):
    """(x_e4m3, descale): one scale for the whole tensor, |max| -> 448, as a 0-dim fp32 tensor."""
    amax = x.float().abs().amax()
    return e4m3(x.float() * (448.0 / amax)), amax / 448.0


def quantize_v_per_head(v):
    """What attention_fp8 does to V: one scale per (batch, kv head); descale (batch, heads_kv)."""
    amax = v.float().abs().amax(dim=(1, 3))
    return e4m3(v.float() * (448.0 / amax)[:, None, :, None]), (amax / 448.0).contiguous()


def dequantize(x8, descale):
    """x8 (b, s, h, d) e4m3 with descale (b, h, nblocks) / (b, h) / 0-dim -> float64 values."""
    x = x8.double()
    if descale.dim() == 0:
        return x * descale.double()
    if descale.dim() == 2:
        return x * descale.double()[:, None, :, None]
    s = x.shape[1]
    per_row = descale.double().repeat_interleave(128, dim=2)[:, :, :s] if descale.shape[2] > 1 else descale.double()
    return x * per_row.transpose(1, 2)[..., None]


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_fp8_per_tensor_quantisation(gpu, head_dim, causal):
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    q, k, v = make_qkv(2, 300, 300, 4, 2, head_dim, seed=21)
    (q8, qd), (k8, kd), (v8, vd) = (quantize_per_tensor(t) for t in (q, k, v))
    out, lse = hopattn.forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and lse.shape == (2, 4, 300)
    want, want_lse = reference(q, k, v, causal)
    assert rel_l2(out, want) <= FP8_BOUND
    # Against the model on exactly these quantised values (only P's rounding is simulated).
    qn, kn, vn = (dequantize(x8, d).cpu().numpy() for x8, d in ((q8, qd), (k8, kd), (v8, vd)))
    model = torch.from_numpy(f8.attention_from_fp8(qn, kn, vn, causal)).cuda()
    assert rel_l2(out, model) <= MODEL_BOUND
    # Python floats work as per-tensor descales, and fp16 output.
    out16 = hopattn.forward_fp8(q8, k8, v8, qd.item(), kd.item(), vd.item(), causal=causal, out_dtype=torch.float16)
    assert out16.dtype == torch.float16 and rel_l2(out16, out) <= 5e-3


def test_forward_fp8_descale_shapes_and_defaults(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    b, s, hq, hkv, d = 2, 300, 4, 2, 128
    q, k, v = make_qkv(b, s, s, hq, hkv, d, seed=31)
    (q8, qd), (k8, kd), (v8, vd) = (quantize_per_tensor(t) for t in (q, k, v))
    ref = hopattn.forward_fp8(q8, k8, v8, qd, kd, vd)
    # The same scale given per head and per block: the same kernel arithmetic.
    per_head = hopattn.forward_fp8(q8, k8, v8, qd.expand(b, hq, 1).contiguous(), kd.expand(b, hkv, 1).contiguous(),
                                   vd.expand(b, hkv).contiguous())
    per_block = hopattn.forward_fp8(q8, k8, v8, qd.expand(b, hq, 3).contiguous(), kd.expand(b, hkv, 3).contiguous(), vd)
    assert rel_l2(per_head, ref) <= 1e-3 and rel_l2(per_block, ref) <= 1e-3
    # No descales: the e4m3 values themselves; softmax_scale then applies to them.
    raw = hopattn.forward_fp8(q8, k8, v8, softmax_scale=float(qd * kd) / math.sqrt(d))
    assert rel_l2(raw.double() * vd.item(), ref) <= 1e-2


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_forward_fp8_on_quantize_fp8_equals_attention_fp8(gpu, head_dim):
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    q, k, v = make_qkv(2, 300, 300, 4, 2, head_dim, seed=41)
    seed = 99
    q8, qd = hopattn.quantize_fp8(q, seed=seed)
    k8, kd = hopattn.quantize_fp8(k, seed=seed)
    v8, vd = quantize_v_per_head(v)
    for causal in (False, True):
        got = hopattn.forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal)
        want = hopattn.attention_fp8(q, k, v, causal=causal, seed=seed)
        assert rel_l2(got, want) <= 5e-3


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_forward_fp8_with_16bit_v_equals_attention_fp8_unquantised_v(gpu, head_dim):
    """forward_fp8 with a bf16 v runs the 16-bit P V kernel on the caller's codes: on
    quantize_fp8's output (the same seed and blocks as attention_fp8 uses) the bytes are
    attention_fp8(quantize_v=False)'s. And the 16-bit v refuses a v_descale and an out_dtype of
    another type."""
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    q, k, v = make_qkv(2, 300, 300, 4, 2, head_dim, seed=43)
    seed = 5
    q8, qd = hopattn.quantize_fp8(q, seed=seed)
    k8, kd = hopattn.quantize_fp8(k, seed=seed)
    for causal in (False, True):
        got = hopattn.forward_fp8(q8, k8, v, qd, kd, causal=causal)
        assert got.dtype == torch.bfloat16
        want = hopattn.attention_fp8(q, k, v, causal=causal, seed=seed, quantize_v=False)
        assert torch.equal(got, want)
    with pytest.raises(hopattn.InvalidArgumentError, match="v_descale: must be left out"):
        hopattn.forward_fp8(q8, k8, v, qd, kd, 1.0)
    with pytest.raises(hopattn.InvalidArgumentError, match="v: dtype must be e4m3, or out's 16-bit dtype"):
        hopattn.forward_fp8(q8, k8, v, qd, kd, out_dtype=torch.float16)


def quantize_like_the_kernel(x, rotate, block_quant, seed):
    """quantize_fp8's documented arithmetic in torch: rows times M(seed) (computed in float64, then
    rounded to float32), amax per 128-row block (or per (batch, head)), codes
    e4m3_rn_satfinite(value * float32(448 / amax)), descale amax / 448. Without the rotation this is
    the kernel's float32 arithmetic exactly."""
    xf = x.float()
    if rotate:
        m = torch.from_numpy(f8.random_rotation(x.shape[-1], seed)).to(x.device)
        xf = (x.double() @ m).float()
    b, s, h, d = xf.shape
    if block_quant:
        nb = -(-s // 128)
        xp = torch.nn.functional.pad(xf, (0, 0, 0, 0, 0, nb * 128 - s)).reshape(b, nb, 128, h, d)
        amax = xp.abs().amax(dim=(2, 4))  # (b, nb, h)
        codes = e4m3(xp * div32(448.0, amax)[:, :, None, :, None]).reshape(b, nb * 128, h, d)[:, :s]
        return codes.contiguous(), div32(amax, 448.0).transpose(1, 2).contiguous()
    amax = xf.abs().amax(dim=(1, 3))  # (b, h)
    return e4m3(xf * div32(448.0, amax)[:, None, :, None]), div32(amax, 448.0)[..., None].contiguous()


def div32(a, b):
    """a / b correctly rounded to float32, as the kernel's IEEE division gives (torch may divide by
    a Python scalar as a multiply by its reciprocal, one ulp off). float64 then float32 is exact
    rounding here: 53 bits hold the 48-bit quotient's rounding decision."""
    a = a.double() if torch.is_tensor(a) else a
    b = b.double() if torch.is_tensor(b) else b
    return (a / b).float()


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("rotate,block_quant", [(True, True), (False, True), (True, False), (False, False)])
def test_quantize_fp8_against_the_model(gpu, head_dim, rotate, block_quant):
    x = randn((2, 300, 3, head_dim), torch.bfloat16, 51, outliers=True)
    seed = 4242
    x8, descale = hopattn.quantize_fp8(x, rotate=rotate, block_quant=block_quant, seed=seed)
    assert x8.dtype == torch.float8_e4m3fn and x8.shape == x.shape and x8.is_contiguous()
    assert descale.shape == (2, 3, 3 if block_quant else 1) and descale.dtype == torch.float32
    # The scales: the numpy model's (float64), to float32 rounding.
    xn = x.double().cpu().numpy()
    if rotate:
        xn = xn @ f8.random_rotation(head_dim, seed)
    scale = f8.quantize(xn, "block" if block_quant else "head", 128)[1]
    # scale: (b, nblk, 1, h, 1) per block, (b, 1, h, 1) per head -> (b, h, nblocks)
    want_descale = scale[:, :, 0, :, 0].transpose(0, 2, 1) if block_quant else scale[:, 0, :, :]
    np.testing.assert_allclose(descale.cpu().numpy(), want_descale, rtol=1e-5)
    # The codes: the documented float32 arithmetic, bit for bit without the rotation. With it, the
    # kernel's float32 butterflies and the float64 rotation here may put a rare value on the other
    # side of an e4m3 rounding midpoint: then one e4m3 step apart.
    want8, want_descale32 = quantize_like_the_kernel(x, rotate, block_quant, seed)
    if not rotate:
        assert torch.equal(x8.view(torch.uint8), want8.view(torch.uint8))
        assert torch.equal(descale, want_descale32)
    got, want = dequantize(x8, descale), dequantize(want8, want_descale32)
    differs = ~torch.isclose(got, want, rtol=1e-5, atol=1e-12)
    assert differs.double().mean().item() <= 1e-3
    assert (got - want).abs().max().item() <= want.abs().max().item() / 8  # one step at the largest magnitude


def test_quantize_fp8_determinism_and_seed(gpu):
    x = randn((2, 260, 2, 128), torch.bfloat16, 61)
    a8, ad = hopattn.quantize_fp8(x, seed=7)
    b8, bd = hopattn.quantize_fp8(x, seed=7)
    assert torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)) and torch.equal(ad, bd)
    c8, _ = hopattn.quantize_fp8(x, seed=8)
    assert not torch.equal(a8.view(torch.uint8), c8.view(torch.uint8))
    # Without the rotation the seed is unused.
    n7, _ = hopattn.quantize_fp8(x, rotate=False, seed=7)
    n8, _ = hopattn.quantize_fp8(x, rotate=False, seed=8)
    assert torch.equal(n7.view(torch.uint8), n8.view(torch.uint8))
    # A strided view gives the same bytes.
    xt = x.transpose(1, 2).contiguous().transpose(1, 2)
    assert torch.equal(hopattn.quantize_fp8(xt, seed=7)[0].view(torch.uint8), a8.view(torch.uint8))
    # All-zero blocks: descale 1, codes +0.
    z8, zd = hopattn.quantize_fp8(torch.zeros((1, 130, 1, 64), dtype=torch.float16, device="cuda"))
    assert (z8.view(torch.uint8) == 0).all() and (zd == 1).all()
    # head_dim 96 (a multiple of 16) quantises without the rotation.
    y8, yd = hopattn.quantize_fp8(randn((1, 10, 1, 96), torch.bfloat16, 62), rotate=False)
    assert y8.shape == (1, 10, 1, 96) and yd.shape == (1, 1, 1)


def test_fp8_bad_inputs_name_the_argument(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    q, k, v = make_qkv(1, 300, 300, 2, 2, 128, seed=71)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q: dtype must be bf16 or fp16"):
        hopattn.attention_fp8(q.float(), k.float(), v.float())
    with pytest.raises(hopattn.InvalidArgumentError, match=r"k: dtype"):
        hopattn.attention_fp8(q, k.half(), v)
    q96, k96, v96 = make_qkv(1, 16, 16, 2, 2, 96, seed=72)
    with pytest.raises(hopattn.UnsupportedError, match="head_dim 96"):
        hopattn.attention_fp8(q96, k96, v96, incoherent=True)
    with pytest.raises(hopattn.UnsupportedError, match=r"head_dim\)=96.*rotation"):
        hopattn.quantize_fp8(q96, rotate=True)
    with pytest.raises(hopattn.InvalidArgumentError, match="in: dtype"):
        hopattn.quantize_fp8(q.float())
    with pytest.raises(hopattn.InvalidArgumentError, match="x: expected 4 dims"):
        hopattn.quantize_fp8(q[0])

    (q8, qd), (k8, kd), (v8, vd) = (quantize_per_tensor(t) for t in (q, k, v))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"k_descale\.sizes\[2\]=2"):
        hopattn.forward_fp8(q8, k8, v8, k_descale=torch.ones((1, 2, 2), device="cuda"))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q_descale\.sizes\[1\]=3"):
        hopattn.forward_fp8(q8, k8, v8, q_descale=torch.ones((1, 3, 1), device="cuda"))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"v_descale: expected 2 dims"):
        hopattn.forward_fp8(q8, k8, v8, v_descale=torch.ones((1, 2, 1), device="cuda"))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"v_descale: dtype must be fp32"):
        hopattn.forward_fp8(q8, k8, v8, v_descale=torch.ones((1, 2), device="cuda", dtype=torch.float16))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q_descale: dtype torch.float64"):
        hopattn.forward_fp8(q8, k8, v8, q_descale=torch.ones((1, 2, 1), device="cuda", dtype=torch.float64))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"k_descale: on device"):
        hopattn.forward_fp8(q8, k8, v8, k_descale=torch.ones((1, 2, 1)))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q: dtype must be e4m3"):
        hopattn.forward_fp8(q, k, v)
    with pytest.raises(hopattn.HopattnError, match=r"out: dtype"):
        hopattn.forward_fp8(q8, k8, v8, out_dtype=torch.float32)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"out: dtype e4m3"):
        hopattn.forward_fp8(q8, k8, v8, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="out_dtype"):
        hopattn.forward_fp8(q8, k8, v8, out_dtype="bf16")


# --- bench helpers (no GPU) ---------------------------------------------------------------------------


def _bench_module(name):
    import importlib

    return importlib.import_module(name)  # bench/ is on sys.path (conftest.py)


def test_compare_fp8_direction_helpers(tmp_path):
    compare = _bench_module("compare")
    assert compare.parse_args(["--direction", "fp8", "--quick"]).direction == "fp8"
    # quantize_fp8 bytes: bf16 read + e4m3 written + fp32 descales (3 blocks of 128 rows at 300).
    assert compare.fp8_quantize_bytes(2, 300, 4, 128) == 2 * 300 * 4 * 128 * 3 + 4 * 2 * 4 * 3
    assert compare.gb_per_s(2e9, 1000.0) == pytest.approx(2.0) and compare.gb_per_s(1, None) is None
    assert compare.fp8_output_stem(tmp_path, date="2026-12-01", tag="h200").name == "fp8-2026-12-01-h200"
    assert compare.fp8_check({"fp8_e2e": 0.05, "fp8_kernel": 0.05}, "cudnn") == "ok"
    assert compare.fp8_check({}, None) == "unchecked"
    bad = compare.fp8_check({"fp8_e2e": 0.2, "fp8_kernel": float("nan")}, "cudnn")
    assert bad == "MISMATCH attention_fp8 2.0e-01 vs cuDNN, forward_fp8 nan vs cuDNN"
    assert compare.fp8_check({"fp8_e2e": 0.05, "fp8_kernel": 0.11}, "fa2") == "MISMATCH forward_fp8 1.1e-01 vs FA2 (SDPA flash)"
    assert (compare.fp8_check({"fp8_e2e": 0.05, "fp8_pv16": 0.3}, "cudnn")
            == "MISMATCH attention_fp8(quantize_v=False) 3.0e-01 vs cuDNN")
    rows = [dict(head_dim=128, causal=True, seqlen=4096, batch=4, heads=16, quantize_gbps=3012.4, check="ok",
                 tflops={"fp8_e2e": 800.0, "fp8_kernel": 900.0, "hopattn": 500.0, "cudnn": 400.0, "fa2": None})]
    impls = ["fp8_e2e", "fp8_kernel", "hopattn", "cudnn", "fa2"]
    table = compare.fp8_markdown_table(rows, impls).splitlines()
    assert table[0] == ("| hdim | causal | seqlen | batch | heads | hopattn FP8 | hopattn FP8 kernel | hopattn bf16 | cuDNN "
                        "| FA2 (SDPA flash) | quantize_fp8 GB/s | FP8/cuDNN | FP8/bf16 | check |")
    assert table[1].count("|") == table[0].count("|")
    assert table[2] == "| 128 | yes | 4k | 4 | 16 | 800.0 | 900.0 | 500.0 | 400.0 | n/a | 3012 | 2.00x | 1.60x | ok |"
    env = dict(device="NVIDIA H200", torch="2.x", cuda="13.0", cudnn=91900, hopattn_version="0.1.0")
    report = compare.fp8_report("T", env, "| t |").splitlines()
    assert report[0].startswith("FP8 forward") and "(T)" in report[0] and report[-1] == "| t |"


def test_fp8_accuracy_arguments_and_cpu_mode(tmp_path, capsys):
    acc = _bench_module("fp8_accuracy")
    args = acc.parse_args(["--gpu", "--attribution", "--json", "x.json"])
    assert args.gpu and args.attribution and args.seqlens is None and args.json == "x.json"
    with pytest.raises(SystemExit):
        acc.parse_args(["--attribution"])  # needs --gpu
    out = tmp_path / "r.json"
    acc.main(["--head-dims", "64", "--seqlens", "130", "--json", str(out)])
    import json

    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert (row["head_dim"], row["seqlen"]) == (64, 130) and row["ratio"] > 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("| 64 | 130 |")


@needs_torch
def test_fp8_accuracy_torch_simulation_matches_numpy_model():
    acc = _bench_module("fp8_accuracy")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    rng = np.random.default_rng(0)
    x = f8.outlier_inputs((2, 200, 3, 64), rng)
    xt = torch.from_numpy(x)
    for gran in ("tensor", "head", "block"):
        want = f8.quantize(x, gran, 128)[0]
        np.testing.assert_allclose(acc.quantize_sim(torch, xt, gran).numpy(), want, rtol=1e-6, atol=1e-12)
    p = rng.random(1000)
    np.testing.assert_array_equal(acc.e4m3_round(torch, torch.from_numpy(p)).numpy(), f8.round_to_e4m3(p))
    q, k, v = (f8.outlier_inputs((1, 150, 2, 64), rng) for _ in range(3))
    qt, kt, vt = (torch.from_numpy(a) for a in (q, k, v))
    np.testing.assert_allclose(acc.attention_fp64(torch, qt, kt, vt, budget_bytes=8 * 150 * 7).numpy(),
                               f8.attention_fp64(q, k, v), rtol=1e-10, atol=1e-12)
    rounded = acc.attention_fp64(torch, qt, kt, vt, round_p=lambda t: acc.round_p_sim(torch, t))
    np.testing.assert_allclose(rounded.numpy(), f8.attention_from_fp8(q, k, v), rtol=1e-9, atol=1e-12)


def test_fp8_prepass_arguments_and_kernel_names():
    pre = _bench_module("fp8_prepass")
    args = pre.parse_args([])
    assert args.rows == 65536 and args.calls == 20 and args.seqlens == "1024,2048"
    args = pre.parse_args(["--rows", "4096", "--calls", "5", "--seqlens", "4096"])
    assert (args.rows, args.calls, args.seqlens) == (4096, 5, "4096")
    name = "void hopattn::sm90::fp8::(anonymous namespace)::quantize_rows_kernel<(hopattn::DType)0, 16>(RowsParams)"
    assert pre.short(name) == "void fp8::quantize_rows_kernel<(hopattn::DType)0, 16>(RowsParams)"
    assert len(pre.short("x" * 200)) == 90
