# The torch.library custom ops hopattn::fwd / hopattn::bwd (python/hopattn/torch_ops.py) that
# hopattn.attention runs on torch tensors.
#  - torch, no library: registration (lazy, and by dynamo while tracing, in a fresh interpreter),
#    the schemas, the fake implementations under FakeTensorMode (shapes, dtypes, strides, errors
#    naming the argument) with fake CUDA tensors, dynamo tracing hopattn.attention as one graph.
#  - torch and the library, no GPU: the ops' CPU kernels (the CPU reference) against the numpy
#    binding, torch.library.opcheck, torch.compile(fullgraph=True) forward+backward with no graph
#    break, what autograd saves, library errors keeping their type through the dispatcher.
#  - torch, the library and an sm_90 GPU: torch.compile(fullgraph=True) of an attention block with
#    inductor, forward and backward, no graph break; CUDA graph capture and replay of forward and
#    backward equal to eager, and no host synchronisation, on both of hopattn.attention's routes
#    (direct and op; test_torch_routes.py has the rest of the routing); opcheck on CUDA.
import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (needs 2.4+)", allow_module_level=True)

import hopattn  # noqa: E402
from hopattn import torch_ops  # noqa: E402
from hopattn_test_support import cpu_qkv, gpu_kernel_pair, gpu_qkv, op_route, rel_l2, require_library_or_skip_module  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

PYTHON_DIR = Path(hopattn.__file__).resolve().parents[1]
HAS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_gpu = pytest.mark.skipif(not HAS_SM90, reason="needs an sm_90 GPU")


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


