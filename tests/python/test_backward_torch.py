# Autograd through hopattn.attention on torch CUDA tensors (the sm90 backward kernels): gradients
# against a float64 torch reference and against torch SDPA's own backward, determinism, autograd
# plumbing (lse not differentiable, odd dout layouts, no-grad unchanged), head_dim 256, and a short
# training run tracking SDPA. Skips without torch, an sm_90 GPU or the library (fails if required).
import copy
import math

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from hopattn_test_support import require_library_or_skip_module  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"needs an sm_90 GPU, found {torch.cuda.get_device_name()}", allow_module_level=True)
require_library_or_skip_module()

import torch.nn.functional as F  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REL_L2_BOUND = 2e-2
KERNELS = hopattn.build_info()["kernels"]
BUILT_FWD = {(dtype, head_dim) for direction, dtype, head_dim in KERNELS if direction == "fwd"}
BUILT_BWD = {(dtype, head_dim) for direction, dtype, head_dim in KERNELS if direction == "bwd"}


def skip_unless_built(dtype_name, head_dim):
    if (dtype_name, head_dim) not in BUILT_FWD or (dtype_name, head_dim) not in BUILT_BWD:
        pytest.skip(f"fwd/bwd:{dtype_name}:{head_dim} not in this build ({hopattn.build_info()['instantiations']})")


def first_built():
    both = BUILT_FWD & BUILT_BWD
    if not both:
        pytest.skip("no sm90 forward+backward kernel pair in this build")
    dtype_name, head_dim = sorted(both, key=lambda x: (x[1] != 128, x[0] != "bf16", x))[0]
    return DTYPES[dtype_name], head_dim


def random_inputs(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, seed=0):
    """q, k, v (leaf tensors requiring grad) and dout."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(s, h):
        return torch.randn((batch, s, h, head_dim), generator=gen, device="cuda", dtype=torch.float32).to(dtype)

    q, k, v = rand(seqlen_q, heads_q), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv)
    dout = rand(seqlen_q, heads_q)
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), dout


def visible_mask(seqlen_q, seqlen_k, causal, device="cuda"):
    """(sq, sk) bool; bottom-right aligned causal: query i sees key j iff j <= i + sk - sq."""
    if not causal:
        return torch.ones((seqlen_q, seqlen_k), dtype=torch.bool, device=device)
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    return j <= i + (seqlen_k - seqlen_q)


def reference_attention_f64(q, k, v, causal, softmax_scale=None):
    """Differentiable float64 attention on the GPU in the (b, s, h, d) layout; a row that sees no
    key gives out 0 and zero gradients (its scores are replaced by finite zeros before softmax)."""
    seqlen_q, heads_q, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    qd = q.transpose(1, 2)
    kd = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vd = v.transpose(1, 2).repeat_interleave(group, dim=1)
    mask = visible_mask(seqlen_q, seqlen_k, causal)
    row_has_key = mask.any(dim=1)[:, None]
    scores = (qd @ kd.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    scores = torch.where(row_has_key, scores, torch.zeros_like(scores))
    probs = torch.softmax(scores, dim=-1) * row_has_key
    return (probs @ vd).transpose(1, 2)


def reference_grads(q, k, v, dout, causal, softmax_scale=None):
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = reference_attention_f64(q64, k64, v64, causal, softmax_scale)
    out.backward(dout.double())
    return out.detach(), (q64.grad, k64.grad, v64.grad)


def hopattn_grads(q, k, v, dout, causal, softmax_scale=None, deterministic=False):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = hopattn.attention(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic)
    out.backward(dout)
    return out.detach(), (q.grad, k.grad, v.grad)


def sdpa_grads(q, k, v, dout, causal):
    """torch SDPA's own backward on the same rounded inputs (its default backend choice). Causal with
    seqlen_q != seqlen_k gets an explicit bottom-right boolean mask (SDPA's is_causal is top-left)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    kwargs = {}
    if causal and seqlen_q == seqlen_k:
        kwargs["is_causal"] = True
    elif causal:
        kwargs["attn_mask"] = visible_mask(seqlen_q, seqlen_k, True)
    try:
        out = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True, **kwargs)
    except TypeError:  # torch < 2.5: no enable_gqa; repeat the kv heads (autograd sums them back)
        kt, vt = (t.repeat_interleave(group, dim=1) for t in (kt, vt))
        out = F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
    out.transpose(1, 2).backward(dout)
    return q.grad, k.grad, v.grad


