# The two routes of hopattn.attention on torch tensors (python/hopattn/ops.py): plain eager calls go
# straight to the kernels (ops._direct_forward / _direct_backward, through ctypes, and a lean
# autograd.Function when a gradient is needed); torch.compile, fake tensors and other subclasses,
# dispatch and function modes, functorch transforms and jit.trace get the custom op
# torch.ops.hopattn.fwd, whose CUDA kernels call the same functions.
#  - torch, no library: which route each situation takes (routes counted by patching, the kernels
#    replaced by stubs); the direct route's packed argument structs byte for byte against the
#    ctypes constructors; errors raised before any kernel are the same on both routes.
#  - torch and the library, no GPU: the direct route's autograd plumbing with its kernel functions
#    mapped onto the ops' CPU kernels (the CPU reference), bitwise against the op's autograd;
#    torch.compile(fullgraph=True) takes the op route, forward and backward, without recompiling
#    around eager calls.
#  - torch, the library and an sm_90 GPU: both routes give the same bits (forward, lse, gradients);
#    plain eager takes the direct route; identical error messages; torch.device contexts; another
#    current device.
import contextlib
import types
import warnings

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (needs 2.4+)", allow_module_level=True)

import hopattn  # noqa: E402
from hopattn import _lib, flash_attn_interface, ops, torch_ops  # noqa: E402
from hopattn_test_support import (  # noqa: E402
    check_op_route_gradients,
    compile_fullgraph_backward,
    cpu_qkv as support_cpu_qkv,
    gpu_kernel_pair,
    gpu_qkv,
    op_route,
    require_library_or_skip_module,
)

HAS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_gpu = pytest.mark.skipif(not HAS_SM90, reason="needs an sm_90 GPU")


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


def cpu_qkv(*args, **kwargs):
    """hopattn_test_support.cpu_qkv with head_dim 32 by default."""
    if len(args) < 6:
        kwargs.setdefault("head_dim", 32)
    return support_cpu_qkv(*args, **kwargs)


class Routes:
    """Counts of each route taken by hopattn.attention, through patched module functions."""

    def __init__(self):
        self.direct = 0  # ops._direct_forward calls (the direct route, or the op's own CUDA kernel)
        self.op = 0  # ops._torch_ops_module calls: attention taking the op route
        self.backward = 0  # ops._direct_backward calls
        self.calls = []
        self.windows = []  # the window each kernel function (or the op) was handed, in call order
        self.softcaps = []  # ...and the softcap


@pytest.fixture
def stub_routes(monkeypatch):
    """Both routes with stub kernels, no library needed: the direct route returns q + 0 (and a
    stand-in lse); the op route records and returns the same. CPU tensors pass the op route's
    input check (which would refuse them as not CUDA)."""
    routes = Routes()

    def outputs(q):
        out = q + 0
        return out, out.sum(-1).transpose(1, 2)

    def direct_forward(st, c_name, what, q, k, v, causal, softmax_scale, with_lse, window=ops.NO_WINDOW,
                       softcap=0.0):
        routes.direct += 1
        routes.calls.append((c_name, what, causal, softmax_scale, with_lse))
        routes.windows.append(window)
        routes.softcaps.append(softcap)
        out, lse = outputs(q)
        return (out, lse) if with_lse else out

    def op_fwd(q, k, v, causal, softmax_scale, deterministic, window_left=-1, window_right=-1, softcap=0.0):
        if not torch.compiler.is_compiling():  # as torch_ops_module's count
            routes.windows.append((window_left, window_right))
            routes.softcaps.append(softcap)
        return outputs(q)

    op_module = types.SimpleNamespace(fwd=op_fwd)

    def torch_ops_module():
        if not torch.compiler.is_compiling():  # a traced count would be guarded on (recompiles)
            routes.op += 1
        return op_module

    monkeypatch.setattr(ops, "_direct_forward", direct_forward)
    monkeypatch.setattr(ops, "_torch_ops_module", torch_ops_module)
    monkeypatch.setattr(ops, "_check_torch_inputs", lambda torch, q, k, v: None)
    return routes


