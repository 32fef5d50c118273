# FP8 on packed variable-length batches: hopattn.attention_fp8_varlen / forward_fp8_varlen
# (python/hopattn/fp8.py) over the C ABI 9 structs hopattn_fp8_varlen_attention_args and
# hopattn_fp8_varlen_fwd_args (python/hopattn/_lib.py).
#  - Everywhere: the ctypes struct layouts against hand-derived offsets, the header's field lists
#    and (with a C compiler) offsetof; the pack helpers; argument checks made in Python before the
#    library is loaded (the library's loader is replaced by one that fails the test).
#  - With the library (no GPU needed): the structs as libhopattn reads them, through its
#    validation and workspace-size queries on fake addresses that are never dereferenced.
#  - With torch and an sm_90 GPU: each sequence's rows bitwise equal to hopattn.attention_fp8 on
#    that sequence alone, and within the FP8 bound of float64 attention; seqused (and non-finite
#    rows outside the sequences); forward_fp8_varlen on quantize_fp8's output and on hand-made
#    e4m3 codes with power-of-two descales against float64 attention of the dequantised values;
#    scalar descales; return_lse; check_index_values naming the bad index tensor.
import ctypes
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hopattn
from hopattn import _lib
from hopattn_test_support import (
    FakeTensors,
    cu_seqlens,
    fp8_head_dim_and_dtype,
    optional_torch,
    require_library_or_skip_module,
    sequences,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = REPO_ROOT / "include" / "hopattn" / "hopattn_c.h"

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()


# --- struct layouts (no library) ------------------------------------------------------------------
# Derived by hand from hopattn_c.h for LP64 (x86-64/aarch64 Linux): hopattn_tensor is 80 bytes,
# 8-byte aligned; the tensors back to back, the two int64 max_seqlen, then 4-byte scalars, then
# padding to a multiple of 8.
TENSOR = 80
EXPECTED_LAYOUTS = {
    # 9 tensors (720) + max_seqlen_q/k (736) + causal, has_softmax_scale, softmax_scale, incoherent,
    # block_quant, rotate_v, seed, check_index_values (768): no padding
    "HopattnFp8VarlenAttentionArgs": (768, {
        "q": 0, "k": TENSOR, "v": 2 * TENSOR, "out": 3 * TENSOR, "lse": 4 * TENSOR, "cu_seqlens_q": 5 * TENSOR,
        "cu_seqlens_k": 6 * TENSOR, "seqused_q": 7 * TENSOR, "seqused_k": 8 * TENSOR, "max_seqlen_q": 720,
        "max_seqlen_k": 728, "causal": 736, "has_softmax_scale": 740, "softmax_scale": 744, "incoherent": 748,
        "block_quant": 752, "rotate_v": 756, "seed": 760, "check_index_values": 764}),
    # 12 tensors (960) + max_seqlen_q/k (976) + causal, has_softmax_scale, softmax_scale,
    # check_index_values (992): no padding
    "HopattnFp8VarlenFwdArgs": (992, {
        "q": 0, "k": TENSOR, "v": 2 * TENSOR, "q_descale": 3 * TENSOR, "k_descale": 4 * TENSOR,
        "v_descale": 5 * TENSOR, "out": 6 * TENSOR, "lse": 7 * TENSOR, "cu_seqlens_q": 8 * TENSOR,
        "cu_seqlens_k": 9 * TENSOR, "seqused_q": 10 * TENSOR, "seqused_k": 11 * TENSOR, "max_seqlen_q": 960,
        "max_seqlen_k": 968, "causal": 976, "has_softmax_scale": 980, "softmax_scale": 984,
        "check_index_values": 988}),
}

# ctypes class -> C struct name
C_NAMES = {
    "HopattnFp8VarlenAttentionArgs": "hopattn_fp8_varlen_attention_args",
    "HopattnFp8VarlenFwdArgs": "hopattn_fp8_varlen_fwd_args",
}

FP8_VARLEN_FUNCTIONS = (
    "hopattn_attention_fp8_varlen_workspace_size",
    "hopattn_attention_fp8_varlen",
    "hopattn_forward_fp8_varlen_workspace_size",
    "hopattn_forward_fp8_varlen",
)


@pytest.mark.parametrize("cls_name", sorted(EXPECTED_LAYOUTS))
def test_struct_layout_matches_hand_derived_offsets(cls_name):
    cls = getattr(_lib, cls_name)
    size, offsets = EXPECTED_LAYOUTS[cls_name]
    assert ctypes.sizeof(cls) == size
    assert [name for name, _ in cls._fields_] == list(offsets)  # every field, in this order
    for field, offset in offsets.items():
        assert getattr(cls, field).offset == offset, field


_C_TYPES = {
    "hopattn_tensor": lambda: _lib.HopattnTensor,
    "int32_t": lambda: ctypes.c_int32,
    "int64_t": lambda: ctypes.c_int64,
    "uint32_t": lambda: ctypes.c_uint32,
    "float": lambda: ctypes.c_float,
}


def header_struct_fields(c_name):
    """[(field, ctypes type)] of `typedef struct c_name {...} c_name;` in hopattn_c.h, in order."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.DOTALL)
    m = re.search(r"typedef struct " + c_name + r" \{(.*?)\} " + c_name + ";", text, re.DOTALL)
    assert m, f"struct {c_name} not found in {HEADER}"
    fields = []
    for decl in (d.strip() for d in m.group(1).split(";")):
        if decl:
            ctype, names = decl.split(None, 1)
            fields.extend((name.strip(), _C_TYPES[ctype]()) for name in names.split(","))
    return fields


@pytest.mark.parametrize("cls_name", sorted(C_NAMES))
def test_struct_fields_follow_the_header(cls_name):
    got = getattr(_lib, cls_name)._fields_
    want = header_struct_fields(C_NAMES[cls_name])
    assert [n for n, _ in got] == [n for n, _ in want]
    for (name, t_got), (_, t_want) in zip(got, want):
        assert t_got is t_want, name


def test_struct_layout_matches_the_c_compiler(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = []
    for cls_name, c_name in C_NAMES.items():
        lines.append(f'printf("{cls_name} size %zu\\n", sizeof({c_name}));')
        for field, _ in getattr(_lib, cls_name)._fields_:
            lines.append(f'printf("{cls_name} {field} %zu\\n", offsetof({c_name}, {field}));')
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "hopattn/hopattn_c.h"\nint main(void) {\n'
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-I", str(REPO_ROOT / "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert len(out.splitlines()) == sum(len(getattr(_lib, c)._fields_) + 1 for c in C_NAMES)
    for line in out.splitlines():
        cls_name, field, value = line.split()
        cls = getattr(_lib, cls_name)
        got = ctypes.sizeof(cls) if field == "size" else getattr(cls, field).offset
        assert got == int(value), line


def test_functions_are_in_the_header_and_declared():
    text = HEADER.read_text()
    assert int(re.search(r"#define HOPATTN_ABI_VERSION (\d+)", text).group(1)) == _lib.ABI_VERSION == 12
    source = Path(_lib.__file__).read_text()
    for fn in FP8_VARLEN_FUNCTIONS:
        assert re.search(r"\b" + fn + r"\(", text), fn
        assert f'"{fn}"' in source, fn  # in _declare's table


def test_pack_helpers_fill_every_field():
    t = [_lib.make_tensor(0x1000 * (i + 1), _lib.DTYPE_BF16, (5, 2, 64), (128, 64, 1)) for i in range(12)]
    a = _lib.make_fp8_varlen_attention_args(t[0], t[1], t[2], t[3], None, t[5], t[6], None, t[8], 300, 260, True,
                                            0.25, False, True, 0xFFFFFFFF, True, True)
    assert (a.q.data, a.k.data, a.v.data, a.out.data) == (0x1000, 0x2000, 0x3000, 0x4000)
    assert a.lse.data is None and a.lse.ndim == 0 and a.seqused_q.data is None and a.seqused_q.ndim == 0
    assert (a.cu_seqlens_q.data, a.cu_seqlens_k.data, a.seqused_k.data) == (0x6000, 0x7000, 0x9000)
    assert (a.max_seqlen_q, a.max_seqlen_k, a.causal, a.has_softmax_scale, a.softmax_scale) == (300, 260, 1, 1, 0.25)
    assert (a.incoherent, a.block_quant, a.seed, a.rotate_v, a.check_index_values) == (0, 1, 0xFFFFFFFF, 1, 1)
    d = _lib.make_fp8_varlen_attention_args(*t[:9], 1, 2, False, None, True, False, 5)
    assert (d.causal, d.has_softmax_scale, d.incoherent, d.block_quant, d.seed, d.rotate_v, d.check_index_values) == (
        0, 0, 1, 0, 5, 0, 0)
    f = _lib.make_fp8_varlen_fwd_args(t[0], t[1], t[2], None, t[4], None, t[6], t[7], t[8], t[9], None, t[11], 7, 9,
                                      False, None, True)
    assert f.q_descale.data is None and f.q_descale.ndim == 0 and f.v_descale.ndim == 0
    assert (f.k_descale.data, f.out.data, f.lse.data, f.cu_seqlens_q.data, f.cu_seqlens_k.data) == (
        0x5000, 0x7000, 0x8000, 0x9000, 0xA000)
    assert f.seqused_q.data is None and f.seqused_k.data == 0xC000
    assert (f.max_seqlen_q, f.max_seqlen_k, f.causal, f.has_softmax_scale, f.check_index_values) == (7, 9, 0, 0, 1)
    assert _lib.make_fp8_varlen_fwd_args(*t[:12], 1, 1, True, 2.0).check_index_values == 0


def test_fp8_varlen_ops_are_exported():
    for name in ("attention_fp8_varlen", "forward_fp8_varlen"):
        assert name in hopattn.__all__ and callable(getattr(hopattn, name))


# --- Python-side argument checks (no library) --------------------------------------------------------


@pytest.fixture
def no_library(monkeypatch):
    """The checks below are Python's: loading the library fails the test."""

    def load():
        raise AssertionError("the library was loaded")

    monkeypatch.setattr(_lib, "load", load)


def _np_args():
    x = np.zeros((4, 1, 64), dtype=np.float16)
    cu = np.array([0, 4], dtype=np.int32)
    return x, x, x, cu, cu


def test_fp8_varlen_ops_reject_numpy_and_bad_scalars(no_library):
    q, k, v, cu_q, cu_k = _np_args()
    with pytest.raises(TypeError, match="q: attention_fp8_varlen takes torch CUDA tensors"):
        hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 4, 4)
    with pytest.raises(TypeError, match="q: forward_fp8_varlen takes torch CUDA tensors"):
        hopattn.forward_fp8_varlen(q, k, v, cu_q, cu_k, 4, 4)
    for bad in (-1, 1 << 32):
        with pytest.raises(hopattn.InvalidArgumentError, match="seed"):
            hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 4, 4, seed=bad)
    for bad in (1.5, True, "0", None):
        with pytest.raises(TypeError, match="seed"):
            hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 4, 4, seed=bad)
    for fn in (hopattn.attention_fp8_varlen, hopattn.forward_fp8_varlen):
        with pytest.raises(TypeError, match="softmax_scale"):
            fn(q, k, v, cu_q, cu_k, 4, 4, softmax_scale=True)
        with pytest.raises(TypeError, match="softmax_scale"):
            fn(q, k, v, cu_q, cu_k, 4, 4, softmax_scale="0.1")
        for bad in (4.0, "4", None, True):
            with pytest.raises(TypeError, match="max_seqlen_q must be an int"):
                fn(q, k, v, cu_q, cu_k, bad, 4)
            with pytest.raises(TypeError, match="max_seqlen_k must be an int"):
                fn(q, k, v, cu_q, cu_k, 4, bad)
        with pytest.raises(hopattn.InvalidArgumentError, match="max_seqlen_k=.* does not fit in int64"):
            fn(q, k, v, cu_q, cu_k, 4, 1 << 63)
    # numpy integers are ints.
    with pytest.raises(TypeError, match="q: attention_fp8_varlen takes torch"):
        hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, np.int64(4), np.int32(4), seed=np.uint32(7))


