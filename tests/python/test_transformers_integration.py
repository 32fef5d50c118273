# hopattn.integrations.transformers: attn_implementation="hopattn" in Hugging Face Transformers.
#  - Everywhere (no torch needed): importing the integration imports neither torch nor transformers.
#  - With torch and transformers, on the CPU (hopattn.attention monkeypatched with a recording
#    plain-torch implementation of its contract, since the kernels need a GPU): register() adds
#    "hopattn" to AttentionInterface (and sdpa's mask builder to AttentionMaskInterface); the
#    attention function's layout (transposed views in, (batch, seq, heads, head_dim) out), scaling,
#    causal decision (as transformers' sdpa integration, bottom-right aligned KV-cache masks), GQA
#    without repeat_kv, which masks run the kernel and which fall back to SDPA (counted, warned once),
#    the unsupported arguments; and a tiny random Llama end to end against "sdpa" (logits, padding,
#    chunked prefill, greedy generate with dynamic and static caches).
#  - Sliding windows and softcap, on the CPU (the same stand-ins, which implement window_size and
#    softcap): the window convention against transformers' own masks and flash-attention kwargs
#    (sliding_window=w is window_size=(w - 1, 0)), sliding_window without a mask, transformers'
#    sliding-window masks on the dense kernel (prefill, chunk, decode, static cache tail) and with
#    padding on the varlen kernel (the window read from the mask), what still falls back (padding
#    inside a window), softcap reaching both kernels and the softcap-aware fallback against Gemma 2's
#    eager attention; and a tiny random Gemma 2 (softcap, a sliding and a full layer) and Mistral
#    (sliding window) end to end against "eager" (logits with and without padding, chunked prefill,
#    greedy generate, a training step), nothing falling back.
#  - Padding masks, on the CPU (hopattn.varlen_attention monkeypatched with a recording plain-torch
#    implementation of its contract, and the integration's CUDA check with "yes"): the unpad/repad
#    indices against a loop, the reading of transformers' own masks (left, right, middle padding,
#    empty rows; prefill, chunk, decode; causal and bidirectional; a static cache's tail) and of what
#    is not padding (packed sequences, holes, per-head masks), the varlen call
#    against sdpa, with a gradient (the varlen route too: gradients against sdpa's), the fallbacks
#    (CPU tensors, other masks), and the tiny Llama with padding end to end (logits at kept
#    positions, left-padded greedy generate, a training step's loss and gradients).
#  - With torch, transformers, the library and an sm_90 GPU: a tiny random Llama (GQA, bf16) with
#    "hopattn" against "sdpa": logits without and with a padding mask (the varlen kernel), greedy
#    generate() of 32 tokens with the KV cache, without padding and left-padded (dynamic and static
#    cache), a backward pass, and a training step on a left-padded batch (the varlen forward and
#    backward: loss and parameter gradients); attention_forward with padding masks against sdpa's
#    math; and tiny random Gemma 2 and Mistral models (window 8, 32 tokens) with "hopattn" against
#    "eager": logits without and with padding, the sliding layers on hopattn's kernels with
#    window_size=(7, 0) and no fallback, 16 greedy tokens (also left-padded), a training step.
# Skips (through pytest.importorskip) without torch or transformers: the GPU machine may not have
# transformers installed.
import copy
import inspect
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import hopattn

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_import_loads_neither_torch_nor_transformers():
    code = (
        "import sys, hopattn, hopattn.integrations, hopattn.integrations.transformers as t; "
        "assert callable(t.register); "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'transformers' not in sys.modules, 'transformers imported'"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(hopattn.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from hopattn.integrations import transformers as integ

    return types.SimpleNamespace(torch=torch, transformers=transformers, integ=integ, sdpa=sdpa_attention_forward)


@pytest.fixture
def fresh_stats(hf):
    hf.integ.reset_stats()
    hf.integ._mask_cache.clear()
    yield
    hf.integ.reset_stats()
    hf.integ._mask_cache.clear()


def reference_attention(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0):
    """hopattn.attention's contract in plain torch (float32 math): (batch, seq, heads, head_dim), heads_q
    a multiple of heads_kv, bottom-right aligned causal mask and sliding window (query i sees key j
    iff i + d - left <= j <= i + d + right, d = sk - sq, -1 unbounded), softcap > 0 capping the
    scaled scores to softcap * tanh(score / softcap), a row that sees no key gives 0."""
    import torch

    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    assert hq % hk == 0 and v.shape[:3] == k.shape[:3] and v.shape[-1] == d
    left, right = window_size
    assert not (causal and right > 0) and softcap >= 0
    scale = d**-0.5 if softmax_scale is None else softmax_scale
    kk = k.float().repeat_interleave(hq // hk, dim=2)
    vv = v.float().repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= i
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv).to(q.dtype).contiguous()


class RecordingKernel:
    """Stands in for hopattn.attention: records each call's arguments, returns reference_attention."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, k, v, causal=False, softmax_scale=None, return_lse=False, deterministic=False,
                 window_size=(-1, -1), softcap=0.0):
        assert not return_lse
        self.calls.append(types.SimpleNamespace(q=q, k=k, v=v, causal=causal, softmax_scale=softmax_scale,
                                                deterministic=deterministic, window_size=tuple(window_size),
                                                softcap=softcap))
        return reference_attention(q, k, v, causal, softmax_scale, window_size, softcap)


@pytest.fixture
def kernel(hf, fresh_stats, monkeypatch):
    fake = RecordingKernel()
    monkeypatch.setattr(hopattn, "attention", fake)
    return fake


def make_module(torch, is_causal=True, groups=2):
    module = torch.nn.Module()
    if is_causal is not None:
        module.is_causal = is_causal
    module.num_key_value_groups = groups
    return module


def make_qkv(torch, batch=2, heads_q=4, heads_kv=2, seqlen_q=5, seqlen_k=5, head_dim=16, v_head_dim=None, seed=0):
    """query/key/value as Llama's attention makes them: projections viewed as (batch, seq, heads, dim)
    and transposed to (batch, heads, seq, dim), i.e. non-contiguous views."""
    gen = torch.Generator().manual_seed(seed)

    def rand(s, h, d):
        return torch.randn(batch, s, h, d, generator=gen).transpose(1, 2)

    return (rand(seqlen_q, heads_q, head_dim), rand(seqlen_k, heads_kv, head_dim),
            rand(seqlen_k, heads_kv, v_head_dim or head_dim))


def causal_bool_mask(torch, batch, seqlen_q, seqlen_k, padding=None):
    """(batch, 1, seqlen_q, seqlen_k) bool, True = attend: bottom-right causal, and with padding
    (batch, seqlen_k) of 0/1 the keys where it is 0 masked out, as transformers' sdpa_mask builds it."""
    i = torch.arange(seqlen_q)[:, None]
    j = torch.arange(seqlen_k)[None, :]
    mask = (j <= i + (seqlen_k - seqlen_q)).expand(batch, 1, seqlen_q, seqlen_k)
    if padding is not None:
        mask = mask & padding.bool()[:, None, None, :]
    return mask.contiguous()


def close(torch, got, want):
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# --- registration -----------------------------------------------------------------------------------


def test_register_makes_hopattn_an_attention_implementation(hf):
    transformers, integ = hf.transformers, hf.integ
    assert integ.register() == "hopattn"
    assert integ.register() == "hopattn"  # idempotent
    interface = transformers.AttentionInterface()
    assert "hopattn" in interface
    assert interface["hopattn"] is integ.attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert ALL_ATTENTION_FUNCTIONS.get_interface("hopattn", None) is integ.attention_forward
    masking_utils = pytest.importorskip("transformers.masking_utils")
    # Without a mask function transformers would hand a custom implementation no mask at all.
    assert masking_utils.AttentionMaskInterface()["hopattn"] is masking_utils.sdpa_mask
    try:
        assert integ.register("hopattn_test_name") == "hopattn_test_name"
        assert transformers.AttentionInterface()["hopattn_test_name"] is integ.attention_forward
    finally:
        transformers.AttentionInterface._global_mapping.pop("hopattn_test_name", None)
        masking_utils.AttentionMaskInterface._global_mapping.pop("hopattn_test_name", None)


# --- the attention function, with a recording kernel ----------------------------------------------------


def test_layout_scaling_and_gqa_reach_the_kernel(hf, kernel):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=7, seqlen_k=7)
    out, weights = hf.integ.attention_forward(module, query, key, value, None, dropout=0.0, scaling=0.3)
    assert weights is None
    (call,) = kernel.calls
    # (batch, heads, seq, dim) -> hopattn's (batch, seq, heads, dim), as views of the same memory.
    assert call.q.shape == (2, 7, 4, 16) and call.k.shape == (2, 7, 2, 16) and call.v.shape == (2, 7, 2, 16)
    for got, original in ((call.q, query), (call.k, key), (call.v, value)):
        assert got.data_ptr() == original.data_ptr()
        assert torch.equal(got, original.transpose(1, 2))
    assert call.softmax_scale == 0.3
    assert call.causal is True
    assert call.deterministic is False
    # transformers expects (batch, seq, heads, dim) back, like its sdpa integration gives.
    assert out.shape == (2, 7, 4, 16) and out.is_contiguous()
    want, _ = hf.sdpa(module, query, key, value, None, dropout=0.0, scaling=0.3)
    close(torch, out, want)
    assert hf.integ.stats() == {"kernel": 1}


def test_scaling_none_is_passed_as_none(hf, kernel):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch)
    out, _ = hf.integ.attention_forward(module, query, key, value, None)
    assert kernel.calls[0].softmax_scale is None  # hopattn's default 1/sqrt(head_dim), as SDPA's
    close(torch, out, hf.sdpa(module, query, key, value, None)[0])


@pytest.mark.parametrize(
    "module_causal, kwarg_causal, seqlen_q, seqlen_k, want_causal",
    [
        (True, None, 5, 5, True),
        (False, None, 5, 5, False),  # e.g. an encoder
        (True, False, 5, 5, False),  # the is_causal argument wins over the module's
        (False, True, 5, 5, True),
        (None, None, 5, 5, True),  # a module without is_causal: causal, as sdpa
        (True, None, 1, 9, False),  # one decode query sees the whole cache
    ],
)
def test_causal_decision_follows_sdpa(hf, kernel, module_causal, kwarg_causal, seqlen_q, seqlen_k, want_causal):
    torch = hf.torch
    module = make_module(torch, is_causal=module_causal)
    query, key, value = make_qkv(torch, seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    out, _ = hf.integ.attention_forward(module, query, key, value, None, is_causal=kwarg_causal)
    (call,) = kernel.calls
    assert call.causal is want_causal
    assert call.k.shape[1] == seqlen_k
    close(torch, out, hf.sdpa(module, query, key, value, None, is_causal=kwarg_causal)[0])


def test_causal_without_mask_and_more_keys_drops_the_unused_keys(hf, kernel):
    # transformers gives no mask for a prefill into an empty static cache: the keys past q_len are
    # empty cache slots, hidden by sdpa's top-left causal mask. hopattn's mask is bottom-right
    # aligned, so the integration drops them (as sdpa does) instead of letting the queries see them.
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=5, seqlen_k=9)
    out, _ = hf.integ.attention_forward(module, query, key, value, None)
    (call,) = kernel.calls
    assert call.causal is True and call.k.shape[1] == 5 and call.v.shape[1] == 5
    close(torch, out, hf.sdpa(module, query, key, value, None)[0])


def test_causal_without_mask_and_fewer_keys_falls_back(hf, kernel):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=6, seqlen_k=4)
    with pytest.warns(hf.integ.FallbackWarning, match="fewer keys"):
        out, _ = hf.integ.attention_forward(module, query, key, value, None)
    assert kernel.calls == []
    assert hf.integ.stats() == {"sdpa_fallback": 1, "sdpa_fallback:causal_kv_shorter_than_q": 1}
    assert torch.equal(out, hf.sdpa(module, query, key, value, None)[0])