@pytest.fixture
def cpu_reference_routes(monkeypatch, lib):
    """Both routes computing with the ops' CPU kernels (the CPU reference): the direct route's
    kernel functions call them without autograd, so the direct route's own plumbing
    (autograd.Function, saved tensors, lse) runs on CPU tensors; the op route runs the op as is."""
    routes = Routes()
    real_module = ops._torch_ops_module

    def direct_forward(st, c_name, what, q, k, v, causal, softmax_scale, with_lse, window=ops.NO_WINDOW,
                       softcap=0.0):
        routes.direct += 1
        routes.calls.append((c_name, what, causal, softmax_scale, with_lse))
        routes.windows.append(window)
        routes.softcaps.append(softcap)
        out, lse = torch_ops.fwd(q, k, v, causal, softmax_scale, False, *window, softcap)
        return (out, lse) if with_lse else out

    def direct_backward(st, q, k, v, out, dout, lse, causal, softmax_scale, deterministic, window=ops.NO_WINDOW,
                        softcap=0.0):
        routes.backward += 1
        routes.calls.append(("backward", causal, softmax_scale, deterministic))
        routes.windows.append(window)
        routes.softcaps.append(softcap)
        return torch_ops.bwd(dout, q, k, v, out, lse, causal, softmax_scale, deterministic, *window, softcap)

    def torch_ops_module():
        if not torch.compiler.is_compiling():  # a traced count would be guarded on (recompiles)
            routes.op += 1
        return real_module()

    monkeypatch.setattr(ops, "_direct_forward", direct_forward)
    monkeypatch.setattr(ops, "_direct_backward", direct_backward)
    monkeypatch.setattr(ops, "_torch_ops_module", torch_ops_module)
    monkeypatch.setattr(ops, "_check_torch_inputs", lambda torch, q, k, v: None)
    return routes


# --- which route (torch, no library) -------------------------------------------------------------------


def test_plain_eager_takes_the_direct_route(stub_routes):
    q, k, v = cpu_qkv()
    out = hopattn.attention(q, k, v, causal=True)
    assert torch.equal(out, q)
    out, lse = hopattn.attention(q, k, v, softmax_scale=0.5, return_lse=True, window_size=[3, 2])
    flash_attn_interface.flash_attn_func(q, k, v, causal=True, window_size=(4, 4))
    assert (stub_routes.direct, stub_routes.op) == (3, 0)
    assert stub_routes.calls == [
        ("hopattn_forward", "hopattn forward", True, None, False),
        ("hopattn_forward", "hopattn forward", False, 0.5, True),
        ("hopattn_forward", "hopattn forward", True, None, False),
    ]
    # The window as a tuple of ints; FA3's causal makes its right bound 0.
    assert stub_routes.windows == [(-1, -1), (3, 2), (4, 0)]


def test_grad_takes_the_direct_autograd_function(stub_routes):
    q, k, v = cpu_qkv(requires_grad=True)
    out = hopattn.attention(q, k, v, causal=True, softmax_scale=2)
    assert type(out.grad_fn).__name__ == "HopattnAttentionFunctionBackward"
    # The autograd.Function always asks for lse (saved for the backward); the scale arrives as a float.
    assert stub_routes.calls == [("hopattn_forward", "hopattn forward", True, 2.0, True)]
    assert type(stub_routes.calls[0][3]) is float
    assert stub_routes.op == 0
    with torch.no_grad():
        hopattn.attention(q, k, v)
    assert stub_routes.calls[-1][-1] is False  # no grad: lse skipped again
    assert stub_routes.op == 0


def test_default_device_contexts_keep_the_direct_route(stub_routes, monkeypatch):
    q, k, v = cpu_qkv()
    with torch.device("cpu"):
        hopattn.attention(q, k, v)
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        hopattn.attention(q, k, v)
    finally:
        torch.set_default_device(previous)
    assert (stub_routes.direct, stub_routes.op) == (2, 0)
    # ...and the direct route runs with the mode disabled (every tensor method would detour).
    seen = []
    real = ops._direct_forward

    def spy(*args):
        seen.append(torch._C._is_torch_function_mode_enabled())
        return real(*args)

    monkeypatch.setattr(ops, "_direct_forward", spy)
    with torch.device("cpu"):
        hopattn.attention(q, k, v)
    assert seen == [False]