@needs_torch
def test_fp8_varlen_ops_reject_cpu_tensors(no_library):
    x = torch.zeros((4, 1, 64), dtype=torch.bfloat16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(hopattn.InvalidArgumentError, match="q: expected a CUDA tensor"):
        hopattn.attention_fp8_varlen(x, x, x, cu, cu, 4, 4)
    with pytest.raises(hopattn.InvalidArgumentError, match="q: expected a CUDA tensor"):
        hopattn.forward_fp8_varlen(x, x, x, cu, cu, 4, 4)


@needs_gpu
def test_fp8_varlen_python_checks_on_cuda_tensors(no_library):
    """What Python checks of CUDA inputs before the library: dims, devices, the index tensors'
    type, dtype and contiguity, the descales' type and device, out_dtype's type."""
    q = torch.zeros((8, 2, 64), dtype=torch.bfloat16, device="cuda")
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device="cuda")
    used = torch.tensor([3, 5], dtype=torch.int32, device="cuda")
    q8 = q.to(torch.float8_e4m3fn)
    for fn, x in ((hopattn.attention_fp8_varlen, q), (hopattn.forward_fp8_varlen, q8)):
        with pytest.raises(hopattn.InvalidArgumentError, match=r"q: expected 3 dims \(total_tokens, heads, head_dim\)"):
            fn(x[None], x, x, cu, cu, 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match=r"v: expected 3 dims"):
            fn(x, x, x[0], cu, cu, 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match="k: expected a CUDA tensor"):
            fn(x, x.cpu(), x, cu, cu, 5, 5)
        with pytest.raises(TypeError, match="v: expected a torch.Tensor like q"):
            fn(x, x, np.zeros((8, 2, 64), dtype=np.float16), cu, cu, 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_q: dtype must be int32, got torch.int64"):
            fn(x, x, x, cu.long(), cu, 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_k: dtype must be int32"):
            fn(x, x, x, cu, cu.float(), 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_k must be contiguous"):
            fn(x, x, x, cu, torch.tensor([0, 9, 3, 9, 8, 9], dtype=torch.int32, device="cuda")[::2], 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_q: on device 'cpu'"):
            fn(x, x, x, cu.cpu(), cu, 5, 5)
        with pytest.raises(TypeError, match=r"cu_seqlens_k: expected a torch.Tensor \(int32\)"):
            fn(x, x, x, cu, [0, 3, 8], 5, 5)
        with pytest.raises(hopattn.InvalidArgumentError, match="seqused_q: dtype must be int32"):
            fn(x, x, x, cu, cu, 5, 5, seqused_q=used.long())
        with pytest.raises(hopattn.InvalidArgumentError, match="seqused_k: on device 'cpu'"):
            fn(x, x, x, cu, cu, 5, 5, seqused_k=used.cpu())
        with pytest.raises(TypeError, match=r"seqused_k: expected a torch.Tensor"):
            fn(x, x, x, cu, cu, 5, 5, seqused_k=np.array([3, 5], dtype=np.int32))
    with pytest.raises(hopattn.InvalidArgumentError, match="seed"):
        hopattn.attention_fp8_varlen(q, q, q, cu, cu, 5, 5, seed=-1)
    for name in ("q_descale", "k_descale", "v_descale"):
        with pytest.raises(TypeError, match=f"{name}: expected a float32 tensor, a float or None, got bool"):
            hopattn.forward_fp8_varlen(q8, q8, q8, cu, cu, 5, 5, **{name: True})
        with pytest.raises(TypeError, match=f"{name}: expected a float32 tensor, a float or None, got str"):
            hopattn.forward_fp8_varlen(q8, q8, q8, cu, cu, 5, 5, **{name: "1"})
        with pytest.raises(hopattn.InvalidArgumentError, match=f"{name}: on device 'cpu'"):
            hopattn.forward_fp8_varlen(q8, q8, q8, cu, cu, 5, 5, **{name: torch.ones(())})
    with pytest.raises(TypeError, match="out_dtype must be a torch.dtype"):
        hopattn.forward_fp8_varlen(q8, q8, q8, cu, cu, 5, 5, out_dtype="bf16")


# --- through the library, no GPU needed -------------------------------------------------------------
# Addresses below are fake (aligned, never dereferenced): only the workspace-size queries and calls
# that fail validation are made, so nothing is launched even on a GPU machine.


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()
    return _lib.load()


def _call_invalid(lib, fn, args):
    """The size query says 0 (invalid), and the call (no workspace, the default stream) returns
    INVALID_ARGUMENT before touching the device: (its message)."""
    assert getattr(lib, fn + "_workspace_size")(ctypes.byref(args)) == 0
    status = getattr(lib, fn)(ctypes.byref(args), None, 0, None)
    msg = _lib.last_error()
    assert status == _lib.STATUS_INVALID_ARGUMENT, (status, msg)
    return msg


# Three sequences, 700 query and 500 key tokens, the longest 300 and 260 (3 and 3 blocks of 128).
B, TQ, TK, MQ, MK, HQ, HKV = 3, 700, 500, 300, 260, 8, 2


def _up(x):
    return -(-x // 256) * 256


def _varlen_fields(t, d, in_code, out_code):
    """The packed-batch fields shared by both structs, valid for head_dim d (fake addresses)."""
    I32, F32 = _lib.DTYPE_INT32, _lib.DTYPE_FP32
    return dict(
        q=t(in_code, (TQ, HQ, d)), k=t(in_code, (TK, HKV, d)), v=t(in_code, (TK, HKV, d)),
        out=t(out_code, (TQ, HQ, d)), lse=t(F32, (HQ, TQ)), cu_seqlens_q=t(I32, (B + 1,)),
        cu_seqlens_k=t(I32, (B + 1,)), seqused_q=None, seqused_k=t(I32, (B,)), max_seqlen_q=MQ, max_seqlen_k=MK,
        causal=True, softmax_scale=None,
    )


def test_attention_fp8_varlen_struct_as_the_library_reads_it(lib):
    d, code = fp8_head_dim_and_dtype()
    t = FakeTensors()
    base = dict(_varlen_fields(t, d, code, code), incoherent=True, block_quant=True, seed=3)

    def args(**kw):
        return _lib.make_fp8_varlen_attention_args(**dict(base, **kw))

    def size(a):
        return lib.hopattn_attention_fp8_varlen_workspace_size(ctypes.byref(a))

    # Packed e4m3 Q and K, V^T (whole 128-key tiles per sequence), descales per (sequence, head,
    # block of max_seqlen) (block_quant) or per (sequence, head), V's per (sequence, kv head).
    vt = _up(HKV * d * (-(-TK // 128) * 128 + 128 * B))
    counter = 256  # the dynamic tile order's counter, the aligned int after V^T
    common = _up(TQ * HQ * d) + _up(TK * HKV * d) + vt + counter + _up(4 * B * HKV)
    per_block = common + _up(4 * B * HQ * 3) + _up(4 * B * HKV * 3)
    per_head = common + _up(4 * B * HQ) + _up(4 * B * HKV)
    assert per_block != per_head
    assert size(args()) == per_block
    assert size(args(block_quant=False)) == per_head
    assert size(args(rotate_v=True)) == per_block + _up(TK * HKV * d)  # the rotated V, ordinary layout
    for kw in (dict(seed=0xFFFFFFFF), dict(check_index_values=True), dict(causal=False), dict(seqused_k=None)):
        assert size(args(**kw)) == per_block, kw
    # Each field, made wrong alone, is the one the library names.
    I32, F32 = _lib.DTYPE_INT32, _lib.DTYPE_FP32
    bad = {
        "q": (dict(q=t(F32, (TQ, HQ, d))), "q: dtype must be bf16 or fp16 for attention_fp8_varlen"),
        "k": (dict(k=t(_lib.DTYPE_E4M3, (TK, HKV, d))), "k: dtype must be bf16 or fp16"),
        "v": (dict(v=t(code, (TK - 1, HKV, d))), "v.sizes[0]"),
        "out": (dict(out=t(code, (TQ, HQ, d + 16))), "out"),
        "lse": (dict(lse=t(F32, (HQ, TQ + 1))), "lse.sizes[1]"),
        "cu_seqlens_q": (dict(cu_seqlens_q=t(F32, (B + 1,))), "cu_seqlens_q: dtype must be int32"),
        "cu_seqlens_k": (dict(cu_seqlens_k=t(I32, (B,))), "cu_seqlens_k.sizes[0]=3 but expected 4"),
        "seqused_q": (dict(seqused_q=t(I32, (B + 1,))), "seqused_q.sizes[0]=4 but expected 3"),
        "seqused_k": (dict(seqused_k=t(I32, (B + 1,))), "seqused_k.sizes[0]=4 but expected 3"),
        "max_seqlen_q": (dict(max_seqlen_q=-1), "max_seqlen_q=-1"),
        "max_seqlen_k": (dict(max_seqlen_k=-1), "max_seqlen_k=-1"),
        "softmax_scale": (dict(softmax_scale=0.0), "softmax_scale"),
    }
    for name, (kw, needle) in bad.items():
        msg = _call_invalid(lib, "hopattn_attention_fp8_varlen", args(**kw))
        assert msg.startswith(needle), (name, msg)
    # softmax_scale is read only when has_softmax_scale is set.
    a = args(softmax_scale=0.0)
    a.has_softmax_scale = 0
    assert size(a) == per_block


def test_forward_fp8_varlen_struct_as_the_library_reads_it(lib):
    d, out_code = fp8_head_dim_and_dtype()
    t = FakeTensors()
    E4, F32, I32 = _lib.DTYPE_E4M3, _lib.DTYPE_FP32, _lib.DTYPE_INT32
    base = dict(_varlen_fields(t, d, E4, out_code), q_descale=t(F32, (B, HQ, 3)), k_descale=t(F32, (B, HKV, 3)),
                v_descale=t(F32, (B, HKV)))

    def args(**kw):
        return _lib.make_fp8_varlen_fwd_args(**dict(base, **kw))

    def size(a):
        return lib.hopattn_forward_fp8_varlen_workspace_size(ctypes.byref(a))

    vt = _up(HKV * d * (-(-TK // 128) * 128 + 128 * B)) + 256  # V^T, then the tile counter
    assert size(args()) == vt
    per_head = dict(q_descale=t(F32, (B, HQ, 1)), k_descale=t(F32, (B, HKV, 1)))
    absent = dict(q_descale=None, k_descale=None, v_descale=None, lse=None, seqused_k=None)
    for kw in (per_head, absent, dict(check_index_values=True)):
        assert size(args(**kw)) == vt, kw
    bad = {
        "q": (dict(q=t(out_code, (TQ, HQ, d))), "q: dtype must be e4m3 for forward_fp8_varlen"),
        # blocks are per sequence, counted by max_seqlen_q (3), not by total_q (6)
        "q_descale": (dict(q_descale=t(F32, (B, HQ, 6))), "q_descale.sizes[2]=6 but expected 1 (one per head) or 3"),
        "k_descale": (dict(k_descale=t(F32, (B + 1, HKV, 3))), "k_descale.sizes[0]=4 but expected 3"),
        "v_descale": (dict(v_descale=t(F32, (B, HQ))), "v_descale.sizes[1]=8 but expected 2"),
        "v_descale dtype": (dict(v_descale=t(out_code, (B, HKV))), "v_descale: dtype must be fp32"),
        "out": (dict(out=t(E4, (TQ, HQ, d))), "out: dtype e4m3 is not an output dtype"),
        "lse": (dict(lse=t(F32, (HQ + 1, TQ))), "lse.sizes[0]"),
        "cu_seqlens_k": (dict(cu_seqlens_k=t(I32, (B + 2,))), "cu_seqlens_k.sizes[0]=5 but expected 4"),
        "seqused_q": (dict(seqused_q=t(I32, (B - 1,))), "seqused_q.sizes[0]=2 but expected 3"),
        "max_seqlen_k": (dict(max_seqlen_k=-1), "max_seqlen_k=-1"),
        "softmax_scale": (dict(softmax_scale=-1.0), "softmax_scale"),
    }
    for name, (kw, needle) in bad.items():
        msg = _call_invalid(lib, "hopattn_forward_fp8_varlen", args(**kw))
        assert msg.startswith(needle), (name, msg)
    a = args(softmax_scale=-1.0)
    a.has_softmax_scale = 0
    assert size(a) == vt


# --- GPU ----------------------------------------------------------------------------------------------

FP8_BOUND = 6e-2  # relative L2 against float64 attention on ordinary (N(0, 1)) inputs (test_fp8.py's)
LSE_BOUND = 0.25  # max |lse - fp64 lse| (test_fp8.py's)
DEQUANTISED_BOUND = 2.5e-2  # forward_fp8_varlen against float64 attention of its dequantised inputs
SEED = 1234


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


def packed_inputs(lens_q, lens_k, heads_q, heads_kv, head_dim, dtype, seed, extra_k_rows=0, row_pad=0):
    """Random packed q, k, v (N(0, 1)) and the int32 CUDA cu_seqlens; k and v get extra_k_rows rows
    past the last sequence, and every tensor row_pad extra elements per token row (a strided view)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)

    def rand(rows, heads):
        x = torch.randn((rows, heads * head_dim + row_pad), generator=gen, device="cuda").to(dtype)
        return x[:, : heads * head_dim].unflatten(1, (heads, head_dim))

    q = rand(int(cu_q[-1]), heads_q)
    k, v = rand(int(cu_k[-1]) + extra_k_rows, heads_kv), rand(int(cu_k[-1]) + extra_k_rows, heads_kv)
    return q, k, v, torch.from_numpy(cu_q).cuda(), torch.from_numpy(cu_k).cuda()


def reference(q, k, v, causal, softmax_scale=None):
    """float64 attention of (b, s, h, d) tensors: out (b, sq, hq, d), lse (b, hq, sq); bottom-right
    causal; rows that see no key give out 0 and lse -inf."""
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
    if sk == 0:
        return torch.zeros((b, sq, hq, d), dtype=torch.float64, device=q.device), torch.full(
            (b, hq, sq), float("-inf"), dtype=torch.float64, device=q.device)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    return torch.einsum("bhqk,bkhd->bqhd", p, vf), lse


def reference_varlen(q, k, v, cu_q, cu_k, causal, used_q=None, used_k=None, softmax_scale=None):
    """float64 attention of each sequence (its used prefix) of a packed batch: out (total_q, hq, d)
    and lse (hq, total_q); rows outside the used prefixes get 0 and -inf."""
    total_q, hq, d = q.shape
    out = torch.zeros((total_q, hq, d), dtype=torch.float64, device=q.device)
    lse = torch.full((hq, total_q), float("-inf"), dtype=torch.float64, device=q.device)
    to_np = (lambda t: None if t is None else t.cpu().numpy())
    for rows, keys in sequences(to_np(cu_q), to_np(cu_k), to_np(used_q), to_np(used_k)):
        if rows.stop > rows.start:
            o, l = reference(q[None, rows], k[None, keys], v[None, keys], causal, softmax_scale)
            out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


def rel_l2(got, want):
    got, want = got.double(), want.double()
    denom = want.norm().item()
    return (got - want).norm().item() / denom if denom else got.norm().item()


def check_lse(lse, want_lse, bound=LSE_BOUND):
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = torch.isfinite(want_lse)
    assert torch.isfinite(lse[finite]).all()
    if finite.any():
        assert (lse[finite].double() - want_lse[finite]).abs().max().item() <= bound


def check_each_sequence_equals_attention_fp8(out, lse, q, k, v, cu_q, cu_k, **kw):
    """Each nonempty sequence's rows of out and lse are bitwise what hopattn.attention_fp8 gives on
    that sequence alone as a batch of one, with the same options."""
    for b, (rows, keys) in enumerate(sequences(cu_q.cpu().numpy(), cu_k.cpu().numpy(), None, None)):
        if rows.stop == rows.start:
            continue
        want, want_lse = hopattn.attention_fp8(q[None, rows], k[None, keys], v[None, keys], return_lse=True, **kw)
        assert torch.equal(out[rows], want[0]), f"sequence {b} ({rows}, {keys}): out differs from attention_fp8's"
        assert torch.equal(lse[:, rows], want_lse[0]), f"sequence {b} ({rows}, {keys}): lse differs"


MIXED_Q = [17, 0, 300, 1, 129]
MIXED_K = [17, 5, 300, 0, 200]  # a sequence with no key, and len_k != len_q (bottom-right causal)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_varlen_equals_each_sequence_alone(gpu, head_dim, causal):
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    q, k, v, cu_q, cu_k = packed_inputs(MIXED_Q, MIXED_K, 4, 2, head_dim, torch.bfloat16, seed=head_dim)  # GQA 2:1
    out, lse = hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, max(MIXED_Q), max(MIXED_K), causal=causal, seed=SEED,
                                            return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (4, sum(MIXED_Q)) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert torch.isfinite(out).all()
    check_each_sequence_equals_attention_fp8(out, lse, q, k, v, cu_q, cu_k, causal=causal, seed=SEED)
    want, want_lse = reference_varlen(q, k, v, cu_q, cu_k, causal)
    assert rel_l2(out, want) <= FP8_BOUND
    check_lse(lse, want_lse)
    # Without return_lse: out alone, the same bits.
    alone = hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, max(MIXED_Q), max(MIXED_K), causal=causal, seed=SEED)
    assert torch.is_tensor(alone) and torch.equal(alone, out)


@pytest.mark.parametrize("options", [
    dict(incoherent=False, block_quant=False),
    dict(incoherent=True, block_quant=False),
    dict(incoherent=False, block_quant=True),
    dict(incoherent=True, block_quant=True, rotate_v=True),
], ids=lambda o: "-".join(k for k, on in o.items() if on) or "plain")
def test_attention_fp8_varlen_options_strides_and_fp16(gpu, options):
    """fp16, MQA, strided token rows, lengths around the 128-row block; each switch as attention_fp8's."""
    skip_unless_built(gpu, torch.float16, 128)
    lens_q, lens_k = [127, 255, 1, 400], [128, 300, 3, 257]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 1, 128, torch.float16, seed=3, row_pad=64)
    assert not q.is_contiguous()
    for causal in (False, True):
        out, lse = hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 400, 300, causal=causal, seed=77,
                                                return_lse=True, **options)
        assert out.dtype == torch.float16
        check_each_sequence_equals_attention_fp8(out, lse, q, k, v, cu_q, cu_k, causal=causal, seed=77, **options)
        want, want_lse = reference_varlen(q, k, v, cu_q, cu_k, causal)
        assert rel_l2(out, want) <= FP8_BOUND
        check_lse(lse, want_lse)


def test_attention_fp8_varlen_seed_softmax_scale_and_no_grad(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    q, k, v, cu_q, cu_k = packed_inputs(MIXED_Q, MIXED_Q, 2, 2, 128, torch.bfloat16, seed=5)
    run = lambda **kw: hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 300, 300, **kw)  # noqa: E731
    a = run(seed=1)
    assert torch.equal(a, run(seed=1))  # deterministic
    assert not torch.equal(a, run(seed=2))  # the seed picks the rotation
    assert torch.equal(run(incoherent=False, seed=1), run(incoherent=False, seed=2))  # unused without it
    scaled = run(softmax_scale=0.05, causal=True)
    assert rel_l2(scaled, reference_varlen(q, k, v, cu_q, cu_k, True, softmax_scale=0.05)[0]) <= FP8_BOUND
    qg = q.clone().requires_grad_()
    out = hopattn.attention_fp8_varlen(qg, k, v, cu_q, cu_k, 300, 300, seed=1)
    assert out.grad_fn is None and not out.requires_grad
    # On a side stream, ordered after work queued there.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        b = hopattn.attention_fp8_varlen(q * 1, k, v, cu_q, cu_k, 300, 300, seed=1)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(a, b)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_fp8_varlen_seqused_and_non_finite_rows_outside(gpu, causal):
    """Only the first seqused tokens of each sequence take part (the other query rows: out 0, lse
    -inf); keys and values past cu_seqlens_k[batch] are NaN, which the FP8 path never reads."""
    skip_unless_built(gpu, torch.bfloat16, 128)
    lens_q, lens_k = [200, 3, 0, 700], [300, 129, 40, 700]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 2, 128, torch.bfloat16, seed=9, extra_k_rows=77)
    k[sum(lens_k):] = float("nan")
    v[sum(lens_k):] = float("nan")
    used_q = torch.tensor([150, 3, 0, 650], dtype=torch.int32, device="cuda")
    used_k = torch.tensor([260, 0, 40, 699], dtype=torch.int32, device="cuda")
    out, lse = hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 700, 700, seqused_q=used_q, seqused_k=used_k,
                                            causal=causal, return_lse=True, check_index_values=True)
    assert torch.isfinite(out).all()
    want, want_lse = reference_varlen(q, k, v, cu_q, cu_k, causal, used_q, used_k)
    assert rel_l2(out, want) <= FP8_BOUND
    check_lse(lse, want_lse)
    unused = torch.isneginf(want_lse[0])  # rows past seqused_q, and the rows of sequence 1 (no key)
    assert unused.sum().item() == 50 + 3 + 50
    assert (out[unused] == 0).all()


def e4m3(x_scaled):
    """Rounds float32 values (already scaled into range) to e4m3fn, saturating like the kernel."""
    return x_scaled.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def block_rows(cu, nblocks):
    """(total, ) sequence index and block index (row within its sequence // 128) of each packed row."""
    cu = cu.long()
    total = int(cu[-1])
    seq = torch.searchsorted(cu[1:], torch.arange(total, device=cu.device), right=True)
    block = (torch.arange(total, device=cu.device) - cu[seq]) // 128
    return seq, block.clamp_max(nblocks - 1)


def dequantize(x8, descale, cu):
    """Packed e4m3 x8 (total, h, d) with descale (batch, h, nblocks) or (batch, h) -> float64."""
    if descale.dim() == 2:
        descale = descale[..., None]
    seq, block = block_rows(cu, descale.shape[2])
    per_row = descale.double()[seq, :, block]  # (total, h)
    return x8.double() * per_row[..., None]


def quantize_packed(x, cu, lens, rotate, seed):
    """x (total, h, d) quantised one sequence at a time with hopattn.quantize_fp8 (per 128-row block
    of each (sequence, head)): the packed e4m3 codes and descales (batch, h, ceil(max_len / 128)),
    1 where a sequence has fewer blocks."""
    nblocks = max(1, -(-max(lens) // 128))
    codes = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)  # e4m3 +0
    descale = torch.ones((len(lens), x.shape[1], nblocks), dtype=torch.float32, device=x.device)
    for b, n in enumerate(lens):
        if n:
            rows = slice(int(cu[b]), int(cu[b]) + n)
            s8, sd = hopattn.quantize_fp8(x[None, rows], rotate=rotate, seed=seed)
            codes[rows], descale[b, :, : sd.shape[2]] = s8[0].view(torch.uint8), sd[0]
    return codes.view(torch.float8_e4m3fn), descale


def quantize_v_packed(v, cu, lens):
    """What attention_fp8_varlen does to V: one scale per (sequence, kv head); descale (batch, heads_kv)."""
    codes = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    descale = torch.ones((len(lens), v.shape[1]), dtype=torch.float32, device=v.device)
    for b, n in enumerate(lens):
        if n:
            rows = slice(int(cu[b]), int(cu[b]) + n)
            amax = v[rows].float().abs().amax(dim=(0, 2))
            codes[rows] = e4m3(v[rows].float() * (448.0 / amax)[None, :, None]).view(torch.uint8)
            descale[b] = amax / 448.0
    return codes.view(torch.float8_e4m3fn), descale


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_forward_fp8_varlen_on_quantize_fp8(gpu, head_dim):
    """e4m3 inputs made by hopattn.quantize_fp8 per sequence (rotated, per block): against float64
    attention of the dequantised values, and close to attention_fp8_varlen with the same seed."""
    skip_unless_built(gpu, torch.bfloat16, head_dim)
    q, k, v, cu_q, cu_k = packed_inputs(MIXED_Q, MIXED_K, 4, 2, head_dim, torch.bfloat16, seed=41)
    q8, qd = quantize_packed(q, cu_q.cpu(), MIXED_Q, True, SEED)
    k8, kd = quantize_packed(k, cu_k.cpu(), MIXED_K, True, SEED)
    v8, vd = quantize_v_packed(v, cu_k.cpu(), MIXED_K)
    assert qd.shape == (5, 4, 3) and kd.shape == (5, 2, 3) and vd.shape == (5, 2)
    qn, kn, vn = dequantize(q8, qd, cu_q), dequantize(k8, kd, cu_k), dequantize(v8, vd, cu_k)
    for causal in (False, True):
        out, lse = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 300, 300, qd, kd, vd, causal=causal,
                                              return_lse=True)
        assert out.dtype == torch.bfloat16 and out.shape == q.shape and lse.shape == (4, sum(MIXED_Q))
        want, want_lse = reference_varlen(qn, kn, vn, cu_q, cu_k, causal)
        assert rel_l2(out, want) <= DEQUANTISED_BOUND
        check_lse(lse, want_lse, bound=0.05)
        e2e = hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, 300, 300, causal=causal, seed=SEED)
        assert rel_l2(out, e2e) <= 5e-3  # test_fp8.py's bound for forward_fp8 on quantize_fp8 vs attention_fp8


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_fp8_varlen_power_of_two_descales(gpu, head_dim, causal):
    """e4m3 codes with per-(sequence, head, block) descales 2^-2 .. 2^2: the dequantised values are
    exact, so only P's e4m3 rounding and the output's separate the kernel from float64 attention."""
    out_dtype = torch.float16 if causal else torch.bfloat16
    skip_unless_built(gpu, out_dtype, head_dim)
    lens_q, lens_k = [1, 260, 0, 129, 500], [40, 260, 7, 300, 129]
    gen = torch.Generator(device="cuda").manual_seed(head_dim + causal)
    cu_q, cu_k = (torch.from_numpy(cu_seqlens(n)).cuda() for n in (lens_q, lens_k))
    hq, hkv, batch = 4, 2, len(lens_q)

    def codes(rows, heads):
        return e4m3(torch.rand((rows, heads, head_dim), generator=gen, device="cuda") * 4 - 2)

    def descales(*shape):
        return torch.pow(2.0, torch.randint(-2, 3, shape, generator=gen, device="cuda").float())

    q8, k8, v8 = codes(sum(lens_q), hq), codes(sum(lens_k), hkv), codes(sum(lens_k), hkv)
    qd, kd, vd = descales(batch, hq, 4), descales(batch, hkv, 3), descales(batch, hkv)  # ceil(500/128), ceil(300/128)
    out, lse = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 500, 300, qd, kd, vd, causal=causal,
                                          out_dtype=out_dtype, return_lse=True)
    assert out.dtype == out_dtype and out.shape == (sum(lens_q), hq, head_dim) and lse.shape == (hq, sum(lens_q))
    want, want_lse = reference_varlen(dequantize(q8, qd, cu_q), dequantize(k8, kd, cu_k), dequantize(v8, vd, cu_k),
                                      cu_q, cu_k, causal)
    assert rel_l2(out, want) <= DEQUANTISED_BOUND
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[finite].double(), want_lse[finite], rtol=2e-3, atol=2e-3)
    # Scalar descales (a float, a 0-dim tensor) are per-head tensors of that value; None is 1.
    scalar = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 500, 300, 0.5, torch.tensor(2.0, device="cuda"), 0.25,
                                        causal=causal, out_dtype=out_dtype)
    full = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 500, 300, torch.full((batch, hq, 1), 0.5, device="cuda"),
                                      torch.full((batch, hkv, 1), 2.0, device="cuda"),
                                      torch.full((batch, hkv), 0.25, device="cuda"), causal=causal, out_dtype=out_dtype)
    assert torch.equal(scalar, full)
    ones = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 500, 300, causal=causal, out_dtype=out_dtype)
    want1, _ = reference_varlen(q8.double(), k8.double(), v8.double(), cu_q, cu_k, causal)
    assert rel_l2(ones, want1) <= DEQUANTISED_BOUND
    assert rel_l2(full.double() * 4, ones) <= 1e-3  # v scaled by 1/4 (exactly), q.k unchanged


def test_forward_fp8_varlen_seqused(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    lens_q, lens_k = [200, 3, 0, 300], [300, 129, 40, 300]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 2, 128, torch.bfloat16, seed=13)
    q8, k8, v8 = (e4m3(t.float() * 64) for t in (q, k, v))  # |x| < 7 -> within e4m3's range
    used_q = torch.tensor([150, 3, 0, 299], dtype=torch.int32, device="cuda")
    used_k = torch.tensor([260, 0, 40, 300], dtype=torch.int32, device="cuda")
    for causal in (False, True):
        out, lse = hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 300, 300, 1 / 64, 1 / 64, 1 / 64,
                                              seqused_q=used_q, seqused_k=used_k, causal=causal, return_lse=True)
        qn, kn, vn = (t.double() / 64 for t in (q8, k8, v8))
        want, want_lse = reference_varlen(qn, kn, vn, cu_q, cu_k, causal, used_q, used_k)
        assert rel_l2(out, want) <= DEQUANTISED_BOUND
        check_lse(lse, want_lse, bound=0.05)
        assert (out[torch.isneginf(want_lse[0])] == 0).all()