def rel_l2(got, want, scale_norm):
    """||got - want|| / ||want||; where ||want|| is negligible next to scale_norm (e.g. dq with a
    single key, which is exactly 0 in exact arithmetic), relative to scale_norm instead."""
    got, want = got.double(), want.double()
    denom = want.norm().item()
    if denom <= 1e-6 * scale_norm:
        denom = scale_norm
    return (got - want).norm().item() / denom


GRAD_SEQLENS = [(1, 1), (17, 17), (127, 300), (300, 127), (1000, 1000)]
GROUPS = [1, 4, 8]
HEADS_Q = 8


@pytest.mark.parametrize("seqlens", GRAD_SEQLENS, ids=lambda s: f"q{s[0]}k{s[1]}")
@pytest.mark.parametrize("group", GROUPS, ids=lambda g: f"gqa{g}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_grads_match_reference(dtype_name, head_dim, causal, group, seqlens):
    skip_unless_built(dtype_name, head_dim)
    seqlen_q, seqlen_k = seqlens
    batch = 1 if seqlen_q * seqlen_k >= 10**6 else 2
    q, k, v, dout = random_inputs(batch, seqlen_q, seqlen_k, HEADS_Q, HEADS_Q // group, head_dim, DTYPES[dtype_name])
    _, want = reference_grads(q, k, v, dout, causal)
    out, got = hopattn_grads(q, k, v, dout, causal)
    sdpa = sdpa_grads(q, k, v, dout, causal)
    scale_norm = dout.double().norm().item()
    for name, g, w, s, like in zip(("dq", "dk", "dv"), got, want, sdpa, (q, k, v)):
        assert g is not None and g.shape == like.shape and g.dtype == like.dtype, name
        assert torch.isfinite(g).all(), name
        err = rel_l2(g, w, scale_norm)
        assert err <= REL_L2_BOUND, f"{name}: rel-L2 {err:.3e} > {REL_L2_BOUND}"
        # With rows that see no key (causal, seqlen_q > seqlen_k) SDPA is no yardstick: under the
        # explicit mask its gradients are NaN or far off (rel-L2 ~0.7 seen with torch 2.11), so only
        # the absolute bound applies there.
        if not (causal and seqlen_q > seqlen_k):
            assert torch.isfinite(s).all(), f"SDPA {name} not finite"
            sdpa_err = rel_l2(s, w, scale_norm)
            assert err <= 2 * sdpa_err + 1e-5, f"{name}: rel-L2 {err:.3e} > 2 x SDPA's {sdpa_err:.3e}"
    if causal and seqlen_q > seqlen_k:  # rows that see no key: out 0, dq exactly 0
        masked = seqlen_q - seqlen_k
        assert (out[:, :masked] == 0).all() and (got[0][:, :masked] == 0).all()


def test_custom_softmax_scale():
    dtype, head_dim = first_built()
    q, k, v, dout = random_inputs(2, 100, 150, 4, 2, head_dim, dtype, seed=3)
    _, want = reference_grads(q, k, v, dout, True, 0.05)
    _, got = hopattn_grads(q, k, v, dout, True, 0.05)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert rel_l2(g, w, dout.double().norm().item()) <= REL_L2_BOUND, name


@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_head_dim_256_works_or_names_head_dim(dtype_name):
    if (dtype_name, 256) not in BUILT_FWD:
        pytest.skip(f"fwd:{dtype_name}:256 not in this build")
    q, k, v, dout = random_inputs(1, 130, 130, 4, 2, 256, DTYPES[dtype_name], seed=9)
    try:
        _, got = hopattn_grads(q, k, v, dout, True)
    except Exception as e:  # noqa: BLE001 - autograd re-raises the binding's error
        assert "head_dim" in str(e), f"error does not name head_dim: {e!r}"
        return
    _, want = reference_grads(q, k, v, dout, True)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert rel_l2(g, w, dout.double().norm().item()) <= REL_L2_BOUND, name


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_deterministic_is_bitwise_reproducible(causal):
    dtype, head_dim = first_built()
    q, k, v, dout = random_inputs(2, 1000, 1000, 8, 2, head_dim, dtype, seed=10)
    _, first = hopattn_grads(q, k, v, dout, causal, deterministic=True)
    for _ in range(2):
        _, again = hopattn_grads(q, k, v, dout, causal, deterministic=True)
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), name
    # And the deterministic gradients are right.
    _, want = reference_grads(q, k, v, dout, causal)
    for name, g, w in zip(("dq", "dk", "dv"), first, want):
        assert rel_l2(g, w, dout.double().norm().item()) <= REL_L2_BOUND, name


# --- autograd plumbing ------------------------------------------------------------------------------


def test_no_grad_is_unchanged():
    dtype, head_dim = first_built()
    q, k, v, _ = random_inputs(1, 64, 64, 2, 2, head_dim, dtype)
    with torch.no_grad():
        out, lse = hopattn.attention(q, k, v, return_lse=True)
    assert out.grad_fn is None and not out.requires_grad and not lse.requires_grad
    plain = hopattn.attention(q.detach(), k.detach(), v.detach())
    assert plain.grad_fn is None and not plain.requires_grad
    assert torch.equal(out, plain)


def test_grad_forward_matches_plain_forward_and_lse_is_not_differentiable():
    dtype, head_dim = first_built()
    q, k, v, dout = random_inputs(2, 77, 130, 4, 2, head_dim, dtype, seed=11)
    out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    assert out.requires_grad and out.grad_fn is not None
    assert not lse.requires_grad
    with torch.no_grad():
        plain_out, plain_lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse)
    # Only out carries gradient; a loss that also reads lse still backpropagates through out.
    (out.float() * dout.float()).sum().add(lse.sum() * 0).backward()
    _, want = reference_grads(q, k, v, dout, True)
    for name, g, w in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
        assert rel_l2(g, w, dout.double().norm().item()) <= REL_L2_BOUND, name