class PassThroughDispatchMode(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Subclass(torch.Tensor):
    pass


def run_under(situation, q, k, v):
    """Call hopattn.attention in one of the situations where torch must see an operator."""
    if situation == "function mode":
        with op_route():
            return hopattn.attention(q, k, v)
    if situation == "dispatch mode":
        with PassThroughDispatchMode():
            return hopattn.attention(q, k, v)
    if situation == "fake tensors":
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode() as mode:
            fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
            return hopattn.attention(fq, fk, fv)
    if situation == "make_fx":
        from torch.fx.experimental.proxy_tensor import make_fx

        return make_fx(lambda a, b, c: hopattn.attention(a, b, c))(q, k, v)
    if situation == "vmap":
        return torch.vmap(lambda a, b, c: hopattn.attention(a, b, c))(q[None], k[None], v[None])
    if situation == "grad transform":
        return torch.func.grad(lambda a: hopattn.attention(a, k, v).sum())(q)
    if situation == "jit.trace":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings about the traced Python
            return torch.jit.trace(lambda a, b, c: hopattn.attention(a, b, c), (q, k, v), check_trace=False)
    if situation == "subclass":
        return hopattn.attention(q.as_subclass(Subclass), k, v)
    if situation == "parameter":
        return hopattn.attention(q, torch.nn.Parameter(k), v)
    raise AssertionError(situation)


SITUATIONS = ["function mode", "dispatch mode", "fake tensors", "make_fx", "vmap", "grad transform", "jit.trace",
              "subclass", "parameter"]


@pytest.mark.parametrize("situation", SITUATIONS)
def test_torch_tracing_or_transforming_takes_the_op_route(stub_routes, situation):
    q, k, v = cpu_qkv()
    run_under(situation, q, k, v)
    assert stub_routes.op >= 1, "the op route was not taken"
    assert stub_routes.direct == 0, "the direct route ran"


def test_the_op_route_takes_the_window_as_two_ints(stub_routes):
    q, k, v = cpu_qkv()
    with op_route():
        hopattn.attention(q, k, v)
        hopattn.attention(q, k, v, window_size=(5, 0))
    assert stub_routes.op == 2 and stub_routes.direct == 0
    assert stub_routes.windows == [(-1, -1), (5, 0)]


def test_softcap_reaches_both_routes_as_a_float(stub_routes):
    q, k, v = cpu_qkv()
    hopattn.attention(q, k, v)
    hopattn.attention(q, k, v, softcap=30)
    hopattn.attention(*cpu_qkv(requires_grad=True), softcap=2.5)  # the direct autograd.Function
    flash_attn_interface.flash_attn_func(q, k, v, softcap=7.0)
    with op_route():
        hopattn.attention(q, k, v, softcap=12.5)
    assert (stub_routes.direct, stub_routes.op) == (4, 1)
    assert stub_routes.softcaps == [0.0, 30.0, 2.5, 7.0, 12.5]
    assert all(type(c) is float for c in stub_routes.softcaps)


def test_compiling_takes_the_op_route(stub_routes):
    from torch._dynamo.testing import CompileCounter

    q, k, v = cpu_qkv()
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(lambda a, b, c: hopattn.attention(a, b, c, causal=True) * 2, backend=counter,
                             fullgraph=True)
    compiled(q, k, v)
    assert counter.frame_count == 1
    assert stub_routes.direct == 0  # traced: dynamo read is_compiling() as True
    hopattn.attention(q, k, v)  # eager in between builds the direct route's state...
    assert stub_routes.direct == 1
    compiled(q, k, v)
    assert counter.frame_count == 1  # ...which the compiled frame does not guard on
    torch._dynamo.reset()


# --- packed argument structs (torch; the last test with the library) ---------------------------------------


def test_fast_struct_packing_is_in_use():
    st = ops._Direct(torch)
    assert st.pack_fwd is not None and st.pack_bwd is not None


def _views():
    """(name, q, k, v): layouts the direct route meets."""
    gen = torch.Generator().manual_seed(5)
    base = [("contiguous", *cpu_qkv(2, 9, 13, 4, 2, 64, torch.bfloat16))]
    qkv = torch.randn((2, 11, 3, 4, 32), generator=gen).half()
    base.append(("packed qkv", *qkv.unbind(dim=2)))
    heads_major = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in cpu_qkv(1, 6, 300, 8, 1, 128)]
    base.append(("heads-major", *heads_major))
    base.append(("sq=1", *cpu_qkv(3, 1, 17, 2, 2, 16)))
    base.append(("head_dim=1", *cpu_qkv(1, 4, 4, 2, 2, 1)))  # make_tensor's size-1 substitution
    base.append(("no keys", *cpu_qkv(2, 5, 0, 2, 2, 64)))  # make_tensor's empty substitution
    base.append(("empty batch", *cpu_qkv(0, 5, 5, 2, 2, 64)))
    return base