def run_fresh(code):
    """Run code in a new interpreter (nothing registered yet) with this checkout's hopattn."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def fake_qkv(mode, batch=2, seqlen_q=16, seqlen_k=16, heads_q=4, heads_kv=2, head_dim=64,
             dtype=torch.bfloat16, device="cuda"):
    with mode:
        q = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=dtype, device=device)
        k = torch.empty((batch, seqlen_k, heads_kv, head_dim), dtype=dtype, device=device)
        v = torch.empty((batch, seqlen_k, heads_kv, head_dim), dtype=dtype, device=device)
    return q, k, v


# --- registration and schema (torch, no library) ------------------------------------------------------


def test_importing_hopattn_registers_nothing_until_torch_ops_is_imported():
    out = run_fresh("""
        import sys, torch, hopattn
        assert "hopattn.torch_ops" not in sys.modules
        try:
            torch.ops.hopattn.fwd
        except (AttributeError, RuntimeError):
            print("absent")
        import hopattn.torch_ops
        print(torch.ops.hopattn.fwd.default.name(), torch.ops.hopattn.bwd.default.name())
    """)
    assert out.split() == ["absent", "hopattn::fwd", "hopattn::bwd"]


def test_schemas():
    # The window bounds, then softcap, come last with "off" defaults, so calls and graphs from before
    # them still bind.
    assert str(torch_ops.fwd._schema) == (
        "hopattn::fwd(Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None, "
        "bool deterministic=False, SymInt window_left=-1, SymInt window_right=-1, float softcap=0.) "
        "-> (Tensor, Tensor)"
    )
    assert str(torch_ops.bwd._schema) == (
        "hopattn::bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, "
        "float? softmax_scale, bool deterministic, SymInt window_left=-1, SymInt window_right=-1, "
        "float softcap=0.) -> (Tensor, Tensor, Tensor)"
    )


def test_dynamo_registers_the_ops_while_tracing_attention():
    # A fresh interpreter where nothing has touched hopattn.torch_ops: the first compiled call must
    # import it during tracing and still produce one graph with no break, and later calls must not
    # recompile (no guard on the import having happened). Fake CUDA tensors: no GPU needed.
    out = run_fresh("""
        import sys, torch, hopattn
        from torch._dynamo.testing import CompileCounter
        from torch._subclasses.fake_tensor import FakeTensorMode

        def block(q, k, v):
            return hopattn.attention(q, k, v, causal=True) * 2

        with FakeTensorMode():
            q = torch.empty(2, 16, 4, 64, dtype=torch.bfloat16, device="cuda")
            k = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, device="cuda")
            v = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, device="cuda")
            assert "hopattn.torch_ops" not in sys.modules
            explanation = torch._dynamo.explain(block)(q, k, v)
            print("graphs", explanation.graph_count, "breaks", explanation.graph_break_count)
            print("op", any(node.target is torch.ops.hopattn.fwd.default
                            for node in explanation.graphs[0].graph.nodes))
            torch._dynamo.reset()
            counter = CompileCounter()
            compiled = torch.compile(block, backend=counter, fullgraph=True)
            for _ in range(3):
                out = compiled(q, k, v)
            print("frames", counter.frame_count, tuple(out.shape), out.dtype)
    """)
    assert out.split("\n")[:3] == [
        "graphs 1 breaks 0",
        "op True",
        "frames 1 (2, 16, 4, 64) torch.bfloat16",
    ]


# --- fake implementations (torch, no library) ----------------------------------------------------------


FAKE_SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim)
    (2, 16, 16, 4, 4, 64),
    (1, 7, 300, 8, 2, 128),  # GQA, sq < sk
    (3, 300, 7, 6, 1, 256),  # MQA, sq > sk
    (0, 5, 5, 2, 2, 64),  # empty batch
    (2, 5, 0, 2, 2, 64),  # no keys
]


@pytest.mark.parametrize("shape", FAKE_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fake_forward_shapes(shape, dtype):
    mode = FakeTensorMode()
    q, k, v = fake_qkv(mode, *shape, dtype=dtype)
    with mode:
        out, lse = torch_ops.fwd(q, k, v, True, None, False)
    batch, seqlen_q, heads_q, head_dim = q.shape
    assert out.shape == q.shape and out.dtype == dtype and out.device == q.device and out.is_contiguous()
    assert lse.shape == (batch, heads_q, seqlen_q) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert lse.device == q.device


def test_fake_backward_gradients_are_laid_out_like_the_inputs():
    mode = FakeTensorMode()
    # Heads-major storage viewed as (b, s, h, d): empty_like keeps such a dense permutation, and the
    # real kernel allocates with empty_like too, so fake and real strides agree.
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in fake_qkv(mode, 2, 9, 11, 4, 2, 64))
    with mode:
        out, lse = torch_ops.fwd(q, k, v, False, 0.5, False)
        dq, dk, dv = torch_ops.bwd(torch.empty_like(out), q, k, v, out, lse, False, 0.5, False)
    for grad, like in ((dq, q), (dk, k), (dv, v)):
        assert grad.shape == like.shape and grad.dtype == like.dtype and grad.stride() == like.stride()


def test_attention_under_fake_tensors_returns_fake_outputs():
    # hopattn.attention -> hopattn::fwd -> its fake implementation: no library, no GPU involved.
    mode = FakeTensorMode()
    q, k, v = fake_qkv(mode, 2, 33, 17, 8, 2, 128)
    with mode:
        out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
        plain = hopattn.attention(q, k, v)
    assert out.shape == plain.shape == q.shape and lse.shape == (2, 8, 33)


def _with_dim(t, dim, size):
    shape = list(t.shape)
    shape[dim] = size
    return torch.empty(shape, dtype=t.dtype, device=t.device)


FAKE_ERRORS = [
    ("k batch", lambda q, k, v: (q, _with_dim(k, 0, 3), v), ValueError, r"k\.sizes\[0\] \(batch\)=3"),
    ("v head_dim", lambda q, k, v: (q, k, _with_dim(v, 3, 128)), ValueError, r"v\.sizes\[3\] \(head_dim\)=128"),
    ("v seqlen", lambda q, k, v: (q, k, _with_dim(v, 1, 9)), ValueError, r"v\.sizes\[1\] \(seqlen_k\)=9"),
    ("v heads", lambda q, k, v: (q, _with_dim(k, 2, 4), v), ValueError, r"v\.sizes\[2\] \(heads_kv\)=2"),
    ("gqa ratio", lambda q, k, v: (q, _with_dim(k, 2, 3), _with_dim(v, 2, 3)), ValueError,
     "heads_q=4 is not a multiple of heads_kv=3"),
    ("k dtype", lambda q, k, v: (q, k.half(), v), ValueError, "k: dtype fp16 differs from q's bf16"),
    ("q dims", lambda q, k, v: (q[0], k, v), ValueError, r"q: expected 4 dims"),
    ("fp32 on cuda", lambda q, k, v: (q.float(), k.float(), v.float()), NotImplementedError,
     "q: dtype fp32 is not supported on cuda"),
]


@pytest.mark.parametrize("mutate, error, message", [e[1:] for e in FAKE_ERRORS], ids=[e[0] for e in FAKE_ERRORS])
def test_fake_forward_rejects_bad_shapes_naming_the_argument(mutate, error, message):
    mode = FakeTensorMode()
    q, k, v = fake_qkv(mode, 2, 16, 16, 4, 2, 64)
    with mode:
        q, k, v = mutate(q, k, v)
        with pytest.raises(error, match=message):
            torch_ops.fwd(q, k, v, False, None, False)


def test_fake_backward_rejects_dout_unlike_q():
    mode = FakeTensorMode()
    q, k, v = fake_qkv(mode)
    with mode:
        out, lse = torch_ops.fwd(q, k, v, False, None, False)
        with pytest.raises(ValueError, match="dout: shape"):
            torch_ops.bwd(out[:, :8], q, k, v, out, lse, False, None, False)


def test_attention_still_rejects_cpu_tensors():
    # The op has a CPU kernel (the reference, for tests); attention() keeps refusing CPU tensors.
    q, k, v = cpu_qkv(dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
        hopattn.attention(q, k, v)


# --- CPU kernels (torch and the library) --------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_cpu_kernels_equal_the_numpy_binding(lib, causal, dtype):
    q, k, v = cpu_qkv(2, 9, 13, 4, 2, 64, dtype=dtype, requires_grad=True, seed=1)
    out, lse = torch_ops.fwd(q, k, v, causal, 0.3, False)
    gen = torch.Generator().manual_seed(2)
    dout = torch.randn(out.shape, generator=gen).to(dtype)
    out.backward(dout)
    arrays = [t.detach().numpy() for t in (q, k, v)]
    want_out, want_lse = hopattn.attention(*arrays, causal=causal, softmax_scale=0.3, return_lse=True)
    want_grads = hopattn.attention_backward(*arrays, dout.numpy(), causal=causal, softmax_scale=0.3)
    np.testing.assert_array_equal(out.detach().numpy(), want_out)
    np.testing.assert_array_equal(lse.numpy(), want_lse)
    for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want_grads):
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)


def test_autograd_saves_only_inputs_and_outputs_and_lse_is_not_differentiable(lib):
    q, k, v = cpu_qkv(requires_grad=True)
    out, lse = torch_ops.fwd(q, k, v, True, None, False)
    assert out.requires_grad and not lse.requires_grad
    saved = out.grad_fn.saved_tensors
    assert [t.data_ptr() for t in saved] == [t.data_ptr() for t in (q, k, v, out, lse)]
    with torch.no_grad():
        out, lse = torch_ops.fwd(q, k, v, True, None, False)
    assert out.grad_fn is None and not out.requires_grad


@pytest.mark.parametrize(
    "shape, causal, scale",
    [((2, 5, 7, 4, 2, 64), True, None), ((1, 8, 3, 2, 2, 32), False, 0.25), ((1, 4, 4, 3, 1, 16), True, 1.5)],
    ids=["gqa-causal", "full-scale", "mqa-causal"],
)
def test_opcheck_cpu(lib, shape, causal, scale):
    q, k, v = cpu_qkv(*shape, requires_grad=True, seed=3)
    torch.library.opcheck(torch_ops.fwd, (q, k, v, causal, scale, False))
    with torch.no_grad():
        out, lse = torch_ops.fwd(q, k, v, causal, scale, False)
    dout = torch.randn_like(out)
    detached = [t.detach() for t in (q, k, v)]
    torch.library.opcheck(torch_ops.bwd, (dout, *detached, out, lse, causal, scale, False))


def test_compile_fullgraph_forward_backward_on_cpu(lib):
    from torch._dynamo.testing import CompileCounterWithBackend

    def block(q, k, v, w):
        out, _ = torch_ops.fwd(q * w, k, v, True, None, False)
        return (out * w).sum(dim=-1)

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    q, k, v = cpu_qkv(2, 6, 6, 4, 2, 32, requires_grad=True, seed=4)
    w = torch.rand(32, requires_grad=True)
    leaves = (q, k, v, w)
    compiled(*leaves).sum().backward()
    compiled_grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    block(*leaves).sum().backward()
    assert counter.frame_count == 1
    for name, got, want in zip(("q", "k", "v", "w"), compiled_grads, (t.grad for t in leaves)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=name)


def test_library_errors_keep_their_type_through_the_dispatcher(lib):
    q, k, v = cpu_qkv(head_dim=64)
    with pytest.raises(ValueError, match="last dim"):
        torch_ops.fwd(q[..., ::2], k[..., ::2], v[..., ::2], False, None, False)
    with pytest.raises(hopattn.InvalidArgumentError, match="softmax_scale must be finite and > 0"):
        torch_ops.fwd(q, k, v, False, -1.0, False)


# --- GPU ---------------------------------------------------------------------------------------------

class AttentionBlock(torch.nn.Module):
    """Pre-norm self-attention with a residual, attention in `dtype` through hopattn."""

    def __init__(self, heads, head_dim, dtype):
        super().__init__()
        d_model = heads * head_dim
        self.heads, self.dtype = heads, dtype
        self.norm = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.norm(x)).to(self.dtype).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.unbind(dim=2)
        out = hopattn.attention(q, k, v, causal=True)
        return x + self.proj(out.reshape(b, s, d).float())


@needs_gpu
def test_compile_fullgraph_attention_block_forward_backward_no_graph_break():
    import copy

    from torch._dynamo.testing import CompileCounterWithBackend

    dtype, head_dim = gpu_kernel_pair()
    torch.manual_seed(0)
    block = AttentionBlock(4, head_dim, dtype).cuda()
    twin = copy.deepcopy(block)
    x = torch.randn((2, 256, 4 * head_dim), device="cuda", requires_grad=True)

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    y = compiled(x)
    y.square().mean().backward()
    assert counter.frame_count == 1
    assert any(node.target is torch.ops.hopattn.fwd.default for node in counter.graphs[0].graph.nodes)

    x_twin = x.detach().clone().requires_grad_()
    y_twin = twin(x_twin)
    y_twin.square().mean().backward()
    assert rel_l2(y, y_twin) < 1e-2
    assert rel_l2(x.grad, x_twin.grad) < 2e-2
    for (name, p), p_twin in zip(block.named_parameters(), twin.parameters()):
        assert rel_l2(p.grad, p_twin.grad) < 2e-2, name


def route_context(route):
    """hopattn.attention's direct route (plain eager) or its op route (torch.ops.hopattn.fwd)."""
    return op_route() if route == "op" else contextlib.nullcontext()