def test_kv_cache_causal_mask_runs_the_kernel_bottom_right_aligned(hf, kernel):
    # A chunk of 3 new queries after 5 cached tokens, no padding: transformers materialises the
    # causal mask (query i sees key j iff j <= i + 5), which is hopattn's causal mask.
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=3, seqlen_k=8)
    mask = causal_bool_mask(torch, 2, 3, 8)
    out, _ = hf.integ.attention_forward(module, query, key, value, mask)
    (call,) = kernel.calls
    assert call.causal is True and call.k.shape[1] == 8
    assert hf.integ.stats() == {"kernel": 1}
    close(torch, out, hf.sdpa(module, query, key, value, mask)[0])


def test_all_visible_mask_runs_the_kernel_without_causal(hf, kernel):
    torch = hf.torch
    module = make_module(torch, is_causal=True)
    query, key, value = make_qkv(torch, seqlen_q=5, seqlen_k=5)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    out, _ = hf.integ.attention_forward(module, query, key, value, mask)
    (call,) = kernel.calls
    assert call.causal is False and call.k.shape[1] == 5  # the mask decides, as in sdpa
    close(torch, out, hf.sdpa(module, query, key, value, mask)[0])


def test_static_cache_decode_mask_trims_the_unused_keys(hf, kernel):
    # One decode query against a static cache of 12 slots of which 7 are filled: the mask shows the
    # first 7 keys; the kernel runs on those 7 (all visible to the one query).
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=1, seqlen_k=12)
    mask = (torch.arange(12) < 7).expand(2, 1, 1, 12).contiguous()
    out, _ = hf.integ.attention_forward(module, query, key, value, mask)
    (call,) = kernel.calls
    assert call.causal is False and call.k.shape[1] == 7 and call.v.shape[1] == 7
    close(torch, out, hf.sdpa(module, query, key, value, mask)[0])


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_mask_on_cpu_tensors_falls_back_to_sdpa_counted_and_warned_once(hf, kernel, side):
    # The varlen kernel takes CUDA tensors: on CPU tensors a padding mask goes to sdpa.
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=6, seqlen_k=6)
    padding = torch.ones(2, 6, dtype=torch.long)
    if side == "left":
        padding[0, :2] = 0
    else:
        padding[1, 4:] = 0
    mask = causal_bool_mask(torch, 2, 6, 6, padding)
    with pytest.warns(hf.integ.FallbackWarning, match="non-CUDA"):
        out, _ = hf.integ.attention_forward(module, query, key, value, mask)
    assert kernel.calls == []
    assert hf.integ.stats() == {"sdpa_fallback": 1, "sdpa_fallback:padding_mask_not_cuda": 1}
    assert torch.equal(out, hf.sdpa(module, query, key, value, mask)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per reason, not per call
        hf.integ.attention_forward(module, query, key, value, mask.clone())
    assert hf.integ.stats()["sdpa_fallback:padding_mask_not_cuda"] == 2 and kernel.calls == []


def test_float_masks(hf, kernel):
    # Additive masks (0 visible, -inf or the dtype's minimum masked) are read like boolean ones; any
    # other value is a bias the kernel cannot add, so it falls back.
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=3, seqlen_k=8)
    visible = causal_bool_mask(torch, 2, 3, 8)
    for masked in (float("-inf"), torch.finfo(torch.float32).min):
        mask = torch.zeros(2, 1, 3, 8).masked_fill(~visible, masked)
        out, _ = hf.integ.attention_forward(module, query, key, value, mask)
        assert kernel.calls[-1].causal is True and kernel.calls[-1].k.shape[1] == 8
        close(torch, out, hf.sdpa(module, query, key, value, mask)[0])
    biased = torch.zeros(2, 1, 3, 8).masked_fill(~visible, float("-inf"))
    biased[0, 0, 0, 0] = 0.5
    with pytest.warns(hf.integ.FallbackWarning):
        out, _ = hf.integ.attention_forward(module, query, key, value, biased)
    assert len(kernel.calls) == 2
    assert hf.integ.stats() == {"kernel": 2, "sdpa_fallback": 1, "sdpa_fallback:unsupported_mask": 1}
    assert torch.equal(out, hf.sdpa(module, query, key, value, biased)[0])


def test_mask_is_read_once_per_mask_object(hf, kernel, monkeypatch):
    # Every layer gets the same mask object: the host reads it once, not once per layer.
    torch = hf.torch
    seen = []
    classify = hf.integ._classify_mask
    monkeypatch.setattr(hf.integ, "_classify_mask", lambda *a: seen.append(1) or classify(*a))
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=3, seqlen_k=8)
    mask = causal_bool_mask(torch, 2, 3, 8)
    for _ in range(3):
        hf.integ.attention_forward(module, query, key, value, mask)
    assert len(seen) == 1 and len(kernel.calls) == 3
    mask[1, 0, 2, 0] = False  # changed in place: read again, and now it is a padding mask
    with pytest.warns(hf.integ.FallbackWarning):
        hf.integ.attention_forward(module, query, key, value, mask)
    assert len(seen) == 2 and len(kernel.calls) == 3


def test_mask_while_tracing_falls_back_without_reading_it(hf, kernel, monkeypatch):
    torch = hf.torch
    classify = []
    monkeypatch.setattr(hf.integ, "_classify_mask", lambda *a: classify.append(1))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=3, seqlen_k=8)
    mask = causal_bool_mask(torch, 2, 3, 8)
    out, _ = hf.integ.attention_forward(module, query, key, value, mask)
    assert kernel.calls == [] and classify == []
    close(torch, out, hf.sdpa(module, query, key, value, mask)[0])
    query, key, value = make_qkv(torch)
    hf.integ.attention_forward(module, query, key, value, None)  # no mask: the kernel (its op route)
    assert len(kernel.calls) == 1


def test_compiles_without_graph_break(hf, fresh_stats):
    # The real hopattn.attention under torch.compile (its op route), on fake CUDA tensors: no GPU
    # needed. No mask: one graph holding hopattn::fwd. A mask: sdpa, also without a break. Nothing is
    # counted while tracing (it would count trace time, not calls).
    torch = hf.torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    module = make_module(torch)

    def block(query, key, value, mask):
        return hf.integ.attention_forward(module, query, key, value, mask, scaling=0.125)[0] * 2

    with FakeTensorMode():
        query = torch.empty(2, 16, 4, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        key = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        value = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        mask = torch.empty(2, 1, 16, 16, dtype=torch.bool, device="cuda")
        for m, want_op in ((None, True), (mask, False)):
            torch._dynamo.reset()
            explanation = torch._dynamo.explain(block)(query, key, value, m)
            assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons
            nodes = explanation.graphs[0].graph.nodes
            assert any(node.target is torch.ops.hopattn.fwd.default for node in nodes) is want_op
    torch._dynamo.reset()
    assert hf.integ.stats() == {}


def test_compiles_with_window_and_softcap_without_graph_break(hf, fresh_stats):
    # As above, with Gemma 2's arguments and no mask (a sliding layer's prefill when transformers
    # builds none): one graph, whose hopattn::fwd node carries window (7, 0) and the softcap.
    torch = hf.torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    module = make_module(torch)

    def block(query, key, value):
        return hf.integ.attention_forward(module, query, key, value, None, scaling=0.125, sliding_window=8,
                                          softcap=30.0)[0] * 2

    with FakeTensorMode():
        query = torch.empty(2, 16, 4, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        key = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        value = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(block)(query, key, value)
    torch._dynamo.reset()
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons
    (node,) = [n for n in explanation.graphs[0].graph.nodes if n.target is torch.ops.hopattn.fwd.default]
    arguments = {a.name: a.default_value for a in node.target._schema.arguments}
    arguments.update(zip([a.name for a in node.target._schema.arguments], node.args))
    arguments.update(node.kwargs)
    assert arguments["causal"] is True and arguments["softmax_scale"] == 0.125, arguments
    assert (arguments["window_left"], arguments["window_right"], arguments["softcap"]) == (7, 0, 30.0), arguments
    assert hf.integ.stats() == {}


def test_position_bias_falls_back(hf, kernel):
    torch = hf.torch
    module = make_module(torch, is_causal=False)
    query, key, value = make_qkv(torch)
    bias = torch.randn(1, 4, 5, 5)
    with pytest.warns(hf.integ.FallbackWarning, match="position_bias"):
        out, _ = hf.integ.attention_forward(module, query, key, value, None, position_bias=bias)
    assert kernel.calls == []
    assert torch.equal(out, hf.sdpa(module, query, key, value, None, position_bias=bias)[0])


def test_unsupported_arguments_raise_naming_them(hf, kernel):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch)
    with pytest.raises(NotImplementedError, match="dropout"):
        hf.integ.attention_forward(module, query, key, value, None, dropout=0.1)
    with pytest.raises(NotImplementedError, match="s_aux"):
        hf.integ.attention_forward(module, query, key, value, None, s_aux=torch.zeros(4))
    for bad in (-1.0, float("nan"), float("inf"), True, "30"):  # hopattn's softcap check, before any work
        with pytest.raises(ValueError, match="softcap"):
            hf.integ.attention_forward(module, query, key, value, None, softcap=bad)
    assert kernel.calls == []
    hf.integ.attention_forward(module, query, key, value, None, dropout=0.0, softcap=None, sliding_window=None)
    hf.integ.attention_forward(module, query, key, value, None, softcap=0.0)  # 0: off, as in FlashAttention
    assert len(kernel.calls) == 2
    for call in kernel.calls:
        assert call.softcap == 0.0 and call.window_size == (-1, -1)  # neither passed: the plain call


def test_smaller_value_head_dim_is_padded_and_cropped(hf, kernel):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, head_dim=16, v_head_dim=8)
    out, _ = hf.integ.attention_forward(module, query, key, value, None)
    assert kernel.calls[0].v.shape[-1] == 16 and out.shape == (2, 5, 4, 8)
    close(torch, out, hf.sdpa(module, query, key, value, None)[0])


def test_deterministic_follows_torch(hf, kernel):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        hf.integ.attention_forward(module, query, key, value, None)
    finally:
        torch.use_deterministic_algorithms(previous)
    assert kernel.calls[0].deterministic is True


# --- padding masks: the variable-length route ----------------------------------------------------------


def reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                     softmax_scale=None, window_size=(-1, -1), softcap=0.0):
    """hopattn.varlen_attention's contract in plain torch: packed (total, heads, head_dim), each
    sequence through reference_attention (bottom-right causal and window per sequence; a row without
    keys gives 0)."""
    import torch

    out = torch.zeros_like(q)
    cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cu_q) - 1):
        sq, sk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        assert sq <= max_seqlen_q and sk <= max_seqlen_k
        if sq == 0:
            continue
        if sk == 0:
            continue  # no keys: 0
        out[cu_q[b]:cu_q[b + 1]] = reference_attention(q[None, cu_q[b]:cu_q[b + 1]], k[None, cu_k[b]:cu_k[b + 1]],
                                                       v[None, cu_k[b]:cu_k[b + 1]], causal, softmax_scale,
                                                       window_size, softcap)[0]
    return out


class RecordingVarlen:
    """Stands in for hopattn.varlen_attention: checks the call against its contract (int32 contiguous
    cu_seqlens on q's device, max_seqlen ints at least every length, contiguous packed inputs),
    records it and returns reference_varlen (plain torch, so differentiable like the real one)."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                 softmax_scale=None, seqused_q=None, seqused_k=None, return_lse=False, check_index_values=False,
                 deterministic=False, window_size=(-1, -1), softcap=0.0):
        import torch

        assert not return_lse and seqused_q is None and seqused_k is None
        assert q.dim() == k.dim() == v.dim() == 3 and k.shape == v.shape and q.shape[-1] == k.shape[-1]
        for cu, total in ((cu_seqlens_q, q.shape[0]), (cu_seqlens_k, k.shape[0])):
            assert cu.dtype == torch.int32 and cu.is_contiguous() and cu.device == q.device
            assert cu[0].item() == 0 and cu[-1].item() == total and bool((cu[1:] >= cu[:-1]).all())
        assert type(max_seqlen_q) is int and type(max_seqlen_k) is int
        assert max_seqlen_q == int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
        assert max_seqlen_k == int((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).max())
        self.calls.append(types.SimpleNamespace(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q.tolist(),
                                                cu_seqlens_k=cu_seqlens_k.tolist(), max_seqlen_q=max_seqlen_q,
                                                max_seqlen_k=max_seqlen_k, causal=causal,
                                                softmax_scale=softmax_scale, deterministic=deterministic,
                                                window_size=tuple(window_size), softcap=softcap))
        return reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                                softmax_scale, window_size, softcap)


@pytest.fixture
def varlen(hf, kernel, monkeypatch):
    """The varlen route on the CPU: hopattn.varlen_attention replaced by RecordingVarlen and the
    integration's CUDA check by "yes" (the dense kernel is the recording one as well)."""
    fake = RecordingVarlen()
    fake.kernel = kernel  # the dense route's recording kernel
    monkeypatch.setattr(hopattn, "varlen_attention", fake)
    monkeypatch.setattr(hf.integ, "_varlen_device_ok", lambda *tensors: True)
    return fake