def test_fp8_varlen_empty_batches(gpu):
    skip_unless_built(gpu, torch.bfloat16, 64)
    # No query rows at all, and no sequence at all.
    for lens_q, lens_k in (([0, 0], [5, 3]), ([], [])):
        q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 2, 2, 64, torch.bfloat16, seed=1)
        out, lse = hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, max(lens_q, default=0), max(lens_k, default=0),
                                                return_lse=True)
        assert out.shape == (0, 2, 64) and lse.shape == (2, 0)
        out8, lse8 = hopattn.forward_fp8_varlen(q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn),
                                                v.to(torch.float8_e4m3fn), cu_q, cu_k, max(lens_q, default=0),
                                                max(lens_k, default=0), 1.0, 1.0, 1.0, return_lse=True)
        assert out8.shape == (0, 2, 64) and out8.dtype == torch.bfloat16 and lse8.shape == (2, 0)


def test_check_index_values_names_the_bad_index_tensor(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    q = torch.ones((64, 2, 128), dtype=torch.bfloat16, device="cuda")
    q8 = q.to(torch.float8_e4m3fn)
    good = torch.tensor([0, 30, 64], dtype=torch.int32, device="cuda")
    decreasing = torch.tensor([0, 40, 30], dtype=torch.int32, device="cuda")
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cu_seqlens_k\[2\]=30 is less than cu_seqlens_k\[1\]=40"):
        hopattn.attention_fp8_varlen(q, q, q, good, decreasing, 64, 64, check_index_values=True)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cu_seqlens_k\[2\]"):
        hopattn.forward_fp8_varlen(q8, q8, q8, good, decreasing, 64, 64, check_index_values=True)
    over_max = r"cu_seqlens_q\[1\]-cu_seqlens_q\[0\]=30 .* exceeds max_seqlen_q=20"
    with pytest.raises(hopattn.InvalidArgumentError, match=over_max):
        hopattn.attention_fp8_varlen(q, q, q, good, good, 20, 64, check_index_values=True)
    too_long = torch.tensor([31, 34], dtype=torch.int32, device="cuda")
    with pytest.raises(hopattn.InvalidArgumentError, match=r"seqused_k\[0\]=31 is outside \[0, 30\]"):
        hopattn.forward_fp8_varlen(q8, q8, q8, good, good, 64, 64, seqused_k=too_long, check_index_values=True)
    # Good values pass.
    out = hopattn.attention_fp8_varlen(q, q, q, good, good, 64, 64, check_index_values=True)
    assert torch.isfinite(out).all()


def test_fp8_varlen_bad_inputs_name_the_argument(gpu):
    skip_unless_built(gpu, torch.bfloat16, 128)
    q, k, v, cu_q, cu_k = packed_inputs([100, 200], [100, 200], 2, 2, 128, torch.bfloat16, seed=71)
    with pytest.raises(hopattn.InvalidArgumentError, match="q: dtype must be bf16 or fp16 for attention_fp8_varlen"):
        hopattn.attention_fp8_varlen(q.float(), k.float(), v.float(), cu_q, cu_k, 200, 200)
    with pytest.raises(hopattn.InvalidArgumentError, match="k: dtype"):
        hopattn.attention_fp8_varlen(q, k.half(), v, cu_q, cu_k, 200, 200)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cu_seqlens_k\.sizes\[0\]=2 but expected 3"):
        hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k[:2], 200, 200)
    with pytest.raises(hopattn.InvalidArgumentError, match="max_seqlen_q=-1"):
        hopattn.attention_fp8_varlen(q, k, v, cu_q, cu_k, -1, 200)
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    with pytest.raises(hopattn.InvalidArgumentError, match="q: dtype must be e4m3 for forward_fp8_varlen"):
        hopattn.forward_fp8_varlen(q, k, v, cu_q, cu_k, 200, 200)
    blocks = r"k_descale\.sizes\[2\]=3 but expected 1 \(one per head\) or 2"  # ceil(200 / 128)
    with pytest.raises(hopattn.InvalidArgumentError, match=blocks):
        hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 200, 200, k_descale=torch.ones((2, 2, 3), device="cuda"))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q_descale\.sizes\[0\]=3"):
        hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 200, 200, q_descale=torch.ones((3, 2, 1), device="cuda"))
    with pytest.raises(hopattn.InvalidArgumentError, match="v_descale: expected 2 dims"):
        hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 200, 200, v_descale=torch.ones((2, 2, 1), device="cuda"))
    with pytest.raises(hopattn.InvalidArgumentError, match="v_descale: dtype must be fp32"):
        hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 200, 200,
                                   v_descale=torch.ones((2, 2), device="cuda", dtype=torch.float16))
    with pytest.raises(hopattn.InvalidArgumentError, match="out: dtype e4m3"):
        hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 200, 200, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(hopattn.HopattnError, match="out: dtype"):
        hopattn.forward_fp8_varlen(q8, k8, v8, cu_q, cu_k, 200, 200, out_dtype=torch.float32)