VIEWS = _views()


# No window, a plain one, one needing all 64 bits, and the spelled-out default (no window either).
WINDOWS = [ops.NO_WINDOW, (3, 0), (1 << 40, -1), (-1, -1)]


@pytest.mark.parametrize("window", WINDOWS, ids=["no-window", "3-0", "2^40", "minus-ones"])
@pytest.mark.parametrize("scale", [None, 0.3, 1e300, float("inf")], ids=["default", "0.3", "1e300", "inf"])
@pytest.mark.parametrize("with_lse", [False, True], ids=["no-lse", "lse"])
@pytest.mark.parametrize("view", VIEWS, ids=[v[0] for v in VIEWS])
def test_forward_args_match_the_ctypes_constructors(view, with_lse, scale, window):
    _, q, k, v = view
    st = ops._direct(torch)
    out, lse = ops._torch_forward_outputs(torch, q, with_lse)
    codes = [ops._torch_dtype_code(torch, n, t) for n, t in (("q", q), ("k", k), ("v", v))]
    got = ops._fwd_args(st, q, k, v, out, lse, q.shape, k.shape, v.shape, *codes, True, scale, window)
    want = _lib.make_fwd_args(
        *(ops._torch_tensor(torch, n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out))),
        ops._torch_tensor(torch, "lse", lse) if with_lse else None,
        True,
        scale,
        window,
    )
    assert bytes(got) == bytes(want)
    assert (got.has_window, got.window_left, got.window_right) == _lib._window_fields(window)


@pytest.mark.parametrize("dout_kind", ["dense", "expanded", "transposed"])
@pytest.mark.parametrize("view", VIEWS, ids=[v[0] for v in VIEWS])
def test_backward_args_match_the_ctypes_constructors(view, dout_kind):
    _, q, k, v = view
    st = ops._direct(torch)
    out, lse = ops._torch_forward_outputs(torch, q, True)
    dout = {
        "dense": torch.ones_like(out),
        "expanded": torch.ones(()).expand(out.shape),
        "transposed": torch.ones_like(out).transpose(-1, -2).contiguous().transpose(-1, -2),
    }[dout_kind]
    dout = ops._torch_dout(torch, dout, q)
    dq, dk, dv = ops._torch_grad_outputs(torch, q, k, v)
    codes = tuple(ops._torch_dtype_code(torch, n, t) for n, t in (("q", q), ("k", k), ("v", v)))
    for scale, causal, deterministic, window in ((None, True, False, ops.NO_WINDOW),
                                                 (0.125, False, True, (7, 1 << 40))):
        got = ops._bwd_args(st, q, k, v, out, dout, lse, dq, dk, dv, codes, causal, scale, deterministic, window)
        tensors = [ops._torch_tensor(torch, n, t) for n, t in
                   (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse), ("dq", dq),
                    ("dk", dk), ("dv", dv))]
        assert bytes(got) == bytes(_lib.make_bwd_args(*tensors, causal, scale, deterministic, window))


@pytest.mark.parametrize("causal, scale, window", [(True, None, ops.NO_WINDOW), (False, 0.3, (4, 1)),
                                                   (True, None, (2, 0))])