def loop_unpad(keep):
    """The packing by hand: per batch row, the positions kept, in order."""
    rows = [[pos for pos, k in enumerate(row) if k] for row in keep.tolist()]
    cu = [0]
    for row in rows:
        cu.append(cu[-1] + len(row))
    return rows, cu


@pytest.mark.parametrize("seed", range(4))
def test_unpad_indices_and_repad_match_a_loop(hf, seed):
    torch, integ = hf.torch, hf.integ
    gen = torch.Generator().manual_seed(seed)
    batch, q_len, kv_len = 5, 7, 11
    query_keep = torch.rand(batch, q_len, generator=gen) < 0.6
    key_keep = torch.rand(batch, kv_len, generator=gen) < 0.6
    query_keep[0] = True  # a row without padding
    query_keep[1] = False  # a row with no kept query
    key_keep[2] = False  # a row with no kept key
    query_keep[3, :4] = False  # left padding
    key_keep[4, 8:] = False  # right padding
    idx = integ._unpad_indices(torch, query_keep, key_keep)
    rows_q, cu_q = loop_unpad(query_keep)
    rows_k, cu_k = loop_unpad(key_keep)
    assert idx.cu_seqlens_q.dtype == torch.int32 and idx.cu_seqlens_k.dtype == torch.int32
    assert idx.cu_seqlens_q.tolist() == cu_q and idx.cu_seqlens_k.tolist() == cu_k
    assert idx.max_seqlen_q == max(map(len, rows_q)) and idx.max_seqlen_k == max(map(len, rows_k))
    assert idx.total_q == cu_q[-1] and idx.total_k == cu_k[-1]

    # The gather: (batch, seq, heads, dim) as transformers' transposed views, packed by hand.
    x = torch.randn(batch, 3, q_len, 4, generator=gen).transpose(1, 2)  # non-contiguous (batch, seq, heads, dim)
    packed = integ._unpad(x, idx.q_batch, idx.q_pos)
    want = torch.stack([x[b, pos] for b, row in enumerate(rows_q) for pos in row])
    assert packed.is_contiguous() and torch.equal(packed, want)
    y = torch.randn(batch, 2, kv_len, 4, generator=gen).transpose(1, 2)
    want_k = torch.stack([y[b, pos] for b, row in enumerate(rows_k) for pos in row])
    assert torch.equal(integ._unpad(y, idx.k_batch, idx.k_pos), want_k)

    # The scatter back: kept rows in place, the others 0.
    back = integ._repad(torch, packed * 2, idx.q_batch, idx.q_pos, batch, q_len)
    want_back = torch.zeros(batch, q_len, 3, 4)
    for b, row in enumerate(rows_q):
        for pos in row:
            want_back[b, pos] = 2 * x[b, pos]
    assert back.is_contiguous() and torch.equal(back, want_back)


def sdpa_style_mask(hf, padding, q_len, kv_len, causal=True, window=None):
    """transformers' own sdpa_mask for a (batch, kv_len) 0/1 padding mask and the last q_len positions
    of kv_len (or, with causal=False, the bidirectional mask)."""
    masking_utils = pytest.importorskip("transformers.masking_utils")
    if causal:
        fn = masking_utils.causal_mask_function
        if window is not None:
            fn = masking_utils.sliding_window_causal_mask_function(window)
    else:
        fn = masking_utils.bidirectional_mask_function
    mask = masking_utils.sdpa_mask(batch_size=padding.shape[0], q_length=q_len, kv_length=kv_len,
                                   q_offset=kv_len - q_len, mask_function=fn, attention_mask=padding.bool(),
                                   allow_is_causal_skip=False)
    assert mask.dtype == hf.torch.bool and mask.shape == (padding.shape[0], 1, q_len, kv_len)
    return mask


PADDINGS = {
    # (batch, kv_len) 0/1: what transformers' attention_mask holds for the cache and the new tokens.
    "left": [[0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9, [0, 0, 0, 0, 0, 0, 1, 1, 1]],
    "right": [[1, 1, 1, 1, 1, 1, 0, 0, 0], [1] * 9, [1, 1, 1, 1, 1, 0, 0, 0, 0]],
    "middle": [[1, 1, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 0, 1], [0, 1, 1, 1, 0, 1, 1, 1, 1]],
    "empty_row": [[0] * 9, [0, 1, 1, 1, 1, 1, 1, 1, 1], [1] * 9],
}


def expected_layout(torch, padding, q_len, causal):
    """What _padding_layout must find, from the 2-D padding mask: keys = the padding mask; queries =
    the padding of the last q_len positions (causal), or all queries (bidirectional)."""
    keys = padding.bool()
    queries = keys[:, -q_len:] if causal else torch.ones(padding.shape[0], q_len, dtype=torch.bool)
    return queries, keys


@pytest.mark.parametrize("side", sorted(PADDINGS))
@pytest.mark.parametrize("q_len", [9, 4, 1])  # prefill, a chunk after 5 cached tokens, a decode step
@pytest.mark.parametrize("causal", [True, False])
def test_padding_layout_of_transformers_masks(hf, side, q_len, causal):
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS[side])
    mask = sdpa_style_mask(hf, padding, q_len, 9, causal)
    layout = integ._padding_layout(torch, mask)
    assert layout is not None
    got_causal, queries, keys, left = layout
    assert left is None  # no sliding window
    if q_len == 1 or not causal:
        # Every query of a row sees the same keys: one non-causal sequence per row, all queries kept.
        assert got_causal is False
        assert queries.all() and torch.equal(keys, mask[:, 0, 0])
        if not causal:
            assert torch.equal(keys, padding.bool())
    else:
        want_queries, want_keys = expected_layout(torch, padding, q_len, causal)
        assert got_causal is True
        assert torch.equal(queries, want_queries) and torch.equal(keys, want_keys)


@pytest.mark.parametrize("q_len", [9, 4, 1])
def test_padding_layout_with_a_static_cache_tail(hf, q_len):
    # A static cache of 14 slots, 9 used: the mask has 5 trailing keys nobody sees. The queries stand at
    # the end of the used part, not of the whole cache: the offset is read from the mask.
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS["left"])
    used = sdpa_style_mask(hf, padding, q_len, 9)
    mask = torch.zeros(3, 1, q_len, 14, dtype=torch.bool)
    mask[..., :9] = used
    got_causal, queries, keys, left = integ._padding_layout(torch, mask)
    assert got_causal is (q_len > 1) and left is None
    want_queries, want_keys = expected_layout(torch, padding, q_len, True)
    assert torch.equal(keys[:, :9], want_keys) and not keys[:, 9:].any()
    if q_len > 1:
        assert torch.equal(queries, want_queries)


def test_padding_layout_rejects_what_is_not_padding(hf):
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS["left"])
    # A sliding window with padding inside a window ("middle": row 0 has a hole at positions 2, 3,
    # row 2 at 4): the mask's window counts positions, varlen's would count kept tokens.
    middle = torch.tensor(PADDINGS["middle"])
    assert integ._padding_layout(torch, sdpa_style_mask(hf, middle, 9, 9, window=3)) is None
    # A window that is not the same for every query (query 7 sees one key less than query 8 does).
    narrowed = sdpa_style_mask(hf, padding, 9, 9, window=4).clone()
    narrowed[:, :, 7, 4] = False
    assert integ._padding_layout(torch, narrowed) is None
    # A window that leaves a gap before the query's own key.
    gapped = sdpa_style_mask(hf, padding, 9, 9, window=4).clone()
    gapped[1, 0, 6, 5] = False
    assert integ._padding_layout(torch, gapped) is None
    # Packed sequences (a block-diagonal causal mask): tokens of the first document are no padding.
    docs = causal_bool_mask(torch, 1, 8, 8).clone()
    docs[:, :, 4:, :4] = False
    assert integ._padding_layout(torch, docs) is None
    # One query row missing one key it should see.
    holed = sdpa_style_mask(hf, padding, 9, 9).clone()
    holed[0, 0, 6, 3] = False
    assert integ._padding_layout(torch, holed) is None
    # A padding row that sees a key it should not.
    extra = sdpa_style_mask(hf, padding, 9, 9).clone()
    extra[2, 0, 1, 7] = True
    assert integ._padding_layout(torch, extra) is None
    # Heads with different masks.
    two_heads = sdpa_style_mask(hf, padding, 9, 9).expand(3, 2, 9, 9).clone()
    two_heads[1, 1, 8, 8] = False
    assert integ._padding_layout(torch, two_heads) is None
    # The top-left aligned causal mask with more queries than keys.
    assert integ._padding_layout(torch, torch.ones(1, 1, 6, 4, dtype=torch.bool).tril()) is None
    # Everything masked everywhere: kept nothing, causal (and full: one pattern) - all rows 0.
    nothing = integ._padding_layout(torch, torch.zeros(2, 1, 3, 5, dtype=torch.bool))
    assert nothing is not None and not nothing[2].any()


CASES = [
    # (side, q_len, kv_len, module causal): prefill, a chunk into a cache, a decode step, bidirectional.
    ("left", 9, 9, True), ("right", 9, 9, True), ("middle", 9, 9, True), ("empty_row", 9, 9, True),
    ("left", 4, 9, True), ("right", 4, 9, True), ("left", 1, 9, True), ("middle", 1, 9, True),
    ("left", 9, 9, False), ("right", 9, 9, False), ("empty_row", 9, 9, False),
]


@pytest.mark.parametrize("side, q_len, kv_len, causal", CASES)
def test_padding_mask_runs_the_varlen_kernel(hf, varlen, kernel, side, q_len, kv_len, causal):
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS[side])
    module = make_module(torch, is_causal=causal)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=q_len, seqlen_k=kv_len)
    mask = sdpa_style_mask(hf, padding, q_len, kv_len, causal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        out, weights = integ.attention_forward(module, query, key, value, mask, scaling=0.3)
    assert weights is None and kernel.calls == []
    assert integ.stats() == {"varlen": 1}
    (call,) = varlen.calls
    assert call.softmax_scale == 0.3
    assert call.causal is (causal and q_len > 1)
    queries, keys = expected_layout(torch, padding, q_len, causal and q_len > 1)
    assert call.cu_seqlens_q == [0] + queries.sum(1).cumsum(0).tolist()
    assert call.cu_seqlens_k == [0] + keys.sum(1).cumsum(0).tolist()
    assert call.q.shape == (queries.sum().item(), 4, 16) and call.k.shape == (keys.sum().item(), 2, 16)
    assert out.shape == (3, q_len, 4, 16) and out.is_contiguous()
    # Kept queries: what sdpa computes with the mask; the others (padding) 0.
    want, _ = hf.sdpa(module, query, key, value, mask, scaling=0.3)
    close(torch, out[queries], want[queries])
    assert not out[~queries].any()
    # A left-padding row sees no key: sdpa gives 0 there as well, so those rows match too.
    no_key = ~mask[:, 0].any(-1)
    close(torch, out[no_key], want[no_key])


def test_padding_mask_with_static_cache_tail_and_additive_mask(hf, varlen):
    # A chunk of 4 queries into a static cache of 14 slots (9 used), the mask additive as older
    # transformers built it.
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS["left"])
    module = make_module(torch)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=4, seqlen_k=14)
    visible = torch.zeros(3, 1, 4, 14, dtype=torch.bool)
    visible[..., :9] = sdpa_style_mask(hf, padding, 4, 9)
    for mask in (visible, torch.zeros(3, 1, 4, 14).masked_fill(~visible, torch.finfo(torch.float32).min)):
        integ.reset_stats()
        out, _ = integ.attention_forward(module, query, key, value, mask)
        assert integ.stats() == {"varlen": 1}
        call = varlen.calls[-1]
        assert call.causal is True and call.cu_seqlens_k == [0, 7, 16, 19]  # the tail is dropped
        queries = padding.bool()[:, 5:9]
        close(torch, out[queries], hf.sdpa(module, query, key, value, mask)[0][queries])