def test_only_some_inputs_require_grad():
    dtype, head_dim = first_built()
    q, k, v, dout = random_inputs(1, 50, 60, 4, 1, head_dim, dtype, seed=12)
    k, v = k.detach(), v.detach()
    out = hopattn.attention(q, k, v)
    out.backward(dout)
    _, want = reference_grads(q, k, v, dout, False)
    assert k.grad is None and v.grad is None
    assert rel_l2(q.grad, want[0], dout.double().norm().item()) <= REL_L2_BOUND


def test_odd_dout_layouts():
    # out.sum() hands backward an expanded (all-zero-stride) dout; a transposed upstream gives a dout
    # with a non-contiguous last dim. Both must give the dense-dout gradients (deterministic=True so
    # the comparison can be bitwise).
    dtype, head_dim = first_built()
    q, k, v, _ = random_inputs(1, 40, 40, 2, 2, head_dim, dtype, seed=13)
    out = hopattn.attention(q, k, v, causal=True, deterministic=True)
    out.sum().backward()
    expanded = [t.grad.clone() for t in (q, k, v)]
    dense = hopattn_grads(q, k, v, torch.ones_like(out), True, deterministic=True)[1]
    for name, a, b in zip(("dq", "dk", "dv"), expanded, dense):
        assert torch.equal(a, b), name

    for t in (q, k, v):
        t.grad = None
    weight = torch.randn((1, 40, 2, head_dim), device="cuda", dtype=dtype)
    weight_t = weight.transpose(-1, -2).contiguous().transpose(-1, -2)  # stride(-1) == 2
    assert weight_t.stride(-1) != 1
    out = hopattn.attention(q, k, v, causal=True, deterministic=True)
    (out * weight_t).sum().backward()
    dense = hopattn_grads(q, k, v, (torch.ones_like(out) * weight).contiguous(), True, deterministic=True)[1]
    for name, a, b in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), dense):
        assert torch.equal(a, b), name