def test_packed_structs_drive_the_library(lib, causal, scale, window):
    # The library reads the packed structs (passed as the struct itself, ctypes taking its address,
    # as the direct route does) exactly as the op's CPU kernels' ctypes-built ones: same bits.
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in cpu_qkv(2, 9, 13, 4, 2, 64, seed=7))
    st = ops._direct(torch)
    c = _lib.load()
    out, lse = ops._torch_forward_outputs(torch, q, True)
    codes = tuple(ops._torch_dtype_code(torch, n, t) for n, t in (("q", q), ("k", k), ("v", v)))
    _lib.check(c.hopattn_forward_cpu(ops._fwd_args(st, q, k, v, out, lse, q.shape, k.shape, v.shape, *codes,
                                                   causal, scale, window)), "forward")
    want_out, want_lse = torch_ops.fwd(q, k, v, causal, scale, False, *window)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    dout = ops._torch_dout(torch, torch.randn(out.shape, generator=torch.Generator().manual_seed(8)), q)
    dq, dk, dv = ops._torch_grad_outputs(torch, q, k, v)
    args = ops._bwd_args(st, q, k, v, out, dout, lse, dq, dk, dv, codes, causal, scale, False, window)
    _lib.check(c.hopattn_backward_cpu(args), "backward")
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv),
                               torch_ops.bwd(dout, q, k, v, out, lse, causal, scale, False, *window)):
        assert torch.equal(got, want), name


# --- errors before any kernel (torch, no library) -----------------------------------------------------


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever is raised
        return type(e), str(e)
    raise AssertionError("no error raised")


CPU_ERRORS = {
    "cpu tensors": lambda q, k, v: (q, k, v),
    "numpy k": lambda q, k, v: (q, k.detach().numpy(), v),
    "meta v": lambda q, k, v: (q, k, torch.empty(v.shape, device="meta")),
}


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("case", list(CPU_ERRORS))
def test_errors_before_the_kernel_are_the_same_on_both_routes(case, grad):
    q, k, v = CPU_ERRORS[case](*cpu_qkv(requires_grad=grad))
    direct = _error(lambda: hopattn.attention(q, k, v, causal=True))
    with op_route():
        via_op = _error(lambda: hopattn.attention(q, k, v, causal=True))
    assert direct == via_op
    assert "expected a" in direct[1]


# --- the direct route's plumbing on the CPU reference (torch and the library) ---------------------------


@pytest.mark.parametrize("return_lse", [False, True], ids=["out", "out+lse"])
@pytest.mark.parametrize("causal, scale, deterministic, window, softcap", [
    (True, None, False, ops.NO_WINDOW, 0.0), (False, 0.3, True, ops.NO_WINDOW, 0.0), (False, None, False, (3, 2), 0.0),
    (True, 0.3, True, (5, 0), 0.0), (False, None, False, ops.NO_WINDOW, 2.0), (True, 0.3, True, (5, 0), 0.5),
])
def test_direct_autograd_equals_the_op_autograd(cpu_reference_routes, return_lse, causal, scale, deterministic,
                                                window, softcap):
    routes = cpu_reference_routes
    results = {}
    for route in ("direct", "op"):
        q, k, v = cpu_qkv(2, 9, 13, 4, 2, 64, requires_grad=True, seed=1)
        dout = torch.randn((2, 9, 4, 64), generator=torch.Generator().manual_seed(2))
        with op_route() if route == "op" else contextlib.nullcontext():
            got = hopattn.attention(q, k, v, causal=causal, softmax_scale=scale, return_lse=return_lse,
                                    deterministic=deterministic, window_size=window, softcap=softcap)
        out, lse = got if return_lse else (got, None)
        assert out.requires_grad and (lse is None or not lse.requires_grad)
        if route == "direct":  # saves what hopattn::fwd's autograd saves: q, k, v, out and lse
            saved = out.grad_fn.saved_tensors
            assert [t.data_ptr() for t in saved[:4]] == [t.data_ptr() for t in (q, k, v, out)]
            assert saved[4].shape == (2, 4, 9) and saved[4].dtype == torch.float32
        loss = (out * dout).sum() + (0 if lse is None else lse.sum() * 0)
        loss.backward()
        results[route] = (out.detach(), lse, q.grad, k.grad, v.grad)
        if route == "direct":
            assert (routes.direct, routes.backward, routes.op) == (1, 1, 0)
            assert routes.calls[-1] == ("backward", causal, scale, deterministic)
            assert routes.windows == [window, window]  # the backward gets the forward's window
            assert routes.softcaps == [softcap, softcap]  # ...and its softcap
        else:
            assert routes.op == 1
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), results["direct"], results["op"]):
        if a is None:
            assert b is None, name
        else:
            assert torch.equal(a, b), name