@pytest.mark.parametrize("side, causal", [("left", True), ("right", True), ("middle", True), ("empty_row", True),
                                          ("right", False)])
def test_padding_mask_with_grad_runs_the_varlen_kernel(hf, varlen, kernel, side, causal):
    # varlen_attention is differentiable: with a gradient required (training), a padding mask still
    # runs the varlen kernel, and the gradients through the gather, the kernel and the scatter are
    # sdpa's for a loss on the kept queries (padding query rows are 0 here, and nobody attends to
    # padding keys, so padding tokens get gradient 0 in both).
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS[side])
    module = make_module(torch, is_causal=causal)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9)
    mask = sdpa_style_mask(hf, padding, 9, 9, causal)
    queries, _ = expected_layout(torch, padding, 9, causal)
    weight = torch.randn(3, 9, 4, 16, generator=torch.Generator().manual_seed(7))
    grads = {}
    for name in ("hopattn", "sdpa"):
        q, k, v = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
        if name == "hopattn":
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no fallback
                out, _ = integ.attention_forward(module, q, k, v, mask)
            assert out.requires_grad
        else:
            out, _ = hf.sdpa(module, q, k, v, mask)
        (out[queries] * weight[queries]).sum().backward()
        grads[name] = (out.detach(), q.grad, k.grad, v.grad)
    assert kernel.calls == [] and integ.stats() == {"varlen": 1}
    (call,) = varlen.calls
    assert call.causal is causal and call.deterministic is False
    assert call.q.requires_grad and call.k.requires_grad and call.v.requires_grad
    out_h, dq_h, dk_h, dv_h = grads["hopattn"]
    out_s, dq_s, dk_s, dv_s = grads["sdpa"]
    close(torch, out_h[queries], out_s[queries])
    # dq: (batch, heads, seq, dim) like query; kept queries as sdpa, padding queries 0.
    kept_q = queries[:, None, :].expand(3, 4, 9)
    close(torch, dq_h[kept_q], dq_s[kept_q])
    assert not dq_h[~kept_q].any()
    # dk/dv: every key (padding keys get 0 in both: nobody attends to them).
    close(torch, dk_h, dk_s)
    close(torch, dv_h, dv_s)
    keys = padding.bool()[:, None, :].expand(3, 2, 9)
    assert not dk_h[~keys].any() and not dv_h[~keys].any()


def test_padding_mask_deterministic_follows_torch(hf, varlen):
    torch, integ = hf.torch, hf.integ
    module = make_module(torch)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9)
    mask = sdpa_style_mask(hf, torch.tensor(PADDINGS["left"]), 9, 9)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        integ.attention_forward(module, query.requires_grad_(True), key, value, mask)
    finally:
        torch.use_deterministic_algorithms(previous)
    assert varlen.calls[0].deterministic is True
    assert integ.stats() == {"varlen": 1}


def test_unsupported_masks_fall_back(hf, varlen):
    torch, integ = hf.torch, hf.integ
    module = make_module(torch)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9)
    # Packed sequences (a block-diagonal causal mask), and a sliding window with padding inside it.
    docs = causal_bool_mask(torch, 3, 9, 9).clone()
    docs[:, :, 4:, :4] = False
    holed_window = sdpa_style_mask(hf, torch.tensor(PADDINGS["middle"]), 9, 9, window=3)
    for n, mask in enumerate((docs, holed_window), 1):
        if n == 1:
            with pytest.warns(integ.FallbackWarning, match="packed sequences"):
                out, _ = integ.attention_forward(module, query, key, value, mask)
        else:
            out, _ = integ.attention_forward(module, query, key, value, mask)  # warned once per reason
        assert varlen.calls == []
        assert integ.stats() == {"sdpa_fallback": n, "sdpa_fallback:unsupported_mask": n}
        assert torch.equal(out, hf.sdpa(module, query, key, value, mask)[0])


def test_padding_plan_is_made_once_per_mask_object(hf, varlen, monkeypatch):
    torch, integ = hf.torch, hf.integ
    seen = []
    layout = integ._padding_layout
    monkeypatch.setattr(integ, "_padding_layout", lambda *a: seen.append(1) or layout(*a))
    module = make_module(torch)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9)
    mask = sdpa_style_mask(hf, torch.tensor(PADDINGS["right"]), 9, 9)
    for _ in range(3):
        integ.attention_forward(module, query, key, value, mask)
    assert len(seen) == 1 and len(varlen.calls) == 3
    mask[0, 0, 3, 1] = False  # changed in place: read again (a kept query now missing a key it should see)
    with pytest.warns(integ.FallbackWarning):
        integ.attention_forward(module, query, key, value, mask)
    assert len(seen) == 2 and len(varlen.calls) == 3


def test_padding_mask_with_smaller_value_head_dim(hf, varlen):
    torch, integ = hf.torch, hf.integ
    module = make_module(torch)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9, head_dim=16, v_head_dim=8)
    mask = sdpa_style_mask(hf, torch.tensor(PADDINGS["left"]), 9, 9)
    out, _ = integ.attention_forward(module, query, key, value, mask)
    assert varlen.calls[0].v.shape[-1] == 16 and out.shape == (3, 9, 4, 8)
    queries = torch.tensor(PADDINGS["left"]).bool()
    close(torch, out[queries], hf.sdpa(module, query, key, value, mask)[0][queries])


# --- sliding windows and softcap --------------------------------------------------------------------------


def test_sliding_window_convention_is_transformers_own(hf, kernel):
    # What transformers means by sliding_window=w, from its own code: the masks it builds for
    # eager/sdpa (sliding_window_causal_mask_function(w): kv_idx > q_idx - w, and causal) are
    # hopattn's causal window_size=(w - 1, 0), bottom-right aligned, for a prefill, a chunk after a
    # cache and a decode step; and its flash-attention integration hands FlashAttention
    # window_size=(w - 1, w - 1) with causal=True, whose right bound FlashAttention reads as 0
    # (hopattn's flash_attn_interface does the same): (w - 1, 0) again.
    import numpy as np
    from hopattn_test_support import visible_keys

    torch = hf.torch
    masking_utils = pytest.importorskip("transformers.masking_utils")
    for w in (1, 2, 3, 8):
        for q_len, kv_len in ((12, 12), (4, 12), (1, 12), (3, 5)):
            mask = masking_utils.sdpa_mask(batch_size=1, q_length=q_len, kv_length=kv_len, q_offset=kv_len - q_len,
                                           mask_function=masking_utils.sliding_window_causal_mask_function(w),
                                           allow_is_causal_skip=False)
            want = visible_keys(q_len, kv_len, causal=True, window_size=(w - 1, 0))
            assert np.array_equal(mask[0, 0].numpy(), want), (w, q_len, kv_len)
            for off_by_one in (w - 2, w):  # either neighbour is a different mask while the window hides keys
                if off_by_one >= 0 and w < kv_len:
                    other = visible_keys(q_len, kv_len, causal=True, window_size=(off_by_one, 0))
                    assert not np.array_equal(mask[0, 0].numpy(), other), (w, off_by_one, q_len, kv_len)
    fa_utils = pytest.importorskip("transformers.modeling_flash_attention_utils")
    process = getattr(fa_utils, "_process_flash_attention_kwargs", None)
    if process is None:
        pytest.skip("this transformers has no _process_flash_attention_kwargs")

    class Supports(dict):
        def __missing__(self, key):
            return True

    flash_kwargs = process(query_length=12, key_length=12, is_causal=True, sliding_window=8,
                           supports_mapping=Supports())
    assert flash_kwargs["causal"] is True and tuple(flash_kwargs["window_size"]) == (7, 7)
    from hopattn import flash_attn_interface

    assert flash_attn_interface._window(flash_kwargs["window_size"], True) == (7, 0)
    # The integration passes the same window, given no mask (as flash attention is) or the mask.
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=12, seqlen_k=12)
    hf.integ.attention_forward(module, query, key, value, None, sliding_window=8)
    mask = sdpa_style_mask(hf, torch.ones(2, 12, dtype=torch.long), 12, 12, window=8)
    hf.integ.attention_forward(module, query, key, value, mask, sliding_window=8)
    assert [(c.causal, c.window_size) for c in kernel.calls] == [(True, (7, 0))] * 2


def gemma2_eager(hf):
    """Gemma 2's eager attention (scores * scaling, capped, plus the additive mask, softmax in float32)."""
    modeling = pytest.importorskip("transformers.models.gemma2.modeling_gemma2")
    return modeling.eager_attention_forward


def additive(torch, visible):
    """A boolean mask as eager's additive one."""
    return torch.zeros(visible.shape).masked_fill(~visible, torch.finfo(torch.float32).min)


def test_softcap_reaches_the_kernel_and_matches_gemma2_eager(hf, kernel):
    torch, integ = hf.torch, hf.integ
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=7, seqlen_k=7)
    mask = causal_bool_mask(torch, 2, 7, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, _ = integ.attention_forward(module, query, key, value, None, scaling=0.5, softcap=2.0)
        out_masked, _ = integ.attention_forward(module, query, key, value, mask, scaling=0.5, softcap=2)
    for call in kernel.calls:
        assert call.causal is True and call.softcap == 2.0 and type(call.softcap) is float
        assert call.window_size == (-1, -1)
    assert integ.stats() == {"kernel": 2}
    want, _ = gemma2_eager(hf)(module, query, key, value, additive(torch, mask), scaling=0.5, softcap=2.0)
    close(torch, out, want)
    close(torch, out_masked, want)
    uncapped, _ = gemma2_eager(hf)(module, query, key, value, additive(torch, mask), scaling=0.5)
    assert (uncapped - want).abs().max() > 1e-2  # the cap matters at these scores


@pytest.mark.parametrize("q_len, kv_len, window, causal, want_window", [
    (10, 10, 4, True, (3, 0)),    # a prefill longer than the window
    (1, 10, 4, True, (3, 0)),     # a decode query: the last 4 keys
    (10, 10, 10, True, None),     # the window hides nothing (transformers then builds no mask)
    (10, 10, 9, True, (8, 0)),
    (10, 10, 4, False, None),     # a bidirectional layer: the mask (here none) decides, as for sdpa
])
def test_sliding_window_without_a_mask(hf, kernel, q_len, kv_len, window, causal, want_window):
    # transformers builds no mask when the window hides nothing; where a caller passes
    # sliding_window without a mask anyway, the integration does what flash attention does with it.
    torch, integ = hf.torch, hf.integ
    module = make_module(torch, is_causal=causal)
    query, key, value = make_qkv(torch, seqlen_q=q_len, seqlen_k=kv_len)
    out, _ = integ.attention_forward(module, query, key, value, None, sliding_window=window)
    (call,) = kernel.calls
    assert call.window_size == (want_window or (-1, -1)) and call.causal is (causal and q_len > 1)
    if causal:
        want_mask = sdpa_style_mask(hf, torch.ones(2, kv_len, dtype=torch.long), q_len, kv_len, window=window)
        close(torch, out, hf.sdpa(module, query, key, value, want_mask)[0])
    else:
        close(torch, out, hf.sdpa(module, query, key, value, None)[0])


@pytest.mark.parametrize("q_len, kv_len, window", [
    (9, 9, 3), (9, 9, 1), (9, 9, 8), (4, 9, 3), (1, 9, 3), (1, 9, 1),  # windows that hide keys
    (9, 9, 9), (9, 9, 20), (4, 9, 9), (1, 9, 9),  # windows that hide nothing
])
def test_sliding_window_masks_run_the_kernel_with_the_window(hf, kernel, q_len, kv_len, window):
    # transformers' own sliding-window masks without padding (prefill, a chunk after a cache, a decode
    # step), boolean and additive, and with a static cache's unused tail: the dense kernel with
    # window_size=(window - 1, 0) read from the mask, no fallback, sdpa's result.
    torch, integ = hf.torch, hf.integ
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=q_len, seqlen_k=kv_len + 5)
    used = sdpa_style_mask(hf, torch.ones(2, kv_len, dtype=torch.long), q_len, kv_len, window=window)
    tail = torch.zeros(2, 1, q_len, kv_len + 5, dtype=torch.bool)
    tail[..., :kv_len] = used
    want_window = (window - 1, 0) if window < kv_len else (-1, -1)
    for mask, keys in ((used, kv_len), (additive(torch, used), kv_len), (tail, kv_len + 5)):
        k, v = key[:, :, :keys], value[:, :, :keys]
        integ.reset_stats()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback
            out, _ = integ.attention_forward(module, query, k, v, mask)
        assert integ.stats() == {"kernel": 1}
        call = kernel.calls[-1]
        assert call.window_size == want_window and call.causal is (q_len > 1) and call.k.shape[1] == kv_len
        close(torch, out, hf.sdpa(module, query, k, v, mask)[0])


