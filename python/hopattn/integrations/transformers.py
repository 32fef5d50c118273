# Hugging Face Transformers integration: an attention implementation named "hopattn" (by default),
# registered through Transformers' AttentionInterface, so that
#
#     from hopattn.integrations import transformers as hopattn_hf
#     hopattn_hf.register()
#     model = AutoModelForCausalLM.from_config(cfg, attn_implementation="hopattn")
#
# runs the model's attention on hopattn's sm90 kernels. Importing this module imports neither torch
# nor transformers; register() imports transformers, the attention function uses torch (it is only
# ever called with torch tensors).
#
# The attention function follows Transformers' own "sdpa" integration
# (transformers/integrations/sdpa_attention.py) decision for decision, so that "hopattn" computes
# what "sdpa" computes:
#   * query/key/value arrive as (batch, heads, seq, head_dim); hopattn takes (batch, seq, heads,
#     head_dim), so they are transposed (views, no copy), and the output is (batch, seq, heads,
#     head_dim), as Transformers expects from every attention function;
#   * scaling is the softmax scale (None: 1/sqrt(head_dim), as in SDPA);
#   * GQA/MQA: key/value keep their heads_kv heads (no repeat_kv); hopattn maps query head h to kv
#     head h // (heads_q / heads_kv), the same mapping as repeat_kv;
#   * is_causal: the is_causal argument if given, else module.is_causal; without a mask it applies
#     only when q_len > 1 (a single decode query attends to the whole cache), like sdpa;
#   * masks: register() also registers Transformers' sdpa_mask as this implementation's mask
#     function, so the model builds the masks it builds for "sdpa": None when plain causal (or
#     full) attention is exact, else a 4D boolean mask (True = attend). The kernel runs when the mask
#     is None or, after dropping trailing keys nobody sees (the unused tail of a static cache), is
#     exactly "all keys" or "bottom-right aligned causal" (query i sees key j iff
#     j <= i + kv_len - q_len: the mask of a KV-cache step with no padding, which is how hopattn's
#     causal mask is aligned). Any other mask, in practice a padding mask, cannot be expressed by
#     the kernel until hopattn has a variable-length kernel (issue 6), so that call falls back to
#     Transformers' sdpa attention with the mask: correct, slower, counted in stats() and warned
#     about once (FallbackWarning).
#
# torch.compile: without a mask the call is one hopattn::fwd node (no graph break); a mask cannot be
# read while tracing, so under torch.compile any mask goes to sdpa. Nothing is counted or warned
# while tracing (it would happen once, at trace time, not per call).
#
# Not supported (raise NotImplementedError naming the argument, never silently ignored): attention
# dropout > 0 (training with attention_dropout), softcap, attention sinks (s_aux / sinks).
# Everything else goes to hopattn.attention, which raises its own errors for what the kernels do not
# take (e.g. float32 or CPU tensors, a head_dim not in the build).
import threading
import warnings
import weakref

__all__ = ["register", "attention_forward", "stats", "reset_stats", "FallbackWarning", "DEFAULT_NAME"]

DEFAULT_NAME = "hopattn"

# What ran, in eager calls: "kernel" counts calls that ran hopattn's kernel, "sdpa_fallback" calls that
# fell back to torch SDPA, and "sdpa_fallback:<reason>" the same per reason ("padding_mask",
# "position_bias", "causal_kv_shorter_than_q").
_stats = {}
_stats_lock = threading.Lock()
_warned = set()


class FallbackWarning(UserWarning):
    """Warned once per reason when a call falls back from hopattn's kernel to torch SDPA."""


def stats():
    """A copy of the counters: {"kernel": calls on hopattn's kernel, "sdpa_fallback": calls that fell
    back to torch SDPA, "sdpa_fallback:<reason>": the same per reason}."""
    with _stats_lock:
        return dict(_stats)


def reset_stats():
    """Zero the counters (and re-arm the one-time fallback warnings)."""
    with _stats_lock:
        _stats.clear()
        _warned.clear()


def _count(key):
    with _stats_lock:
        _stats[key] = _stats.get(key, 0) + 1