def test_direct_route_double_backward_raises(cpu_reference_routes):
    q, k, v = cpu_qkv(requires_grad=True)
    out = hopattn.attention(q, k, v)
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):  # never a silently wrong second derivative
        torch.autograd.grad(dq.sum(), q)


def test_compile_fullgraph_takes_the_op_route_forward_and_backward(cpu_reference_routes):
    routes = cpu_reference_routes

    def block(q, k, v, w):
        return (hopattn.attention(q * w, k, v, causal=True) * w).sum(dim=-1)

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(block)(*cpu_qkv(2, 6, 6, 4, 2, 32), torch.rand(32))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    torch._dynamo.reset()
    q, k, v = cpu_qkv(2, 6, 6, 4, 2, 32, requires_grad=True, seed=4)
    w = torch.rand(32, requires_grad=True)
    leaves = (q, k, v, w)
    compiled, counter, compiled_grads = compile_fullgraph_backward(block, leaves)  # one frame
    assert any(node.target is torch.ops.hopattn.fwd.default for node in counter.graphs[0].graph.nodes)
    assert routes.direct == 0 and routes.backward == 0
    check_op_route_gradients(block, leaves, compiled_grads)  # the same op, eager: the same gradients
    # Eager calls in between (direct route) cause no recompilation.
    for t in leaves:
        t.grad = None
    block(*leaves).sum().backward()
    assert routes.direct == 1 and routes.backward == 1
    compiled(*leaves).sum().backward()
    assert counter.frame_count == 1
    torch._dynamo.reset()


# --- GPU: both routes, the same bits ------------------------------------------------------------------

@pytest.fixture
def count_routes(monkeypatch):
    """Counts hopattn.attention's routes on the GPU, the real functions still running."""
    routes = Routes()
    real_forward, real_module = ops._direct_forward, ops._torch_ops_module

    def direct_forward(*args):
        routes.direct += 1
        return real_forward(*args)

    def torch_ops_module():
        routes.op += 1
        return real_module()

    monkeypatch.setattr(ops, "_direct_forward", direct_forward)
    monkeypatch.setattr(ops, "_torch_ops_module", torch_ops_module)
    return routes


GPU_SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, causal, softmax_scale, window_size, softcap)
    (2, 128, 128, 4, 4, False, None, (-1, -1), 0.0),
    (2, 77, 300, 8, 2, True, None, (-1, -1), 0.0),  # GQA, sq < sk
    (1, 300, 77, 6, 1, True, 0.2, (-1, -1), 0.0),  # MQA, sq > sk (rows with no key)
    (2, 200, 333, 4, 2, False, None, (70, 30), 0.0),  # sliding window
    (1, 300, 120, 4, 1, True, None, (50, 0), 0.0),  # causal window, rows with no key
    (2, 77, 300, 8, 2, True, None, (-1, -1), 5.0),  # softcap, GQA, causal
    (1, 200, 333, 4, 2, False, 0.2, (70, 30), 1.5),  # softcap with a window
]


@needs_gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=["mha", "gqa-causal", "mqa-causal-scale", "window",
                                                   "causal-window", "softcap-gqa-causal", "softcap-window"])
def test_gpu_routes_give_the_same_bits(count_routes, shape):
    dtype, head_dim = gpu_kernel_pair()
    batch, sq, sk, hq, hkv, causal, scale, window, softcap = shape
    q, k, v, dout = gpu_qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed=sq)
    results = {}
    for route in ("direct", "op"):
        context = op_route() if route == "op" else contextlib.nullcontext()
        with context:
            plain = hopattn.attention(q, k, v, causal=causal, softmax_scale=scale, window_size=window,
                                      softcap=softcap)
            out_lse = hopattn.attention(q, k, v, causal=causal, softmax_scale=scale, return_lse=True,
                                        window_size=window, softcap=softcap)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with context:
            out, lse = hopattn.attention(*leaves, causal=causal, softmax_scale=scale, return_lse=True,
                                         deterministic=True, window_size=window, softcap=softcap)
            out.backward(dout)
        results[route] = (plain, *out_lse, out.detach(), lse, *(t.grad for t in leaves))
        if route == "direct":
            assert count_routes.op == 0, "plain eager took the op route"
            assert count_routes.direct == 3
    torch.cuda.synchronize()
    assert count_routes.op == 3
    names = ("out", "out (return_lse)", "lse", "out (grad)", "lse (grad)", "dq", "dk", "dv")
    for name, a, b in zip(names, results["direct"], results["op"]):
        assert torch.equal(a, b), name
    assert torch.equal(results["direct"][0], results["direct"][1])  # lse or not, the same out