@pytest.mark.parametrize("side", ["left", "right", "empty_row"])
@pytest.mark.parametrize("q_len", [9, 4, 1])
def test_sliding_window_padding_masks_run_the_varlen_kernel(hf, varlen, kernel, side, q_len):
    # transformers' sliding-window masks with left or right padding: the varlen kernel with the window
    # over each row's kept tokens (which are contiguous), softcap passed along; every kept query as
    # sdpa / Gemma 2's eager attention computes it.
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS[side])
    module = make_module(torch)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=q_len, seqlen_k=9)
    mask = sdpa_style_mask(hf, padding, q_len, 9, window=3)
    queries = padding.bool()[:, 9 - q_len:]
    for softcap in (None, 1.5):
        integ.reset_stats()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback
            out, _ = integ.attention_forward(module, query, key, value, mask, scaling=0.4, softcap=softcap)
        if softcap is None:
            want, _ = hf.sdpa(module, query, key, value, mask, scaling=0.4)
        else:
            want, _ = gemma2_eager(hf)(module, query, key, value, additive(torch, mask), scaling=0.4, softcap=softcap)
        close(torch, out[queries], want[queries])
        assert not out[~queries].any()
        if q_len == 1 and integ.stats() == {"kernel": 1}:
            # Left padding: every row's one query sees the same three keys, a plain sliding-window mask
            # for the dense kernel.
            assert side == "left"
            call = kernel.calls[-1]
            assert call.causal is False and call.window_size == (2, 0) and call.softcap == (softcap or 0.0)
            continue
        assert integ.stats() == {"varlen": 1}
        call = varlen.calls[-1]
        assert call.softcap == (softcap or 0.0)
        if q_len == 1:  # one query per row: "full", each row's query and the keys it sees
            assert call.causal is False and call.window_size == (-1, -1)
            assert call.cu_seqlens_k == [0] + mask[:, 0, 0].sum(1).cumsum(0).tolist()
        else:
            assert call.causal is True and call.window_size == (2, 0)
            assert call.cu_seqlens_q == [0] + queries.sum(1).cumsum(0).tolist()
            # The kept keys: those some query of the row sees (a window's out-of-reach cache is dropped).
            assert call.cu_seqlens_k == [0] + mask[:, 0].any(1).sum(1).cumsum(0).tolist()


def test_padding_layout_of_sliding_window_masks(hf):
    # The window is read from the mask in kept tokens; None when it hides nothing.
    torch, integ = hf.torch, hf.integ
    padding = torch.tensor(PADDINGS["left"])  # rows keep 7, 9 and 3 tokens
    for window, want in ((1, 0), (3, 2), (8, 7), (9, None), (20, None)):
        mask = sdpa_style_mask(hf, padding, 9, 9, window=window)
        got_causal, queries, keys, left = integ._padding_layout(torch, mask)
        assert got_causal is True and left == want, (window, left)
        assert torch.equal(queries, padding.bool()) and torch.equal(keys, padding.bool())
    # A chunk of 4 after 5 cached positions with window 3: keys 0..2 are out of every window, not kept.
    got_causal, queries, keys, left = integ._padding_layout(torch, sdpa_style_mask(hf, padding, 4, 9, window=3))
    assert got_causal is True and left == 2
    assert torch.equal(keys, padding.bool() & (torch.arange(9) >= 3))


def test_softcap_fallbacks_compute_the_softcapped_attention(hf, kernel):
    # torch SDPA has no softcap (transformers' sdpa integration refuses it): a fallback with softcap
    # computes Gemma 2's eager attention in plain torch instead, with the mask.
    torch, integ = hf.torch, hf.integ
    module = make_module(torch)
    eager = gemma2_eager(hf)
    query, key, value = make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9)
    padding = torch.tensor(PADDINGS["middle"])
    # A padding mask on CPU tensors (no varlen there), and padding inside a sliding window.
    for n, mask in enumerate((sdpa_style_mask(hf, padding, 9, 9), sdpa_style_mask(hf, padding, 9, 9, window=3)), 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, _ = integ.attention_forward(module, query, key, value, mask, scaling=0.5, softcap=2.0)
        assert [str(w.message) for w in caught if issubclass(w.category, integ.FallbackWarning)][0].count("softcap")
        want, _ = eager(module, query, key, value, additive(torch, mask), scaling=0.5, softcap=2.0)
        queries = padding.bool()
        close(torch, out[queries], want[queries])
        assert out.shape == (3, 9, 4, 16) and out.is_contiguous()
    assert kernel.calls == []
    assert integ.stats()["sdpa_fallback"] == 2
    # No mask, fewer keys than queries: sdpa's top-left causal mask, with the cap.
    query, key, value = make_qkv(torch, seqlen_q=6, seqlen_k=4)
    with pytest.warns(integ.FallbackWarning, match="fewer keys"):
        out, _ = integ.attention_forward(module, query, key, value, None, softcap=3.0)
    top_left = torch.ones(6, 4, dtype=torch.bool).tril().expand(2, 1, 6, 4)
    close(torch, out, eager(module, query, key, value, additive(torch, top_left), scaling=0.25, softcap=3.0)[0])
    # The fallback is differentiable (training with a mask it cannot take).
    q, k, v = (t.detach().clone().requires_grad_(True) for t in make_qkv(torch, batch=3, seqlen_q=9, seqlen_k=9))
    mask = sdpa_style_mask(hf, padding, 9, 9)
    integ.attention_forward(module, q, k, v, mask, softcap=2.0)[0].sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


# --- a tiny Llama: shared by the CPU end-to-end test and the GPU tests ------------------------------


def tiny_llama_pair(hf, device, dtype, hidden=256, heads=4, kv_heads=2, head_dim=64, layers=2, vocab=1000, seed=0):
    """The same random weights as attn_implementation "hopattn" and "sdpa" (no downloads)."""
    torch, transformers = hf.torch, hf.transformers
    hf.integ.register()
    cfg = transformers.LlamaConfig(
        hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, num_hidden_layers=layers, vocab_size=vocab, max_position_embeddings=512,
    )
    torch.manual_seed(seed)
    models = {}
    for name in ("hopattn", "sdpa"):
        # from_config writes the implementation into the config it is given: one copy each.
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=name)
        models[name] = model
    models["sdpa"].load_state_dict(models["hopattn"].state_dict())
    for model in models.values():
        model.to(device=device, dtype=dtype).eval()
    assert models["hopattn"].config._attn_implementation == "hopattn"
    assert models["sdpa"].config._attn_implementation == "sdpa"
    return models["hopattn"], models["sdpa"]


def padding_mask(torch, batch, seqlen, side, device):
    mask = torch.ones(batch, seqlen, dtype=torch.long, device=device)
    if side == "left":
        mask[0, :5] = 0
    else:
        mask[-1, seqlen - 4:] = 0
    return mask


def greedy(model, ids, steps, **kwargs):
    out = model.generate(ids, attention_mask=kwargs.pop("attention_mask", None), max_new_tokens=steps,
                         min_new_tokens=steps, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                         output_scores=True, **kwargs)
    return out.sequences, out.scores


def padding_labels(ids, mask):
    """Causal-LM labels that read only kept positions: -100 at a padding token and at the token right
    after one (transformers shifts labels by one, so that token's logits are a padding position's)."""
    before = mask.roll(1, dims=1)
    before[:, 0] = 1
    return ids.masked_fill((mask == 0) | (before == 0), -100)


