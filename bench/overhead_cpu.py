# The Python side of hopattn.attention's per-call host overhead, measured without a GPU: what
# hopattn.attention costs up to (and including) the ctypes call into the library, at a tiny shape.
#
# How: CPU tensors are made to look like CUDA tensors on device 0 (Tensor.is_cuda, get_device()
# and .device are patched), torch's CUDA device and stream queries are replaced by C builtins of
# the same cost class (abs, int), and the library's entry points by a C function that returns 0
# at once (a 3-line shim compiled here with the system C compiler; pass --shim to reuse one).
# Allocations are real CPU allocations (torch's CPU allocator, not the CUDA caching allocator), so
# absolute numbers differ from the GPU machine's; differences between paths are what this is for.
# bench/overhead.py is the real measurement, on the H200.
#
#   PYTHONPATH=python HOPATTN_LIBRARY=build/libhopattn.so python3 bench/overhead_cpu.py
#
# Rows: the direct eager route (no grad; grad-requiring inputs, forward only; forward+backward), the
# custom-op route hopattn.attention takes under torch.compile/fake tensors (torch.ops.hopattn.fwd,
# run here through the op's CUDA implementation registered as its CPU kernel), and torch SDPA on
# CPU: at the same shape it does real CPU work, so it is no host-only baseline; at seqlen 1 it does
# next to none, which makes that row about SDPA's own per-call host cost on this machine.
# The default shape is b=1 s=32 h=8 d=64: at s=128 each 128 KiB output is a fresh mmap for the CPU
# allocator, which the CUDA caching allocator never does.
import argparse
import ctypes
import os
import subprocess
import tempfile
import time

import torch

import hopattn
from hopattn import _lib, ops, torch_ops

SHIM_SOURCE = r"""
#include <stddef.h>
int hx_status0(void *a, void *b, void *c, void *d) { (void)a; (void)b; (void)c; (void)d; return 0; }
size_t hx_workspace(void *a) { (void)a; return 0; }  /* no workspace: CPU allocations are 64-byte aligned */
"""


def build_shim(directory):
    src = os.path.join(directory, "hx_shim.c")
    so = os.path.join(directory, "libhx_shim.so")
    with open(src, "w") as f:
        f.write(SHIM_SOURCE)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    return so


def fake_cuda(shim_path):
    """Patch torch and the loaded library so CPU tensors take hopattn's CUDA code paths."""
    lib = _lib.load()
    shim = ctypes.CDLL(shim_path)
    for name in ("hopattn_forward", "hopattn_forward_reference_cuda", "hopattn_backward"):
        fn = shim["hx_status0"]  # a fresh function object per name, with that name's signature
        fn.argtypes, fn.restype = getattr(lib, name).argtypes, ctypes.c_int
        setattr(lib, name, fn)
    ws = shim["hx_workspace"]
    ws.argtypes, ws.restype = lib.hopattn_backward_workspace_size.argtypes, ctypes.c_size_t
    lib.hopattn_backward_workspace_size = ws

    cuda0 = torch.device("cuda", 0)
    torch.Tensor.is_cuda = property(lambda self: True)
    torch.Tensor.get_device = lambda self: 0
    torch.Tensor.device = property(lambda self: cuda0)
    # torch.empty(..., device=cuda) would need CUDA: allocate on the CPU instead.
    real_empty = torch.empty

    def empty(*args, device=None, **kwargs):
        return real_empty(*args, **kwargs)

    torch.empty = empty
    torch.cuda._initialized = True  # torch.cuda._lazy_init() returns at once
    torch._C._cuda_getDevice = int  # () -> 0
    torch._C._cuda_exchangeDevice = abs  # (0) -> 0
    torch._C._cuda_maybeExchangeDevice = abs
    torch.cuda._exchange_device = abs
    torch.cuda._maybe_exchange_device = abs
    torch._C._cuda_getCurrentRawStream = abs  # (0) -> stream 0
    torch._C._cuda_getCurrentStream = lambda index: (0, 0, 1)  # (stream id, device index, CUDA)
    real_current_stream = torch.cuda.current_stream

    class _Stream:  # torch.cuda.Stream's constructor would reach the driver
        __slots__ = ("cuda_stream",)

        def __init__(self, stream_id, device_index, device_type):
            self.cuda_stream = 0

    def current_stream(device=None):  # torch.cuda.current_stream's steps, with the stand-in Stream
        torch.cuda._lazy_init()
        data = torch._C._cuda_getCurrentStream(torch.cuda._get_device_index(device, optional=True))
        return _Stream(stream_id=data[0], device_index=data[1], device_type=data[2])

    assert real_current_stream.__code__.co_names.count("Stream") == 1  # still the same steps
    torch.cuda.current_stream = current_stream
    ops._direct_state = None  # rebuilt with the patched functions on the next call

    # The op's CPU kernel becomes its CUDA implementation, so the op path runs the same Python.
    torch_ops._fwd.register_kernel("cpu")(torch_ops._fwd._init_fn)
    torch_ops._bwd.register_kernel("cpu")(torch_ops._bwd._init_fn)