def _gpu_error_cases():
    def shifted(t):
        s = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)
        return s.copy_(t)

    return {
        "k on cpu": lambda q, k, v: (q, k.cpu(), v),
        "numpy v": lambda q, k, v: (q, k, v.float().cpu().numpy()),
        "3-dim q": lambda q, k, v: (q[0], k, v),
        "sparse k": lambda q, k, v: (q, k.float().to_sparse(), v),  # the layout is checked before the dtype
        "fp64": lambda q, k, v: (q.double(), k.double(), v.double()),
        "fp32": lambda q, k, v: (q.float(), k.float(), v.float()),
        "k fp16": lambda q, k, v: (q, k.half() if q.dtype != torch.half else k.bfloat16(), v),
        "head_dim mismatch": lambda q, k, v: (q, k[..., :32], v[..., :32]),
        "last dim strided": lambda q, k, v: (q[..., ::2], k[..., ::2], v[..., ::2]),
        "misaligned q": lambda q, k, v: (shifted(q), k, v),
        "gqa ratio": lambda q, k, v: (q, k[:, :, :3], v[:, :, :3]),
        "bad scale": lambda q, k, v: (q, k, v),
    }


GPU_ERRORS = _gpu_error_cases()


@needs_gpu
@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("case", list(GPU_ERRORS))
def test_gpu_error_messages_are_the_same_on_both_routes(case, grad):
    dtype, head_dim = gpu_kernel_pair()
    q, k, v, _ = gpu_qkv(1, 16, 16, 4, 4, head_dim, dtype)
    q, k, v = GPU_ERRORS[case](q, k, v)
    if grad:
        for t in (q, k, v):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_sparse:
                t.requires_grad_()
    scale = -1.0 if case == "bad scale" else None
    direct = _error(lambda: hopattn.attention(q, k, v, causal=True, softmax_scale=scale))
    with op_route():
        via_op = _error(lambda: hopattn.attention(q, k, v, causal=True, softmax_scale=scale))
    assert direct == via_op


@needs_gpu
def test_gpu_default_device_context_keeps_the_direct_route(count_routes):
    dtype, head_dim = gpu_kernel_pair()
    q, k, v, _ = gpu_qkv(2, 64, 64, 4, 2, head_dim, dtype, seed=9)
    want = hopattn.attention(q, k, v, causal=True)
    with torch.device("cuda"):
        got = hopattn.attention(q, k, v, causal=True)
    assert count_routes.op == 0 and count_routes.direct == 2
    assert torch.equal(got, want)


@needs_gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_gpu_direct_route_on_another_device_restores_the_current_device(count_routes):
    dtype, head_dim = gpu_kernel_pair()
    q0, k0, v0, dout0 = gpu_qkv(2, 100, 100, 4, 2, head_dim, dtype, seed=10)
    q1, k1, v1, dout1 = (t.to("cuda:1") for t in (q0, k0, v0, dout0))
    assert torch.cuda.current_device() == 0
    out1 = hopattn.attention(q1, k1, v1, causal=True)
    assert torch.cuda.current_device() == 0 and out1.device == q1.device
    assert torch.equal(out1.cpu(), hopattn.attention(q0, k0, v0, causal=True).cpu())
    leaves = [t.requires_grad_() for t in (q1, k1, v1)]
    hopattn.attention(*leaves, causal=True, deterministic=True).backward(dout1)
    assert torch.cuda.current_device() == 0 and leaves[0].grad.device == q1.device
    assert count_routes.op == 0