def train_step(hf, model, ids, **kwargs):
    """One forward and backward of `model` (train mode, attention_dropout 0.0, so no dropout reaches
    the attention function) with labels; returns (loss, {name: float32 gradient}, stats())."""
    integ = hf.integ
    model.train()
    model.zero_grad(set_to_none=True)
    integ.reset_stats()
    try:
        loss = model(ids, **kwargs).loss
        loss.backward()
        grads = {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    return loss.detach().float(), grads, integ.stats()


def cpu_llama(hf):
    """The tiny Llama pair in float32 on the CPU (the CPU end-to-end tests) and a (2, 20) batch."""
    torch = hf.torch
    model_h, model_s = tiny_llama_pair(hf, "cpu", torch.float32, hidden=64, head_dim=16, vocab=100)
    ids = torch.randint(3, 100, (2, 20), generator=torch.Generator().manual_seed(1))
    return model_h, model_s, model_h.config.num_hidden_layers, ids


def test_tiny_llama_cpu_end_to_end(hf, kernel):
    # float32 on the CPU, the kernel replaced by reference_attention: checks the integration inside
    # transformers' real models, masks and caches. The GPU tests below run the real kernels.
    torch, integ = hf.torch, hf.integ
    model_h, model_s, layers, ids = cpu_llama(hf)
    with torch.no_grad():
        # No mask, and an all-ones mask (transformers then builds none): the kernel, causal.
        for mask in (None, torch.ones_like(ids)):
            integ.reset_stats()
            close(torch, model_h(ids, attention_mask=mask).logits, model_s(ids, attention_mask=mask).logits)
            assert integ.stats() == {"kernel": layers}
            assert kernel.calls[-1].causal is True and kernel.calls[-1].k.shape[2] == 2  # GQA, no repeat
        # Padding on CPU tensors (the varlen kernel takes CUDA tensors): every layer falls back to
        # SDPA with the mask. test_tiny_llama_cpu_varlen_end_to_end runs the varlen route.
        for side in ("left", "right"):
            integ.reset_stats()
            mask = padding_mask(torch, 2, 20, side, "cpu")
            with pytest.warns(integ.FallbackWarning, match="non-CUDA"):  # reset_stats() re-arms it
                got = model_h(ids, attention_mask=mask).logits
            assert torch.equal(got, model_s(ids, attention_mask=mask).logits)
            assert integ.stats() == {"sdpa_fallback": layers, "sdpa_fallback:padding_mask_not_cuda": layers}
        # Chunked prefill into a dynamic cache: the second chunk's mask is bottom-right causal.
        integ.reset_stats()
        calls = len(kernel.calls)
        past_h = model_h(ids[:, :12], use_cache=True).past_key_values
        past_s = model_s(ids[:, :12], use_cache=True).past_key_values
        # transformers 5 renamed the argument past_key_values to cache.
        cache_arg = "cache" if "cache" in inspect.signature(model_h.forward).parameters else "past_key_values"
        close(torch, model_h(ids[:, 12:], **{cache_arg: past_h}).logits,
              model_s(ids[:, 12:], **{cache_arg: past_s}).logits)
        assert integ.stats() == {"kernel": 2 * layers}
        second = kernel.calls[calls + layers]
        assert second.causal is True and second.q.shape[1] == 8 and second.k.shape[1] == 20
        # Greedy generation with the KV cache, dynamic and static (8 steps: the CPU is slow at this;
        # the GPU test does 32).
        for cache in (None, "static"):
            integ.reset_stats()
            extra = {} if cache is None else {"cache_implementation": cache}
            seq_h, _ = greedy(model_h, ids, 8, attention_mask=torch.ones_like(ids), **extra)
            seq_s, _ = greedy(model_s, ids, 8, attention_mask=torch.ones_like(ids), **extra)
            assert torch.equal(seq_h, seq_s) and seq_h.shape == (2, 28)
            assert integ.stats() == {"kernel": 8 * layers}
        # Left-padded generation on CPU tensors: every step falls back (the mask keeps the padding).
        integ.reset_stats()
        mask = padding_mask(torch, 2, 20, "left", "cpu")
        with pytest.warns(integ.FallbackWarning, match="non-CUDA"):
            seq_h, _ = greedy(model_h, ids, 3, attention_mask=mask)
        seq_s, _ = greedy(model_s, ids, 3, attention_mask=mask)
        assert torch.equal(seq_h, seq_s)
        assert integ.stats() == {"sdpa_fallback": 3 * layers, "sdpa_fallback:padding_mask_not_cuda": 3 * layers}


def test_tiny_llama_cpu_varlen_end_to_end(hf, varlen):
    # The varlen route inside transformers' real model, masks and caches, on the CPU (float32,
    # hopattn.varlen_attention replaced by reference_varlen, the CUDA check by "yes"): padded batches,
    # left and right, give sdpa's logits at every kept position, and left-padded greedy generation
    # (dynamic and static cache) gives sdpa's tokens. The GPU tests below run the real kernel.
    torch, integ = hf.torch, hf.integ
    model_h, model_s, layers, ids = cpu_llama(hf)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)  # nothing falls back
        for side in ("left", "right"):
            integ.reset_stats()
            mask = padding_mask(torch, 2, 20, side, "cpu")
            got = model_h(ids, attention_mask=mask).logits
            want = model_s(ids, attention_mask=mask).logits
            assert integ.stats() == {"varlen": layers}
            keep = mask.bool()
            close(torch, got[keep], want[keep])
            call = varlen.calls[-1]
            assert call.causal is True
            # left: row 0 keeps its last 15 tokens; right: row 1 its first 16.
            assert call.cu_seqlens_q == call.cu_seqlens_k == ([0, 15, 35] if side == "left" else [0, 20, 36])
        for cache in (None, "static"):
            integ.reset_stats()
            extra = {} if cache is None else {"cache_implementation": cache}
            mask = padding_mask(torch, 2, 20, "left", "cpu")
            seq_h, scores_h = greedy(model_h, ids, 4, attention_mask=mask, **extra)
            seq_s, scores_s = greedy(model_s, ids, 4, attention_mask=mask, **extra)
            assert torch.equal(seq_h, seq_s)
            for a, b in zip(scores_h, scores_s):
                close(torch, a, b)
            # Prefill (causal, row 0 keeps 15 of 20) and 3 decode steps (one query, all kept keys).
            assert integ.stats() == {"varlen": 4 * layers}
            prefill, last = varlen.calls[-4 * layers], varlen.calls[-1]
            assert prefill.causal is True and prefill.cu_seqlens_q == [0, 15, 35]
            assert last.causal is False and last.cu_seqlens_q == [0, 1, 2] and last.cu_seqlens_k == [0, 18, 41]


@pytest.mark.parametrize("side", ["left", "right"])
def test_tiny_llama_cpu_varlen_training_step(hf, varlen, side):
    # Training with padding on the varlen route (CPU, float32, the stand-in's plain-torch reference
    # is differentiable like varlen_attention): every layer runs varlen in the forward, and the loss
    # and every parameter gradient are sdpa's. test_gpu_training_step_left_padded_matches_sdpa runs
    # the real kernels.
    torch, integ = hf.torch, hf.integ
    model_h, model_s, layers, ids = cpu_llama(hf)
    mask = padding_mask(torch, 2, 20, side, "cpu")
    labels = padding_labels(ids, mask)
    with warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)  # nothing falls back
        loss_h, grads_h, stats = train_step(hf, model_h, ids, attention_mask=mask, labels=labels)
    assert stats == {"varlen": layers}
    assert len(varlen.calls) == layers and all(call.q.requires_grad for call in varlen.calls)
    loss_s, grads_s, _ = train_step(hf, model_s, ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(loss_h, loss_s, atol=1e-5, rtol=1e-5)
    assert grads_h.keys() == grads_s.keys() and len(grads_s) == len(list(model_s.parameters()))
    for name, want in grads_s.items():
        torch.testing.assert_close(grads_h[name], want, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


# --- tiny Gemma 2 and Mistral: sliding windows and softcap, against "eager" -----------------------------

WINDOW = 8  # the models' sliding_window; their sequences are 32 tokens, so the windows hide keys
SOFTCAP = 2.0  # Gemma 2's attn_logit_softcapping, small enough to change these models' scores


def tiny_window_pair(hf, family, device, dtype, head_dim=64, vocab=1000, seed=0, reference="eager"):
    """The same random weights as attn_implementation "hopattn" and `reference` (no downloads), for
    family "gemma2" (2 layers: a sliding-window one, then a full-attention one; attention softcap
    SOFTCAP, Gemma 2's final logit softcap; query and key projections scaled up so that the softcap
    matters) or "mistral" (2 layers, every one with the sliding window). Returns (hopattn model,
    reference model, the indices of the sliding layers)."""
    torch, transformers = hf.torch, hf.transformers
    hf.integ.register()
    hidden = 4 * head_dim
    common = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=head_dim, vocab_size=vocab, max_position_embeddings=512, sliding_window=WINDOW,
                  attention_dropout=0.0)
    if family == "gemma2":
        cfg = transformers.Gemma2Config(num_hidden_layers=2, query_pre_attn_scalar=head_dim,
                                        attn_logit_softcapping=SOFTCAP, **common)
        sliding = [i for i, t in enumerate(cfg.layer_types) if t == "sliding_attention"]
        assert sliding == [0]
    else:
        cfg = transformers.MistralConfig(num_hidden_layers=2, **common)
        sliding = [0, 1]
    torch.manual_seed(seed)
    models = {}
    for name in ("hopattn", reference):
        models[name] = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=name)
    if family == "gemma2":
        # Query and key projections as if initialised at std 0.8 / sqrt(hidden) rather than 0.02:
        # attention scores large enough for the softcap to change the logits by several percent,
        # the rest (and so the logits' size, and their bf16 rounding) as initialised.
        with torch.no_grad():
            for layer in models["hopattn"].model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                    proj.weight.mul_(0.8 / hidden**0.5 / cfg.initializer_range)
    models[reference].load_state_dict(models["hopattn"].state_dict())
    for model in models.values():
        model.to(device=device, dtype=dtype).eval()
    assert models["hopattn"].config._attn_implementation == "hopattn"
    return models["hopattn"], models[reference], sliding


def check_window_calls(calls, layers, sliding, family, want_window=(WINDOW - 1, 0)):
    """The last `layers` recorded kernel calls (one forward): the sliding layers ran with the window
    (when the window hides keys there: want_window), the others without; Gemma 2's all with its softcap."""
    assert len(calls) >= layers
    for layer, call in enumerate(calls[-layers:]):
        assert call.window_size == (want_window if layer in sliding else (-1, -1)), (layer, call.window_size)
        assert call.softcap == (SOFTCAP if family == "gemma2" else 0.0), (layer, call.softcap)


@pytest.mark.parametrize("family", ["gemma2", "mistral"])
def test_tiny_window_models_cpu_end_to_end(hf, varlen, family):
    # float32 on the CPU, the kernels replaced by their plain-torch contracts (window and softcap
    # included): Gemma 2 (softcap, alternating sliding/full layers) and Mistral (sliding window in
    # every layer) with "hopattn" give "eager"'s logits without and with padding (left and right),
    # in a chunked prefill, and greedy generate()'s tokens (dynamic cache, also left-padded), every
    # layer on hopattn's kernels: nothing falls back, the sliding layers get window_size=(7, 0).
    torch, integ = hf.torch, hf.integ
    model_h, model_e, sliding = tiny_window_pair(hf, family, "cpu", torch.float32, head_dim=16, vocab=100)
    layers = model_h.config.num_hidden_layers
    ids = torch.randint(3, 100, (2, 32), generator=torch.Generator().manual_seed(1))

    def near(got, want):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)  # nothing falls back
        for mask in (None, torch.ones_like(ids)):
            integ.reset_stats()
            near(model_h(ids, attention_mask=mask).logits, model_e(ids, attention_mask=mask).logits)
            assert integ.stats() == {"kernel": layers}
            check_window_calls(varlen.kernel.calls, layers, sliding, family)
        for side in ("left", "right"):
            integ.reset_stats()
            mask = padding_mask(torch, 2, 32, side, "cpu")
            got = model_h(ids, attention_mask=mask).logits
            assert integ.stats() == {"varlen": layers}
            check_window_calls(varlen.calls, layers, sliding, family)
            keep = mask.bool()
            near(got[keep], model_e(ids, attention_mask=mask).logits[keep])
        # Chunked prefill into a dynamic cache: 20 tokens, then 12 against the cache (a sliding layer
        # keeps the last 7 keys: 19 keys for 12 queries, window (7, 0)).
        integ.reset_stats()
        cache_arg = "cache" if "cache" in inspect.signature(model_h.forward).parameters else "past_key_values"
        past_h = model_h(ids[:, :20], use_cache=True)
        past_e = model_e(ids[:, :20], use_cache=True)
        past_h = getattr(past_h, "cache", None) or past_h.past_key_values
        past_e = getattr(past_e, "cache", None) or past_e.past_key_values
        near(model_h(ids[:, 20:], **{cache_arg: past_h}).logits, model_e(ids[:, 20:], **{cache_arg: past_e}).logits)
        assert integ.stats() == {"kernel": 2 * layers}
        check_window_calls(varlen.kernel.calls, layers, sliding, family)
        for layer in sliding:
            assert varlen.kernel.calls[-layers + layer].k.shape[1] == WINDOW - 1 + 12
        # Greedy generation, 10 steps (the sliding layers' caches wrap), without and with left padding.
        for mask in (torch.ones_like(ids), padding_mask(torch, 2, 32, "left", "cpu")):
            integ.reset_stats()
            seq_h, scores_h = greedy(model_h, ids, 10, attention_mask=mask)
            seq_e, scores_e = greedy(model_e, ids, 10, attention_mask=mask)
            assert torch.equal(seq_h, seq_e) and seq_h.shape == (2, 42)
            for a, b in zip(scores_h, scores_e):
                near(a, b)
            stats = integ.stats()
            assert set(stats) <= {"kernel", "varlen"} and sum(stats.values()) == 10 * layers, stats


def test_tiny_gemma2_softcap_and_window_matter(hf, kernel):
    # The models above would not test much if the softcap or the window changed nothing: "eager"
    # without either gives clearly different logits.
    torch = hf.torch
    model_h, model_e, _ = tiny_window_pair(hf, "gemma2", "cpu", torch.float32, head_dim=16, vocab=100)
    ids = torch.randint(3, 100, (2, 32), generator=torch.Generator().manual_seed(1))
    from hopattn_test_support import rel_l2

    with torch.no_grad():
        want = model_e(ids).logits
        for change in ({"attn_logit_softcapping": None}, {"sliding_window": 4096}):
            other = copy.deepcopy(model_e)
            for key, value in change.items():
                setattr(other.config, key, value)
                for layer in other.model.layers:
                    if key == "attn_logit_softcapping":
                        layer.self_attn.attn_logit_softcapping = value
                    elif layer.self_attn.sliding_window is not None:
                        layer.self_attn.sliding_window = value
            assert rel_l2(other(ids).logits, want) > 1e-2, change