@needs_gpu
@pytest.mark.parametrize("route", ["direct", "op"])
def test_cuda_graph_capture_and_replay_equal_eager(route):
    dtype, head_dim = gpu_kernel_pair()
    q, k, v, dout = gpu_qkv(2, 300, 300, 8, 2, head_dim, dtype, seed=1)
    for t in (q, k, v):
        t.requires_grad_()

    def step():
        # deterministic=True: eager and replayed gradients can then be compared bitwise.
        with route_context(route):
            out = hopattn.attention(q, k, v, causal=True, deterministic=True)
            out.backward(dout)
        return out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(2):
            for t in (q, k, v):
                t.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    for t in (q, k, v):
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    static_grads = (q.grad, k.grad, v.grad)

    for seed in (2, 3):
        new = gpu_qkv(2, 300, 300, 8, 2, head_dim, dtype, seed=seed)
        with torch.no_grad():
            for dst, src in zip((q, k, v, dout), new):
                dst.copy_(src)
        graph.replay()
        eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = hopattn.attention(*eager, causal=True, deterministic=True)
        out.backward(dout)
        torch.cuda.synchronize()
        assert torch.equal(static_out, out)
        for name, got, e in zip(("dq", "dk", "dv"), static_grads, eager):
            assert torch.equal(got, e.grad), name


@needs_gpu
@pytest.mark.parametrize("route", ["direct", "op"])
def test_forward_and_backward_do_not_synchronise_the_host(route):
    dtype, head_dim = gpu_kernel_pair()
    q, k, v, dout = gpu_qkv(1, 128, 128, 4, 4, head_dim, dtype, seed=5)
    for t in (q, k, v):
        t.requires_grad_()
    with route_context(route):
        hopattn.attention(q, k, v).backward(dout)  # first call: library load, lazy CUDA init
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with route_context(route):
            out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
            out.backward(dout)
            hopattn.attention(q.detach(), k.detach(), v.detach(), causal=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@needs_gpu
def test_opcheck_cuda():
    dtype, head_dim = gpu_kernel_pair()
    q, k, v, dout = gpu_qkv(2, 77, 130, 4, 2, head_dim, dtype, seed=6)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch_ops.fwd, (q, k, v, True, None, True))
    with torch.no_grad():
        out, lse = torch_ops.fwd(q, k, v, True, None, True)
    torch.library.opcheck(torch_ops.bwd, (dout, q.detach(), k.detach(), v.detach(), out, lse, True, None, True))