def per_call_us(fn, calls, rounds=7):
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def rows(b, s, h, d):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((b, s, h, d), generator=gen).to(torch.bfloat16) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    dout = torch.randn((b, s, h, d), generator=gen).to(torch.bfloat16)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    qgt, kgt, vgt = (x.transpose(1, 2) for x in (qg, kg, vg))
    doutt = dout.transpose(1, 2)
    fwd_op = torch.ops.hopattn.fwd.default

    def no_grads():  # so autograd hands the gradients over instead of adding them up on the CPU
        qg.grad = kg.grad = vg.grad = None

    def op_fwd_bwd():
        no_grads()
        out, _ = fwd_op(qg, kg, vg, True, None, False)
        out.backward(dout)

    def direct_fwd_bwd():
        no_grads()
        hopattn.attention(qg, kg, vg, causal=True).backward(dout)

    def sdpa_fwd_bwd():
        no_grads()
        torch.nn.functional.scaled_dot_product_attention(qgt, kgt, vgt, is_causal=True).backward(doutt)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    q1, k1, v1 = (x[:, :, :1] for x in (qt, kt, vt))  # seqlen 1: next to no compute
    return [
        ("hopattn.attention, no grad", lambda: hopattn.attention(q, k, v, causal=True)),
        ("hopattn.attention, return_lse", lambda: hopattn.attention(q, k, v, causal=True, return_lse=True)),
        ("hopattn.attention, inputs require grad (forward only)", lambda: hopattn.attention(qg, kg, vg, causal=True)),
        ("hopattn.attention, forward + backward", direct_fwd_bwd),
        ("torch.ops.hopattn.fwd (the op path), no grad", lambda: fwd_op(q, k, v, True, None, False)),
        ("torch.ops.hopattn.fwd, inputs require grad", lambda: fwd_op(qg, kg, vg, True, None, False)),
        ("torch.ops.hopattn.fwd, forward + backward", op_fwd_bwd),
        ("torch SDPA on CPU (real compute), no grad", lambda: sdpa(qt, kt, vt, is_causal=True)),
        ("torch SDPA on CPU at seqlen 1 (about its host overhead), no grad",
         lambda: sdpa(q1, k1, v1, is_causal=True)),
        ("torch SDPA on CPU (real compute), forward + backward", sdpa_fwd_bwd),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--shape", type=int, nargs=4, default=(1, 32, 8, 64), metavar=("B", "S", "H", "D"))
    p.add_argument("--shim", help="an already built shim library (default: build one in a temp dir)")
    p.add_argument("--only", help="run only rows whose name contains this")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        shim = a.shim or build_shim(tmp)
        # SDPA runs before the patches (it needs the real torch.empty and devices).
        b, s, h, d = a.shape
        table = [(name, fn) for name, fn in rows(b, s, h, d) if not a.only or a.only in name]
        results = {name: per_call_us(fn, a.calls) for name, fn in table if "SDPA" in name}
        fake_cuda(shim)
        results.update({name: per_call_us(fn, a.calls) for name, fn in table if "SDPA" not in name})
    print(f"Python-side host time per call (library calls stubbed), b={b} s={s} h={h} d={d} bf16 causal, "
          f"torch {torch.__version__}, best of 7 x {a.calls} calls")
    print("| call | µs per call |")
    print("|---|---:|")
    for name, _ in table:
        print(f"| {name} | {results[name]:.1f} |")


if __name__ == "__main__":
    main()