@pytest.mark.parametrize("family", ["gemma2", "mistral"])
def test_tiny_window_models_cpu_training_step(hf, varlen, family):
    # A training step (forward and backward) with a left-padded batch on the varlen route, with
    # window and softcap: the loss and every parameter gradient are eager's.
    torch, integ = hf.torch, hf.integ
    model_h, model_e, sliding = tiny_window_pair(hf, family, "cpu", torch.float32, head_dim=16, vocab=100)
    layers = model_h.config.num_hidden_layers
    ids = torch.randint(3, 100, (2, 32), generator=torch.Generator().manual_seed(1))
    mask = padding_mask(torch, 2, 32, "left", "cpu")
    labels = padding_labels(ids, mask)
    with warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)
        loss_h, grads_h, stats = train_step(hf, model_h, ids, attention_mask=mask, labels=labels)
    assert stats == {"varlen": layers} and all(call.q.requires_grad for call in varlen.calls)
    check_window_calls(varlen.calls, layers, sliding, family)
    loss_e, grads_e, _ = train_step(hf, model_e, ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(loss_h, loss_e, atol=1e-5, rtol=1e-5)
    assert grads_h.keys() == grads_e.keys() and len(grads_e) == len(list(model_e.parameters()))
    for name, want in grads_e.items():
        torch.testing.assert_close(grads_h[name], want, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


class LibraryCpuReference:
    """Stands in for hopattn.attention / hopattn.varlen_attention on CPU torch tensors: the same call
    on numpy copies (float32), through the library's own CPU reference (window_size and softcap
    included; forward only), the result back as a torch tensor in q's dtype."""

    def __init__(self, function):
        self.function = function
        self.calls = 0

    def __call__(self, *args, **kwargs):
        import torch

        def numpy(x):
            if not isinstance(x, torch.Tensor):
                return x
            x = x.detach()
            return (x.float() if x.is_floating_point() else x).contiguous().numpy()

        self.calls += 1
        out = self.function(*[numpy(a) for a in args], **{k: numpy(v) for k, v in kwargs.items()})
        return torch.from_numpy(out).to(args[0].dtype)


@pytest.fixture
def library_cpu(hf, fresh_stats, monkeypatch):
    """Both kernels replaced by LibraryCpuReference (and the varlen route's CUDA check by "yes"); skips
    without a loadable library (fails instead under --require-library)."""
    from hopattn_test_support import require_library_or_skip_module

    require_library_or_skip_module()
    dense, varlen = LibraryCpuReference(hopattn.attention), LibraryCpuReference(hopattn.varlen_attention)
    monkeypatch.setattr(hopattn, "attention", dense)
    monkeypatch.setattr(hopattn, "varlen_attention", varlen)
    monkeypatch.setattr(hf.integ, "_varlen_device_ok", lambda *tensors: True)
    return types.SimpleNamespace(dense=dense, varlen=varlen)


@pytest.mark.parametrize("family", ["gemma2", "mistral"])
def test_tiny_window_models_on_the_library_cpu_reference(hf, library_cpu, family):
    # The window convention and softcap end to end against the library itself, on the CPU: the tiny
    # Gemma 2 / Mistral with "hopattn" running the library's CPU reference (its window_size and
    # softcap semantics, not this file's stand-ins) give "eager"'s logits, without and with padding,
    # and its greedy tokens, with nothing falling back.
    torch, integ = hf.torch, hf.integ
    model_h, model_e, _ = tiny_window_pair(hf, family, "cpu", torch.float32, head_dim=16, vocab=100)
    layers = model_h.config.num_hidden_layers
    ids = torch.randint(3, 100, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)
        for side in (None, "left", "right"):
            mask = None if side is None else padding_mask(torch, 2, 32, side, "cpu")
            integ.reset_stats()
            got = model_h(ids, attention_mask=mask).logits
            assert integ.stats() == {"kernel" if mask is None else "varlen": layers}
            keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
            torch.testing.assert_close(got[keep], model_e(ids, attention_mask=mask).logits[keep], atol=1e-4, rtol=1e-4)
        mask = padding_mask(torch, 2, 32, "left", "cpu")
        seq_h, _ = greedy(model_h, ids, 6, attention_mask=mask)
        seq_e, _ = greedy(model_e, ids, 6, attention_mask=mask)
        assert torch.equal(seq_h, seq_e)
    assert library_cpu.dense.calls > 0 and library_cpu.varlen.calls > 0


# --- GPU: the real kernels -----------------------------------------------------------------------------


def sm90_kernel_pair(hf, want_backward):
    """(dtype, head_dim) of a built kernel (gpu_kernel_pair, head_dim 64 preferred); skips without an
    sm_90 GPU."""
    torch = hf.torch
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        pytest.skip("needs an sm_90 GPU")
    from hopattn_test_support import gpu_kernel_pair

    return gpu_kernel_pair(want_backward=want_backward, prefer_head_dim=64)


@pytest.fixture(scope="module")
def gpu_pair(hf):
    dtype, head_dim = sm90_kernel_pair(hf, want_backward=True)
    model_h, model_s = tiny_llama_pair(hf, "cuda", dtype, hidden=4 * head_dim, head_dim=head_dim)
    return types.SimpleNamespace(device="cuda", dtype=dtype, model_h=model_h, model_s=model_s,
                                 layers=model_h.config.num_hidden_layers)


def ulp(torch, x, dtype):
    """The spacing of `dtype` numbers at |x| (elementwise)."""
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(1e-30))))


def assert_logits_close(torch, got, want, what):
    from hopattn_test_support import rel_l2

    got, want = got.float(), want.float()
    err = rel_l2(got, want)
    assert err < 2e-2, f"{what}: relative L2 error {err:.3g}"
    torch.testing.assert_close(got, want, atol=5e-2, rtol=2e-2, msg=lambda m: f"{what}: {m}")


def test_gpu_logits_match_sdpa_without_mask(hf, gpu_pair):
    torch, integ = hf.torch, hf.integ
    gen = torch.Generator(device=gpu_pair.device).manual_seed(0)
    ids = torch.randint(3, 1000, (2, 64), device=gpu_pair.device, generator=gen)
    with torch.no_grad():
        for mask in (None, torch.ones_like(ids)):
            integ.reset_stats()
            got = gpu_pair.model_h(ids, attention_mask=mask).logits
            assert integ.stats() == {"kernel": gpu_pair.layers}  # hopattn's kernel ran in every layer
            want = gpu_pair.model_s(ids, attention_mask=mask).logits
            assert_logits_close(torch, got, want, f"mask={'ones' if mask is not None else None}")


@pytest.mark.parametrize("side", ["left", "right"])
def test_gpu_logits_match_sdpa_with_padding_mask(hf, gpu_pair, side):
    # A padding mask runs hopattn's variable-length kernel in every layer (no gradient required): the
    # logits of every kept position are sdpa's.
    torch, integ = hf.torch, hf.integ
    gen = torch.Generator(device=gpu_pair.device).manual_seed(1)
    ids = torch.randint(3, 1000, (2, 64), device=gpu_pair.device, generator=gen)
    mask = padding_mask(torch, 2, 64, side, gpu_pair.device)
    integ.reset_stats()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)
        got = gpu_pair.model_h(ids, attention_mask=mask).logits
        assert integ.stats() == {"varlen": gpu_pair.layers}
        want = gpu_pair.model_s(ids, attention_mask=mask).logits
    keep = mask.bool()  # logits of padding positions are not meaningful (hopattn's padding rows are 0)
    assert_logits_close(torch, got[keep], want[keep], f"{side} padding")


@pytest.fixture(scope="module")
def gpu_kernel(hf):
    dtype, head_dim = sm90_kernel_pair(hf, want_backward=False)
    return types.SimpleNamespace(dtype=dtype, head_dim=head_dim)


def gpu_padding(torch, side, batch, kv_len):
    """(batch, kv_len) 0/1 padding masks of several lengths (longer than a kernel tile), and one
    row without padding."""
    padding = torch.ones(batch, kv_len, dtype=torch.long)
    for b, pad in enumerate([0, 37, 150, kv_len - 3][:batch]):
        if side == "left":
            padding[b, :pad] = 0
        elif side == "right":
            padding[b, kv_len - pad:] = 0
        else:  # a hole in the middle
            padding[b, pad // 2: pad // 2 + pad // 3] = 0
    return padding


GPU_CASES = [
    # (side, q_len, kv_len, module causal): prefill, a chunk after a cache, a decode step, bidirectional.
    ("left", 300, 300, True), ("right", 300, 300, True), ("middle", 300, 300, True),
    ("left", 70, 300, True), ("right", 70, 300, True), ("left", 1, 300, True), ("middle", 1, 300, True),
    ("left", 300, 300, False), ("right", 300, 300, False),
]


@pytest.mark.parametrize("side, q_len, kv_len, causal", GPU_CASES)
def test_gpu_padding_mask_attention_matches_sdpa_math(hf, gpu_kernel, fresh_stats, side, q_len, kv_len, causal):
    # attention_forward on CUDA tensors with transformers' own padding masks: hopattn's varlen kernel,
    # against sdpa's math (float32, the same inputs and mask) at every kept query; padding rows 0.
    torch, integ = hf.torch, hf.integ
    from hopattn_test_support import rel_l2

    batch, heads_q, heads_kv, d = 4, 4, 2, gpu_kernel.head_dim
    padding = gpu_padding(torch, side, batch, kv_len)
    mask = sdpa_style_mask(hf, padding, q_len, kv_len, causal).cuda()
    gen = torch.Generator(device="cuda").manual_seed(6)

    def rand(h, s):  # as Llama makes them: (batch, seq, heads, dim) projections, transposed
        return torch.randn(batch, s, h, d, device="cuda", generator=gen, dtype=gpu_kernel.dtype).transpose(1, 2)

    query, key, value = rand(heads_q, q_len), rand(heads_kv, kv_len), rand(heads_kv, kv_len)
    module = make_module(torch, is_causal=causal)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)
        out, _ = integ.attention_forward(module, query, key, value, mask)
    assert integ.stats() == {"varlen": 1}
    assert out.shape == (batch, q_len, heads_q, d) and out.dtype == gpu_kernel.dtype and out.is_contiguous()
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        want, _ = hf.sdpa(module, query.float(), key.float(), value.float(), mask)
    kept = padding.bool()[:, kv_len - q_len:].cuda() if causal and q_len > 1 else torch.ones(
        batch, q_len, dtype=torch.bool, device="cuda")
    got = out[kept].float()
    err = rel_l2(got, want[kept])
    assert err < 1e-2, f"relative L2 error {err:.3g}"
    torch.testing.assert_close(got, want[kept], atol=2e-2, rtol=2e-2)
    assert not out[~kept].any()