_FALLBACK_MESSAGES = {
    "padding_mask": (
        "hopattn: an attention mask that is neither plain causal nor full (a padding mask) fell back "
        "to torch SDPA with the mask; hopattn has no variable-length kernel yet (issue 6)"
    ),
    "position_bias": "hopattn: an additive position_bias fell back to torch SDPA (hopattn has no bias input)",
    "causal_kv_shorter_than_q": (
        "hopattn: causal attention without a mask and with fewer keys than queries fell back to torch "
        "SDPA (its top-left aligned causal mask differs from hopattn's bottom-right one there)"
    ),
}


def _fallback(reason, tracing, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
    if not tracing:  # while torch.compile traces, Python side effects would only run once, at trace time
        _count("sdpa_fallback")
        _count("sdpa_fallback:" + reason)
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(_FALLBACK_MESSAGES[reason] + " (counted in hopattn.integrations.transformers.stats())",
                          FallbackWarning, stacklevel=3)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


# --- mask analysis ----------------------------------------------------------------------------------

# Masks already looked at: id(mask) -> (weakref to it, its version counter, q_len, decision). Every
# layer of a forward pass gets the same mask object, so the host reads the mask once per forward, not
# once per layer. The version counter catches in-place changes.
_mask_cache = {}
_MASK_CACHE_SIZE = 8


def _mask_version(mask):
    try:
        return mask._version
    except RuntimeError:  # inference-mode tensors keep no version counter: do not cache those
        return None


def _classify_mask(torch, mask, batch, heads_q, q_len, kv_len):
    """("full" | "causal", keys) when the mask equals all-visible or bottom-right causal attention over
    its first `keys` keys (the rest seen by no query), else None. One host synchronisation."""
    if mask.dim() != 4 or mask.shape[-1] != kv_len or mask.shape[-2] not in (1, q_len):
        return None
    if mask.shape[0] not in (1, batch) or mask.shape[1] not in (1, heads_q):
        return None
    if mask.dtype == torch.bool:
        visible = mask
        valid = None
    elif mask.is_floating_point():
        # An additive mask: 0 where visible, the dtype's minimum or -inf where masked. Any other value
        # is a bias, which the kernel cannot add.
        visible = mask == 0
        valid = (visible | (mask <= torch.finfo(mask.dtype).min / 2)).all()
    else:
        return None
    device = mask.device
    j = torch.arange(kv_len, device=device)
    i = torch.arange(q_len, device=device)
    seen = visible.reshape(-1, kv_len).any(0)                         # (kv_len,) seen by some query
    keys = torch.where(seen, j + 1, torch.zeros_like(j)).max()        # one past the last seen key
    full = (visible == (j < keys)).all()
    causal = (visible == ((j[None, :] <= i[:, None] + (keys - q_len)) & (j < keys))).all()
    flags = [keys, full, causal] + ([] if valid is None else [valid])
    values = torch.stack([f.to(torch.int64) for f in flags]).tolist()
    keys, full, causal = values[0], bool(values[1]), bool(values[2])
    if len(values) > 3 and not values[3]:
        return None
    if keys < 1:
        return None
    if full:
        return "full", keys
    if causal and keys >= q_len:  # every query sees at least one key (no empty rows)
        return "causal", keys
    return None


def _mask_decision(torch, mask, batch, heads_q, q_len, kv_len):
    version = _mask_version(mask)
    entry = _mask_cache.get(id(mask))
    if entry is not None and version is not None:
        ref, cached_version, cached_q_len, decision = entry
        if ref() is mask and cached_version == version and cached_q_len == q_len:
            return decision
    decision = _classify_mask(torch, mask, batch, heads_q, q_len, kv_len)
    if version is not None:
        if len(_mask_cache) >= _MASK_CACHE_SIZE:
            _mask_cache.clear()
        _mask_cache[id(mask)] = (weakref.ref(mask), version, q_len, decision)
    return decision


def _tracing(torch):
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and compiler.is_compiling():
        return True
    return torch.jit.is_tracing()


# --- the attention function -------------------------------------------------------------------------


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      **kwargs):
    """Transformers attention function running hopattn.attention.

    query (batch, heads_q, q_len, head_dim), key/value (batch, heads_kv, kv_len, head_dim), as every
    Transformers attention function gets them. Returns (attn_output, None), attn_output
    (batch, q_len, heads_q, head_dim) contiguous. See the module comment for what runs where.
    """
    import torch

    if dropout is not None and dropout > 0:
        raise NotImplementedError(
            f"hopattn attention: dropout={dropout} is not supported (hopattn has no attention dropout); "
            "set the model config's attention_dropout to 0.0 or use attn_implementation='sdpa'"
        )
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("hopattn attention: softcap is not supported; use attn_implementation='eager'")
    for sink in ("s_aux", "sinks"):
        if kwargs.get(sink) is not None:
            raise NotImplementedError(f"hopattn attention: attention sinks ({sink}) are not supported")
    tracing = _tracing(torch)
    if kwargs.get("output_attentions", False) and not tracing and "output_attentions" not in _warned:
        _warned.add("output_attentions")
        warnings.warn("hopattn attention does not return attention weights (output_attentions=True): "
                      "use attn_implementation='eager' for them", stacklevel=2)

    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if kwargs.get("position_bias") is not None:
        return _fallback("position_bias", tracing, module, query, key, value, attention_mask, dropout, scaling,
                         is_causal, kwargs)

    batch, heads_q, q_len = query.shape[0], query.shape[1], query.shape[2]
    kv_len = key.shape[2]
    if attention_mask is None:
        # As sdpa: causal only for more than one query (one decode query sees the whole cache).
        causal = bool(q_len > 1 and is_causal)
        if causal and kv_len > q_len:
            # sdpa's case of a prefill into an empty static cache: the keys past q_len are unused
            # cache slots, which sdpa's top-left aligned causal mask hides and sdpa drops. Drop them
            # too (hopattn's bottom-right aligned mask would otherwise show them).
            key = key[:, :, :q_len]
            value = value[:, :, :q_len]
        elif causal and kv_len < q_len:
            return _fallback("causal_kv_shorter_than_q", tracing, module, query, key, value, attention_mask,
                             dropout, scaling, is_causal, kwargs)
    else:
        if tracing:  # the mask's contents cannot be read while tracing
            return _fallback("mask_while_tracing", tracing, module, query, key, value, attention_mask, dropout,
                             scaling, is_causal, kwargs)
        decision = _mask_decision(torch, attention_mask, batch, heads_q, q_len, kv_len)
        if decision is None:
            return _fallback("padding_mask", tracing, module, query, key, value, attention_mask, dropout, scaling,
                             is_causal, kwargs)
        kind, keys = decision
        causal = kind == "causal" and q_len > 1  # one query: bottom-right causal is all its keys
        if keys < kv_len:
            key = key[:, :, :keys]
            value = value[:, :, :keys]

    # (batch, heads, seq, head_dim) -> hopattn's (batch, seq, heads, head_dim): views.
    q = query.transpose(1, 2)
    k = key.transpose(1, 2)
    v = value.transpose(1, 2)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    head_dim, v_head_dim = q.shape[-1], v.shape[-1]
    if v_head_dim != head_dim:
        # As Transformers' flash-attention integration: pad value to the query head dim (e.g. MLA) and
        # crop the output.
        v = torch.nn.functional.pad(v, [0, head_dim - v_head_dim])

    import hopattn

    if not tracing:
        _count("kernel")
    out = hopattn.attention(q, k, v, causal=causal, softmax_scale=scaling,
                            deterministic=torch.are_deterministic_algorithms_enabled())
    if v_head_dim != head_dim:
        out = out[..., :v_head_dim]
    return out, None


def register(name=DEFAULT_NAME):
    """Register hopattn as attention implementation `name` with Transformers (AttentionInterface), and
    Transformers' sdpa mask builder as its mask function (AttentionMaskInterface, where it exists).
    Afterwards `attn_implementation=name` selects it (from_pretrained / from_config /
    model.set_attn_implementation). Idempotent. Returns name."""
    try:
        import transformers
    except ImportError as e:
        raise ImportError(
            "hopattn.integrations.transformers.register() needs the transformers package (pip install transformers)"
        ) from e
    interface = getattr(transformers, "AttentionInterface", None)
    if interface is None:
        raise ImportError(
            f"transformers {transformers.__version__} has no AttentionInterface; hopattn's integration needs "
            "transformers 4.48 or newer"
        )
    interface.register(name, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        # Older transformers build masks in the model code (4D additive masks for custom
        # implementations), which attention_forward reads as well.
        pass
    else:
        # Without a mask function, Transformers would give a custom implementation no mask at all,
        # padding included.
        AttentionMaskInterface.register(name, sdpa_mask)
    return name