def test_strided_packed_qkv_grads():
    dtype, head_dim = first_built()
    gen = torch.Generator(device="cuda").manual_seed(14)
    qkv = torch.randn((2, 300, 3, 4, head_dim), generator=gen, device="cuda").to(dtype).requires_grad_()
    q, k, v = qkv.unbind(dim=2)
    dout = torch.randn((2, 300, 4, head_dim), generator=gen, device="cuda").to(dtype)
    hopattn.attention(q, k, v, causal=True).backward(dout)
    _, want = reference_grads(q, k, v, dout, True)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert rel_l2(qkv.grad[:, :, i], want[i], dout.double().norm().item()) <= REL_L2_BOUND, name


def test_backward_runs_on_current_stream():
    # Forward and backward on a side stream that first sleeps; backward launched on any other stream
    # would read dout before it is written.
    dtype, head_dim = first_built()
    q, k, v, dout = random_inputs(2, 512, 512, 4, 4, head_dim, dtype, seed=15)
    _, want = reference_grads(q, k, v, dout, True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = hopattn.attention(q, k, v, causal=True)
        late = torch.zeros_like(dout)
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU cycles
        late.copy_(dout)
        out.backward(late)
    torch.cuda.current_stream().wait_stream(side)
    for name, g, w in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
        assert rel_l2(g, w, dout.double().norm().item()) <= REL_L2_BOUND, name


def test_gradient_accumulates_across_calls():
    # The library writes dq/dk/dv; accumulation into .grad is autograd's (two uses of q sum up).
    dtype, head_dim = first_built()
    q, k, v, dout = random_inputs(1, 64, 64, 2, 2, head_dim, dtype, seed=16)
    (hopattn.attention(q, k, v) + hopattn.attention(q, k, v)).backward(dout)
    single = hopattn_grads(q, k, v, dout, False)[1]
    for name, g, s in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), single):
        assert rel_l2(g, 2 * s.double(), 1.0) <= 1e-2, name


def test_backward_error_names_head_dim_for_unbuilt_kernel():
    # A head_dim the forward has but the backward lacks (or, if it has all, nothing to check).
    missing = sorted((dt, hd) for dt, hd in BUILT_FWD if (dt, hd) not in BUILT_BWD)
    if not missing:
        pytest.skip("every forward kernel of this build has a backward kernel")
    dtype_name, head_dim = missing[0]
    q, k, v, dout = random_inputs(1, 16, 16, 2, 2, head_dim, DTYPES[dtype_name])
    out = hopattn.attention(q, k, v)
    with pytest.raises(Exception, match="head_dim"):
        out.backward(dout)


# --- training -----------------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self, d_model, heads, attn):
        super().__init__()
        self.heads = heads
        self.attn = attn
        self.norm = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).unbind(dim=2)
        return x + self.proj(self.attn(q, k, v).reshape(b, s, d))


def hopattn_causal(q, k, v):
    return hopattn.attention(q, k, v, causal=True)


def sdpa_causal(q, k, v):
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2)


def train_losses(model, attn, x, target, steps):
    for block in model[:-1]:
        block.attn = attn
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        loss = F.mse_loss(y.float(), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_tracks_sdpa():
    if ("bf16", 64) not in BUILT_FWD or ("bf16", 64) not in BUILT_BWD:
        pytest.skip("needs the bf16 head_dim 64 kernels")
    torch.manual_seed(0)
    d_model, heads, seqlen, batch, steps = 256, 4, 256, 4, 20
    # Two attention blocks and a linear head, fp32 weights under bf16 autocast, regressing a fixed
    # random target with Adam: identical seeds, so only the attention implementation differs.
    model = torch.nn.Sequential(Block(d_model, heads, sdpa_causal), Block(d_model, heads, sdpa_causal),
                                torch.nn.Linear(d_model, d_model)).cuda()
    twin = copy.deepcopy(model)
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn((batch, seqlen, d_model), generator=gen, device="cuda")
    target = torch.randn((batch, seqlen, d_model), generator=gen, device="cuda")
    ours = train_losses(model, hopattn_causal, x, target, steps)
    theirs = train_losses(twin, sdpa_causal, x, target, steps)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert abs(a - b) <= 0.02 * abs(b), f"step {step}: hopattn loss {a:.5f} vs SDPA {b:.5f}\n{ours}\n{theirs}"
    assert ours[-1] < 0.95 * ours[0], f"loss did not decrease: {ours}"