def check_greedy_matches_sdpa(hf, gpu_pair, ids, mask, steps, route, **generate_kwargs):
    """Greedy generate() with hopattn against gpu_pair.model_s, sdpa or another reference (see
    test_gpu_generate_greedy_tokens_match_sdpa); route: the stats() key every layer of every step
    must have counted ("kernel" or "varlen"), or a set of keys each layer of each step counted one of
    (nothing falls back either way)."""
    torch, integ = hf.torch, hf.integ
    routes = {route} if isinstance(route, str) else set(route)
    dtype = gpu_pair.dtype
    prompt = ids.shape[1]
    integ.reset_stats()
    with torch.no_grad():
        seq_h, scores_h = greedy(gpu_pair.model_h, ids, steps, attention_mask=mask, **generate_kwargs)
        if generate_kwargs.get("cache_implementation") == "static":
            # generate() compiles the static-cache decode step on CUDA (transformers' default
            # compile config); the compiled graph calls the kernel without running the
            # integration's Python counters (H200: {'varlen': 2}, the eager prefill's layers).
            # Still: the prefill counted `route` in every layer and nothing fell back.
            stats = integ.stats()
            assert stats and set(stats) <= routes and sum(stats.values()) >= gpu_pair.layers, stats
        else:
            stats = integ.stats()
            assert set(stats) <= routes and sum(stats.values()) == steps * gpu_pair.layers, stats
        seq_s, scores_s = greedy(gpu_pair.model_s, ids, steps, attention_mask=mask, **generate_kwargs)
        assert seq_h.shape == seq_s.shape == (ids.shape[0], prompt + steps)
        for row in range(ids.shape[0]):
            differ = (seq_h[row, prompt:] != seq_s[row, prompt:]).nonzero()
            if len(differ) == 0:
                continue
            t = differ[0].item()
            s = scores_s[t][row].float()
            a, b = seq_s[row, prompt + t], seq_h[row, prompt + t]
            tol = 4 * ulp(torch, s.max(), dtype)
            assert s[a] - s[b] <= tol, (
                f"row {row}: hopattn chose token {b.item()} at step {t}, sdpa {a.item()}, and sdpa's scores "
                f"for them differ by {(s[a] - s[b]).item():.4g} > {tol.item():.3g} (not a bf16 tie)"
            )
        # Teacher-forced: sdpa without a cache over hopattn's sequence, with generate()'s position ids
        # (counted over the kept tokens, as generate() derives them from the attention mask).
        full_mask = torch.cat([mask, torch.ones_like(seq_h[:, prompt:])], dim=1)
        position_ids = (full_mask.cumsum(-1) - 1).clamp_min(0)
        logits = gpu_pair.model_s(seq_h, attention_mask=full_mask, position_ids=position_ids).logits.float()
        eos = gpu_pair.model_s.generation_config.eos_token_id
        if eos is not None:  # min_new_tokens kept generate() from choosing it
            logits[..., torch.tensor(eos, device=logits.device).reshape(-1)] = float("-inf")
        chosen_logits = logits[:, prompt - 1:-1].gather(-1, seq_h[:, prompt:, None])[..., 0]  # (batch, steps)
        best = logits[:, prompt - 1:-1].amax(-1)
        tol = 8 * ulp(torch, best, dtype)
        bad = (best - chosen_logits > tol).nonzero().tolist()
        assert not bad, f"(row, step) where hopattn's token is not sdpa's greedy choice: {bad}"
    exact = torch.equal(seq_h, seq_s)
    print(f"{sorted(routes)}: greedy tokens identical to the reference's for all {steps} steps: {exact}")


def test_gpu_generate_greedy_tokens_match_sdpa(hf, gpu_pair):
    # 32 greedy tokens with the KV cache (prefill: causal kernel; each step: one query against the
    # cache) must equal sdpa's. In a random bf16 model, a step whose two best tokens are within a
    # rounding error of each other may go either way in any two correct implementations, so one
    # divergence is accepted only at such a tie (sdpa's own scores for the two tokens within 4
    # ulps of the step's largest score); after it the sequences are different texts. Independently,
    # every token hopattn chose must be sdpa's choice (up to such a tie) given hopattn's prefix,
    # checked against one cache-free sdpa forward over hopattn's whole sequence.
    torch = hf.torch
    gen = torch.Generator(device=gpu_pair.device).manual_seed(2)
    ids = torch.randint(3, 1000, (2, 16), device=gpu_pair.device, generator=gen)
    check_greedy_matches_sdpa(hf, gpu_pair, ids, torch.ones_like(ids), 32, "kernel")


def left_padded_batch(torch, device, seqlen, pads, seed):
    """(ids, attention_mask) of len(pads) rows of `seqlen` tokens, row b left-padded by pads[b] pad
    tokens (id 0)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(3, 1000, (len(pads), seqlen), device=device, generator=gen)
    mask = torch.ones_like(ids)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("cache", [None, "static"])
def test_gpu_generate_left_padded_greedy_tokens_match_sdpa(hf, gpu_pair, cache):
    # A left-padded batch (rows of 16, 11 and 4 real tokens): the prefill and every decode step keep
    # the padding in the mask, so every layer of every step runs the varlen kernel (prefill: causal
    # over each row's kept tokens; decode: one query against the row's kept keys). Same checks as above.
    ids, mask = left_padded_batch(hf.torch, gpu_pair.device, 16, [0, 5, 12], seed=4)
    extra = {} if cache is None else {"cache_implementation": cache}
    check_greedy_matches_sdpa(hf, gpu_pair, ids, mask, 24, "varlen", **extra)


def check_training_step_matches_sdpa(hf, gpu_pair, ids, route, **kwargs):
    """One training step (forward, backward) of the tiny Llama with "hopattn" and with "sdpa" on the
    same batch: every layer must have run `route` ("kernel" or "varlen"), the losses must agree to 1%
    and every parameter gradient to a relative L2 error of 5e-2 (bf16 weights and activations)."""
    from hopattn_test_support import rel_l2

    torch = hf.torch
    with warnings.catch_warnings():
        warnings.simplefilter("error", hf.integ.FallbackWarning)  # nothing falls back
        loss_h, grads_h, stats = train_step(hf, gpu_pair.model_h, ids, **kwargs)
    assert stats == {route: gpu_pair.layers}
    loss_s, grads_s, _ = train_step(hf, gpu_pair.model_s, ids, **kwargs)
    assert torch.isfinite(loss_h) and abs(loss_h - loss_s) <= 1e-2 * abs(loss_s), (loss_h.item(), loss_s.item())
    assert grads_h.keys() == grads_s.keys() and len(grads_s) == len(list(gpu_pair.model_s.parameters()))
    for n, want in grads_s.items():
        got = grads_h[n]
        assert torch.isfinite(got).all(), n
        assert rel_l2(got, want) < 5e-2, f"{n}: relative L2 {rel_l2(got, want):.3g}"


def test_gpu_backward(hf, gpu_pair):
    # No padding: the dense kernel's forward and backward in every layer.
    torch = hf.torch
    gen = torch.Generator(device=gpu_pair.device).manual_seed(3)
    ids = torch.randint(3, 1000, (2, 64), device=gpu_pair.device, generator=gen)
    check_training_step_matches_sdpa(hf, gpu_pair, ids, "kernel", labels=ids)


def test_gpu_training_step_left_padded_matches_sdpa(hf, gpu_pair):
    # Training with a left-padded batch (rows of 160, 155 and 60 real tokens: more than one 128-row
    # tile, and less): every layer runs the varlen kernel forward and its backward (backward_varlen),
    # and the loss and every parameter gradient match sdpa's with the same mask. The labels read
    # kept positions only (padding_labels), as a padded training batch does.
    ids, mask = left_padded_batch(hf.torch, gpu_pair.device, 160, [0, 5, 100], seed=5)
    check_training_step_matches_sdpa(hf, gpu_pair, ids, "varlen", attention_mask=mask,
                                     labels=padding_labels(ids, mask))


# --- GPU: tiny Gemma 2 and Mistral, sliding windows and softcap, against "eager" ---------------------------


@pytest.fixture(scope="module", params=["gemma2", "mistral"])
def gpu_window_pair(hf, request):
    """tiny_window_pair on the GPU in the kernels' dtype: "hopattn" (model_h) and "eager" (model_s, the
    name check_greedy_matches_sdpa and check_training_step_matches_sdpa read the reference from)."""
    dtype, head_dim = sm90_kernel_pair(hf, want_backward=False)
    model_h, model_e, sliding = tiny_window_pair(hf, request.param, "cuda", dtype, head_dim=head_dim)
    return types.SimpleNamespace(device="cuda", dtype=dtype, head_dim=head_dim, model_h=model_h, model_s=model_e,
                                 layers=model_h.config.num_hidden_layers, sliding=sliding, family=request.param)


def window_ids(torch, pair, side, seed):
    """(2, 32) token ids, and an attention mask: None, or padding_mask's left / right padding."""
    gen = torch.Generator(device=pair.device).manual_seed(seed)
    ids = torch.randint(3, 1000, (2, 32), device=pair.device, generator=gen)
    return ids, None if side is None else padding_mask(torch, 2, 32, side, pair.device)


@pytest.mark.parametrize("side", [None, "left", "right"])
def test_gpu_window_models_logits_match_eager(hf, gpu_window_pair, side):
    # 32 tokens, window 8: every layer on hopattn's kernels (the dense one without padding, the
    # varlen one with), the logits (at kept positions) are eager's.
    torch, integ = hf.torch, hf.integ
    pair = gpu_window_pair
    ids, mask = window_ids(torch, pair, side, seed=7)
    integ.reset_stats()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", integ.FallbackWarning)
        got = pair.model_h(ids, attention_mask=mask).logits
        assert integ.stats() == {"kernel" if mask is None else "varlen": pair.layers}
        want = pair.model_s(ids, attention_mask=mask).logits
    keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    assert_logits_close(torch, got[keep], want[keep], f"{pair.family}, padding {side}")


def test_gpu_sliding_window_runs_on_hopattn_without_fallback(hf, gpu_window_pair, monkeypatch):
    # The sliding-window layers no longer fall back to SDPA: no FallbackWarning, no "sdpa_fallback" in
    # stats(), and hopattn's kernels (dense and varlen) get window_size=(7, 0) on the sliding layers
    # (none on the full ones) and Gemma 2's softcap on every layer.
    torch, integ = hf.torch, hf.integ
    pair = gpu_window_pair
    calls = []

    def spy(function):
        def call(*args, **kwargs):
            calls.append((kwargs.get("window_size", (-1, -1)), kwargs.get("softcap", 0.0)))
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(hopattn, "attention", spy(hopattn.attention))
    monkeypatch.setattr(hopattn, "varlen_attention", spy(hopattn.varlen_attention))
    for side in (None, "left"):
        ids, mask = window_ids(torch, pair, side, seed=8)
        calls.clear()
        integ.reset_stats()
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pair.model_h(ids, attention_mask=mask)
        assert not [w for w in caught if issubclass(w.category, integ.FallbackWarning)]
        stats = integ.stats()
        assert not any(key.startswith("sdpa_fallback") for key in stats) and sum(stats.values()) == pair.layers
        softcap = SOFTCAP if pair.family == "gemma2" else 0.0
        assert calls == [((WINDOW - 1, 0) if layer in pair.sliding else (-1, -1), softcap)
                         for layer in range(pair.layers)], calls


@pytest.mark.parametrize("padded", [False, True])
def test_gpu_window_models_generate_greedy_tokens_match_eager(hf, gpu_window_pair, padded):
    # 16 greedy tokens after a 32-token prompt with the dynamic cache (the sliding layers' caches keep
    # the last 7 keys), without padding and left-padded (rows of 32, 27 and 20 real tokens): the tokens
    # are eager's, with check_greedy_matches_sdpa's allowance for a bf16 tie. Every layer of every step
    # runs on hopattn's kernels: without padding the dense one; with it the varlen one, until a
    # sliding layer's cached window holds no padding any more (then its mask is a plain window).
    torch = hf.torch
    pair = gpu_window_pair
    if padded:
        ids, mask = left_padded_batch(torch, pair.device, 32, [0, 5, 12], seed=9)
        routes = {"kernel", "varlen"}
    else:
        ids, _ = left_padded_batch(torch, pair.device, 32, [0, 0], seed=9)
        mask, routes = torch.ones_like(ids), {"kernel"}
    check_greedy_matches_sdpa(hf, pair, ids, mask, 16, routes)


@pytest.mark.parametrize("padded", [False, True])
def test_gpu_window_models_training_step_matches_eager(hf, gpu_window_pair, padded):
    # One training step with the window (and Gemma 2's softcap): hopattn's forward and backward
    # kernels, dense without padding, varlen with a left-padded batch (rows of 64, 59 and 24 real
    # tokens); the loss and every parameter gradient are eager's (check_training_step_matches_sdpa).
    torch = hf.torch
    pair = gpu_window_pair
    if sm90_kernel_pair(hf, want_backward=True) != (pair.dtype, pair.head_dim):
        pytest.skip("no backward kernel for the models' dtype and head_dim in this build")
    if padded:
        ids, mask = left_padded_batch(torch, pair.device, 64, [0, 5, 40], seed=10)
        check_training_step_matches_sdpa(hf, pair, ids, "varlen", attention_mask=mask,
                                         labels=padding_labels(ids, mask))
    else:
        ids, _ = left_padded_batch(torch, pair.device, 64, [0, 0], seed=10)
        check_training_step_matches_sdpa(hf, pair, ids, "kernel", labels=ids)
