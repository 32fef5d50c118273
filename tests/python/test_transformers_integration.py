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
#  - With torch, transformers, the library and an sm_90 GPU: a tiny random Llama (GQA, bf16) with
#    "hopattn" against "sdpa": logits without and with a padding mask, greedy generate() of 32
#    tokens with the KV cache, and a backward pass.
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


def reference_attention(q, k, v, causal=False, softmax_scale=None):
    """hopattn.attention's contract in plain torch (float32 math): (batch, seq, heads, head_dim), heads_q
    a multiple of heads_kv, bottom-right aligned causal mask, a row that sees no key gives 0."""
    import torch

    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    assert hq % hk == 0 and v.shape[:3] == k.shape[:3] and v.shape[-1] == d
    scale = d**-0.5 if softmax_scale is None else softmax_scale
    kk = k.float().repeat_interleave(hq // hk, dim=2)
    vv = v.float().repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), kk) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(~(j <= i + (sk - sq)), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv).to(q.dtype).contiguous()


class RecordingKernel:
    """Stands in for hopattn.attention: records each call's arguments, returns reference_attention."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, k, v, causal=False, softmax_scale=None, return_lse=False, deterministic=False):
        assert not return_lse
        self.calls.append(types.SimpleNamespace(q=q, k=k, v=v, causal=causal, softmax_scale=softmax_scale,
                                                deterministic=deterministic))
        return reference_attention(q, k, v, causal, softmax_scale)


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
def test_padding_mask_falls_back_to_sdpa_counted_and_warned_once(hf, kernel, side):
    torch = hf.torch
    module = make_module(torch)
    query, key, value = make_qkv(torch, seqlen_q=6, seqlen_k=6)
    padding = torch.ones(2, 6, dtype=torch.long)
    if side == "left":
        padding[0, :2] = 0
    else:
        padding[1, 4:] = 0
    mask = causal_bool_mask(torch, 2, 6, 6, padding)
    with pytest.warns(hf.integ.FallbackWarning, match="issue 6"):
        out, _ = hf.integ.attention_forward(module, query, key, value, mask)
    assert kernel.calls == []
    assert hf.integ.stats() == {"sdpa_fallback": 1, "sdpa_fallback:padding_mask": 1}
    assert torch.equal(out, hf.sdpa(module, query, key, value, mask)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per reason, not per call
        hf.integ.attention_forward(module, query, key, value, mask.clone())
    assert hf.integ.stats()["sdpa_fallback:padding_mask"] == 2 and kernel.calls == []


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
    assert hf.integ.stats()["sdpa_fallback:padding_mask"] == 1
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
    with pytest.raises(NotImplementedError, match="softcap"):
        hf.integ.attention_forward(module, query, key, value, None, softcap=30.0)
    with pytest.raises(NotImplementedError, match="s_aux"):
        hf.integ.attention_forward(module, query, key, value, None, s_aux=torch.zeros(4))
    assert kernel.calls == []
    hf.integ.attention_forward(module, query, key, value, None, dropout=0.0, softcap=None, sliding_window=None)
    assert len(kernel.calls) == 1


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


def test_tiny_llama_cpu_end_to_end(hf, kernel):
    # float32 on the CPU, the kernel replaced by reference_attention: checks the integration inside
    # transformers' real models, masks and caches. The GPU tests below run the real kernels.
    torch = hf.torch
    model_h, model_s = tiny_llama_pair(hf, "cpu", torch.float32, hidden=64, head_dim=16, vocab=100)
    layers = model_h.config.num_hidden_layers
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (2, 20), generator=gen)
    integ = hf.integ
    with torch.no_grad():
        # No mask, and an all-ones mask (transformers then builds none): the kernel, causal.
        for mask in (None, torch.ones_like(ids)):
            integ.reset_stats()
            close(torch, model_h(ids, attention_mask=mask).logits, model_s(ids, attention_mask=mask).logits)
            assert integ.stats() == {"kernel": layers}
            assert kernel.calls[-1].causal is True and kernel.calls[-1].k.shape[2] == 2  # GQA, no repeat
        # Padding: every layer falls back to SDPA with the mask.
        for side in ("left", "right"):
            integ.reset_stats()
            mask = padding_mask(torch, 2, 20, side, "cpu")
            with pytest.warns(integ.FallbackWarning, match="issue 6"):  # reset_stats() re-arms it
                got = model_h(ids, attention_mask=mask).logits
            assert torch.equal(got, model_s(ids, attention_mask=mask).logits)
            assert integ.stats() == {"sdpa_fallback": layers, "sdpa_fallback:padding_mask": layers}
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
        # Left-padded generation: every step falls back (the mask keeps the padding).
        integ.reset_stats()
        mask = padding_mask(torch, 2, 20, "left", "cpu")
        with pytest.warns(integ.FallbackWarning, match="issue 6"):
            seq_h, _ = greedy(model_h, ids, 3, attention_mask=mask)
        seq_s, _ = greedy(model_s, ids, 3, attention_mask=mask)
        assert torch.equal(seq_h, seq_s)
        assert integ.stats() == {"sdpa_fallback": 3 * layers, "sdpa_fallback:padding_mask": 3 * layers}


# --- GPU: the real kernels -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_pair(hf):
    torch = hf.torch
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        pytest.skip("needs an sm_90 GPU")
    from hopattn_test_support import gpu_kernel_pair

    dtype, head_dim = gpu_kernel_pair(want_backward=True, prefer_head_dim=64)
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
    # Until hopattn has a variable-length kernel (issue 6), a padding mask goes through the
    # integration's fallback to torch SDPA with the mask, in every layer: this checks that the
    # fallback is taken, counted and gives sdpa's results.
    torch, integ = hf.torch, hf.integ
    gen = torch.Generator(device=gpu_pair.device).manual_seed(1)
    ids = torch.randint(3, 1000, (2, 64), device=gpu_pair.device, generator=gen)
    mask = padding_mask(torch, 2, 64, side, gpu_pair.device)
    integ.reset_stats()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", integ.FallbackWarning)
        got = gpu_pair.model_h(ids, attention_mask=mask).logits
        want = gpu_pair.model_s(ids, attention_mask=mask).logits
    assert integ.stats() == {"sdpa_fallback": gpu_pair.layers, "sdpa_fallback:padding_mask": gpu_pair.layers}
    keep = mask.bool()  # logits of padding positions are not meaningful
    assert_logits_close(torch, got[keep], want[keep], f"{side} padding")


def test_gpu_generate_greedy_tokens_match_sdpa(hf, gpu_pair):
    # 32 greedy tokens with the KV cache (prefill: causal kernel; each step: one query against the
    # cache) must equal sdpa's. In a random bf16 model, a step whose two best tokens are within a
    # rounding error of each other may go either way in any two correct implementations, so one
    # divergence is accepted only at such a tie (sdpa's own scores for the two tokens within 4
    # ulps of the step's largest score); after it the sequences are different texts. Independently,
    # every token hopattn chose must be sdpa's choice (up to such a tie) given hopattn's prefix,
    # checked against one cache-free sdpa forward over hopattn's whole sequence.
    torch, integ = hf.torch, hf.integ
    dtype = gpu_pair.dtype
    gen = torch.Generator(device=gpu_pair.device).manual_seed(2)
    ids = torch.randint(3, 1000, (2, 16), device=gpu_pair.device, generator=gen)
    ones = torch.ones_like(ids)
    steps = 32
    integ.reset_stats()
    with torch.no_grad():
        seq_h, scores_h = greedy(gpu_pair.model_h, ids, steps, attention_mask=ones)
        assert integ.stats() == {"kernel": steps * gpu_pair.layers}
        seq_s, scores_s = greedy(gpu_pair.model_s, ids, steps, attention_mask=ones)
        assert seq_h.shape == seq_s.shape == (2, 16 + steps)
        for row in range(2):
            differ = (seq_h[row, 16:] != seq_s[row, 16:]).nonzero()
            if len(differ) == 0:
                continue
            t = differ[0].item()
            s = scores_s[t][row].float()
            a, b = seq_s[row, 16 + t], seq_h[row, 16 + t]
            tol = 4 * ulp(torch, s.max(), dtype)
            assert s[a] - s[b] <= tol, (
                f"row {row}: hopattn chose token {b.item()} at step {t}, sdpa {a.item()}, and sdpa's scores "
                f"for them differ by {(s[a] - s[b]).item():.4g} > {tol.item():.3g} (not a bf16 tie)"
            )
        # Teacher-forced: sdpa without a cache over hopattn's sequence.
        logits = gpu_pair.model_s(seq_h, attention_mask=torch.ones_like(seq_h)).logits.float()
        eos = gpu_pair.model_s.generation_config.eos_token_id
        if eos is not None:  # min_new_tokens kept generate() from choosing it
            logits[..., torch.tensor(eos, device=logits.device).reshape(-1)] = float("-inf")
        chosen_logits = logits[:, 15:-1].gather(-1, seq_h[:, 16:, None])[..., 0]  # (2, steps)
        best = logits[:, 15:-1].amax(-1)
        tol = 8 * ulp(torch, best, dtype)
        bad = (best - chosen_logits > tol).nonzero().tolist()
        assert not bad, f"(row, step) where hopattn's token is not sdpa's greedy choice: {bad}"
    exact = torch.equal(seq_h, seq_s)
    print(f"greedy tokens identical to sdpa's for all {steps} steps: {exact}")


def test_gpu_backward(hf, gpu_pair):
    torch, integ = hf.torch, hf.integ
    from hopattn_test_support import rel_l2

    gen = torch.Generator(device=gpu_pair.device).manual_seed(3)
    ids = torch.randint(3, 1000, (2, 64), device=gpu_pair.device, generator=gen)
    grads = {}
    losses = {}
    for name, model in (("hopattn", gpu_pair.model_h), ("sdpa", gpu_pair.model_s)):
        model.train()  # attention_dropout is 0.0: no dropout reaches the attention function
        model.zero_grad(set_to_none=True)
        integ.reset_stats()
        try:
            loss = model(ids, labels=ids).loss
            loss.backward()
        finally:
            model.eval()
        if name == "hopattn":
            assert integ.stats() == {"kernel": gpu_pair.layers}
        losses[name] = loss.item()
        grads[name] = {n: p.grad.float() for n, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
    assert abs(losses["hopattn"] - losses["sdpa"]) <= 1e-2 * abs(losses["sdpa"])
    for n, want in grads["sdpa"].items():
        got = grads["hopattn"][n]
        assert torch.isfinite(got).all(), n
        assert rel_l2(got, want) < 5e-2, f"{n}: relative L2 {rel_l2(got, want):.3g}"
