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
#   * softcap (Gemma 2's attn_logit_softcapping, passed as softcap=): hopattn's softcap, the same
#     formula as Transformers' eager attention (scores softcap * tanh(scaling * q.k / softcap), then
#     the mask); None or 0 is off;
#   * sliding windows: Transformers passes sliding_window=w to the attention function of a sliding
#     layer (Mistral, Qwen2, Gemma 2/3, ...; None on full-attention layers) and builds its mask with
#     sliding_window_causal_mask_function(w): query position q sees key position k iff
#     q - w < k <= q, i.e. its own key and the w - 1 before it. In hopattn's terms (FlashAttention's
#     window_size, bottom-right aligned) that is causal with window_size=(w - 1, 0), which is also
#     what Transformers' flash-attention integration passes (window_size=(w - 1, w - 1) with
#     causal=True, whose right bound FlashAttention reads as 0). Where there is a mask, the window is
#     read from the mask itself (below), so a layer is windowed exactly as its mask says, whether or
#     not sliding_window is passed; without a mask (Transformers gives none only when the window
#     hides nothing, kv_len < w), sliding_window of a causal layer becomes window_size=(w - 1, 0)
#     when kv_len > w, as in the flash-attention integration;
#   * masks: register() also registers Transformers' sdpa_mask as this implementation's mask
#     function, so the model builds the masks it builds for "sdpa": None when plain causal (or
#     full) attention is exact, else a 4D boolean mask (True = attend). The dense kernel runs when the
#     mask is None or, after dropping trailing keys nobody sees (the unused tail of a static cache), is
#     exactly "all keys" or "bottom-right aligned causal" (query i sees key j iff
#     j <= i + kv_len - q_len: the mask of a KV-cache step with no padding, which is how hopattn's
#     causal mask is aligned), optionally within a sliding window of `left` keys before the query's
#     own (j >= i + kv_len - q_len - left: window_size=(left, 0)); left is read from the mask (the
#     most keys before its own that any query sees) and every row is then checked against it.
#   * padding masks run on the variable-length kernel (hopattn.varlen_attention), when the mask is
#     proven to be padding only and the tensors are CUDA tensors, in inference and in training alike
#     (varlen_attention is differentiable: its backward is the library's backward_varlen, bitwise
#     reproducible under torch.use_deterministic_algorithms, as the dense path's). The mask is read
#     (once per mask object) as one of two forms:
#       - "full": within each batch row, every query sees the same set of keys (an encoder's padding
#         mask, cross-attention, any single decode query). Each row is one sequence: all its queries,
#         the keys it sees, no causal mask. Every output row is what sdpa computes.
#       - "causal + padding": there is an offset `off` (the queries are the last q_len of the first
#         off + q_len key positions; more keys are an unused static-cache tail) and a per-row set of
#         kept keys (those some query of the row sees) such that every kept query row, one whose own
#         position i + off is kept, is exactly "the kept keys j <= i + off" (a padding row, one whose
#         own position is not kept, sees no key at all or the kept keys from the first it sees up to
#         its position). Each batch row is one sequence of its kept queries and kept keys, causal
#         bottom-right aligned: since the kept keys are the kept cache positions before the queries
#         (c of them) followed by the kept query positions themselves, the r-th kept query sees the
#         first c + r + 1 kept keys, which is exactly the mask's row (this is left padding during
#         generation, right padding at prefill, and any padding in the middle). With a sliding
#         window, the kept query rows are instead "the last left + 1 of those kept keys" (left read
#         from the mask as in the dense case, but in kept tokens) and varlen runs with
#         window_size=(left, 0) per sequence; that equals the mask's window, which counts positions,
#         whenever no padding lies inside a window (left and right padding; a hole in the middle of
#         a window fails the check and falls back).
#     The packed queries/keys/values are gathered with per-row indices of the kept tokens, and the
#     output is scattered back into (batch, q_len, heads, head_dim) with padding query rows 0 (sdpa
#     gives 0 for a left-padding row, which sees no key; a right-padding row sees the kept keys in
#     sdpa, so there its output differs, which no kept token reads since nobody attends to padding
#     keys). The gather, the kernel and the scatter are all differentiable (training with padding):
#     tokens not kept get gradient 0 through attention (nobody attends to padding keys, and padding
#     query rows are 0 here), so the gradients match sdpa's whenever the loss ignores the padding
#     positions (labels -100), whose outputs differ from sdpa's anyway. Counted as "varlen" in stats().
#   * any other mask (packed-sequence/document masks, additive biases, bidirectional sliding windows,
#     padding inside a sliding window), and padding masks on non-CUDA tensors, fall back to
#     Transformers' sdpa attention with the mask (with softcap, which sdpa refuses: to
#     _softcap_attention, plain torch with the softcap and the mask, Gemma 2's eager attention):
#     correct, slower, counted in stats() per reason and warned about once (FallbackWarning).
#
# torch.compile: without a mask the call is one hopattn::fwd node (no graph break); a mask cannot be
# read while tracing, so under torch.compile any mask goes to sdpa. Nothing is counted or warned
# while tracing (it would happen once, at trace time, not per call).
#
# Not supported (raise NotImplementedError naming the argument, never silently ignored): attention
# dropout > 0 (training with attention_dropout), attention sinks (s_aux / sinks).
# Everything else goes to hopattn.attention, which raises its own errors for what the kernels do not
# take (e.g. float32 or CPU tensors, a head_dim not in the build).
import operator
import threading
import warnings
import weakref

__all__ = ["register", "attention_forward", "stats", "reset_stats", "FallbackWarning", "DEFAULT_NAME"]

DEFAULT_NAME = "hopattn"

# What ran, in eager calls: "kernel" counts calls that ran hopattn's dense kernel, "varlen" calls with a
# padding mask that ran hopattn's variable-length kernel, "sdpa_fallback" calls that fell back to torch
# SDPA (with softcap: to _softcap_attention), and "sdpa_fallback:<reason>" the same per reason (the keys
# of _FALLBACK_MESSAGES).
_stats = {}
_stats_lock = threading.Lock()
_warned = set()


class FallbackWarning(UserWarning):
    """Warned once per reason when a call falls back from hopattn's kernel to torch SDPA."""


def stats():
    """A copy of the counters: {"kernel": calls on hopattn's dense kernel, "varlen": calls with a padding
    mask on hopattn's variable-length kernel, "sdpa_fallback": calls that fell back to torch SDPA (with
    softcap, which SDPA lacks, to plain torch attention), "sdpa_fallback:<reason>": the same per
    reason}."""
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
    "unsupported_mask": (
        "hopattn: an attention mask that is neither plain causal, full, a causal sliding window nor a padding "
        "mask (e.g. packed sequences, an additive bias or padding inside a sliding window) fell back to torch "
        "SDPA with the mask"
    ),
    "padding_mask_not_cuda": (
        "hopattn: a padding mask on non-CUDA tensors fell back to torch SDPA with the mask (hopattn's "
        "variable-length kernel takes CUDA tensors)"
    ),
    "position_bias": "hopattn: an additive position_bias fell back to torch SDPA (hopattn has no bias input)",
    "causal_kv_shorter_than_q": (
        "hopattn: causal attention without a mask and with fewer keys than queries fell back to torch "
        "SDPA (its top-left aligned causal mask differs from hopattn's bottom-right one there)"
    ),
}


def _fallback(reason, tracing, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs,
              softcap=None):
    """Transformers' sdpa attention with the mask, or with softcap (a float > 0) _softcap_attention."""
    if not tracing:  # while torch.compile traces, Python side effects would only run once, at trace time
        _count("sdpa_fallback")
        _count("sdpa_fallback:" + reason)
        if reason not in _warned:
            _warned.add(reason)
            message = _FALLBACK_MESSAGES[reason]
            if softcap:
                message += (" (with softcap, which torch SDPA lacks: to plain torch attention with the softcap "
                            "and the mask, as Gemma 2's eager attention)")
            warnings.warn(message + " (counted in hopattn.integrations.transformers.stats())",
                          FallbackWarning, stacklevel=3)
    if softcap:
        return _softcap_attention(query, key, value, attention_mask, scaling, is_causal, softcap,
                                  kwargs.get("position_bias")), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def _softcap_attention(query, key, value, attention_mask, scaling, is_causal, softcap, position_bias=None):
    """The fallback when softcap is set (torch SDPA has none): Transformers' eager attention with
    softcapping (Gemma 2's eager_attention_forward: scores * scaling, capped to
    softcap * tanh(score / softcap), plus the mask, softmax) in float32, and, with no mask, sdpa's
    causal decision (top-left causal for more than one query). (batch, q_len, heads_q, v_head_dim)
    in query's dtype, contiguous; differentiable."""
    import torch

    heads_q, heads_kv, q_len, kv_len = query.shape[1], key.shape[1], query.shape[2], key.shape[2]
    q, k, v = query.float(), key.float(), value.float()
    if heads_q != heads_kv:  # repeat_kv's head mapping
        k = k.repeat_interleave(heads_q // heads_kv, dim=1)
        v = v.repeat_interleave(heads_q // heads_kv, dim=1)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    masked = torch.finfo(scores.dtype).min
    if attention_mask is None:
        if is_causal and q_len > 1:
            tril = torch.ones(q_len, kv_len, dtype=torch.bool, device=scores.device).tril()
            scores = scores.masked_fill(~tril, masked)
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, masked)
    else:
        scores = scores + attention_mask.float()
    if position_bias is not None:
        scores = scores + position_bias.float()
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v).transpose(1, 2).contiguous().to(query.dtype)


# --- mask analysis ----------------------------------------------------------------------------------

# Masks already looked at: id(mask) -> (weakref to it, its version counter, q_len, {what: result}), what
# being "dense" (_classify_mask) or "padding" (_padding_plan). Every layer of a forward pass gets the
# same mask object, so the host reads the mask once per forward, not once per layer. The version
# counter catches in-place changes.
_mask_cache = {}
_MASK_CACHE_SIZE = 8


def _mask_version(mask):
    try:
        return mask._version
    except RuntimeError:  # inference-mode tensors keep no version counter: do not cache those
        return None


def _read_mask(torch, mask, batch, heads_q, q_len, kv_len):
    """(visible, valid) of a 4D mask broadcastable to (batch, heads_q, q_len, kv_len) (see
    _mask_visible), or None for any other shape or dtype."""
    if mask.dim() != 4 or mask.shape[-1] != kv_len or mask.shape[-2] not in (1, q_len):
        return None
    if mask.shape[0] not in (1, batch) or mask.shape[1] not in (1, heads_q):
        return None
    # An additive mask: 0 where visible, the dtype's minimum or -inf where masked. Any other value is a
    # bias, which the kernels cannot add.
    return _mask_visible(torch, mask)


def _classify_mask(torch, mask, batch, heads_q, q_len, kv_len):
    """("full", keys, None) when the mask equals all-visible attention over its first `keys` keys (the
    rest seen by no query); ("causal", keys, left) when it equals bottom-right causal attention over
    them, within a sliding window of the `left` keys before each query's own (query i sees key j iff
    i + keys - q_len - left <= j <= i + keys - q_len: hopattn's window_size=(left, 0)), left None when
    no window hides anything; else None. The window is read from the mask (the most keys before its
    own any query sees) and then checked like the rest: every row must be exactly that. One host
    synchronisation."""
    read = _read_mask(torch, mask, batch, heads_q, q_len, kv_len)
    if read is None:
        return None
    visible, valid = read
    device = mask.device
    j = torch.arange(kv_len, device=device)
    i = torch.arange(q_len, device=device)
    seen = visible.reshape(-1, kv_len).any(0)                         # (kv_len,) seen by some query
    keys = torch.where(seen, j + 1, torch.zeros_like(j)).max()        # one past the last seen key
    full = (visible == (j < keys)).all()
    diagonal = i + (keys - q_len)                                     # (q_len,) each query's own key
    rows = visible.expand(visible.shape[0], visible.shape[1], q_len, kv_len)
    first = rows.to(torch.uint8).argmax(-1)                           # the first key each row sees
    left = torch.where(rows.any(-1), diagonal - first, torch.zeros_like(first)).amax().clamp_min(0)
    expected = (j[None, :] <= diagonal[:, None]) & (j[None, :] >= diagonal[:, None] - left) & (j < keys)
    causal = (visible == expected).all()
    flags = [keys, full, causal, left] + ([] if valid is None else [valid])
    values = torch.stack([f.to(torch.int64) for f in flags]).tolist()
    keys, full, causal, left = values[0], bool(values[1]), bool(values[2]), values[3]
    if len(values) > 4 and not values[4]:
        return None
    if keys < 1:
        return None
    if full:
        return "full", keys, None
    if causal and keys >= q_len:  # every query sees at least one key (no empty rows)
        # The last query sees keys - 1 keys before its own without a window: a window that wide or
        # wider hides nothing.
        return "causal", keys, (left if left < keys - 1 else None)
    return None


def _cached(mask, q_len, what, compute):
    """compute(), remembered for this mask object (while it is alive and unchanged) under `what`."""
    version = _mask_version(mask)
    entry = _mask_cache.get(id(mask))
    if entry is not None and version is not None:
        ref, cached_version, cached_q_len, results = entry
        if ref() is mask and cached_version == version and cached_q_len == q_len:
            if what in results:
                return results[what]
        else:
            entry = None
    result = compute()
    if version is not None:
        if entry is None:
            if len(_mask_cache) >= _MASK_CACHE_SIZE:
                _mask_cache.clear()
            entry = (weakref.ref(mask), version, q_len, {})
            _mask_cache[id(mask)] = entry
        entry[3][what] = result
    return result


def _mask_decision(torch, mask, batch, heads_q, q_len, kv_len):
    return _cached(mask, q_len, "dense", lambda: _classify_mask(torch, mask, batch, heads_q, q_len, kv_len))


# --- padding masks: the variable-length kernel -----------------------------------------------------


def _padding_layout(torch, visible, valid=None):
    """Reads a (batch, heads, q_len, kv_len) boolean mask (True = attend; expanded views are fine) as a
    padding mask, if it is one (see the module comment): (causal, query_keep, key_keep, left) with
    query_keep (batch, q_len) and key_keep (batch, kv_len) boolean, the tokens each batch row keeps,
    and left the sliding window over the kept tokens (varlen's window_size=(left, 0)), None when
    there is none or it hides nothing; or None when it is no padding mask. `valid`: a 0-dim boolean
    tensor that must be true as well (an additive mask's "no bias" check). One host synchronisation.

    "full": every query of a batch row sees the same keys; all queries kept, causal False, no window.
    "causal + padding": query i stands at key position p_i = i + off; the kept keys are those some
    query of the row sees; a query is kept iff its own key is. Every kept query's row is exactly
    "the kept keys j <= p_i of which at most `left` come before p_i" (left: the most any kept row
    has; unbounded when no row is cut short, as without a sliding window); a padding query's row
    is empty or "the kept keys from the first one it sees up to p_i". Then varlen's bottom-right
    causal mask, with window_size=(left, 0), over the kept tokens of each row is the mask at every
    kept query. (A window counts kept tokens, the mask's positions: with padding inside a window
    the two differ and the check fails, so such masks fall back.)"""
    batch, heads, q_len, kv_len = visible.shape
    device = visible.device
    v = visible[:, 0]  # (batch, q_len, kv_len)
    flags = []
    if heads > 1:
        flags.append((visible == visible[:, :1]).all())  # one pattern for every head
    if valid is not None:
        flags.append(valid)
    full_keys = v[:, 0]  # (batch, kv_len)
    full = (v == full_keys[:, None, :]).all()
    causal = None
    if q_len <= kv_len:
        i = torch.arange(q_len, device=device)
        j = torch.arange(kv_len, device=device)
        # off: the largest j - i of any visible (i, j). A row of a kept query ends at its own key
        # p_i = i + off; a padding row that sees keys ends before p_i; so the maximum is off.
        seen_any = v.any(0)  # (q_len, kv_len): seen in some batch row
        row_seen = seen_any.any(-1)
        last = (kv_len - 1) - seen_any.flip(-1).to(torch.uint8).argmax(-1)  # last key row i sees
        off = torch.where(row_seen, last - i, torch.full_like(i, -1)).amax()
        off_clamped = off.clamp(0, kv_len - q_len)
        p = i + off_clamped  # (q_len,) the key position of each query
        keys = v.any(1)  # (batch, kv_len): kept keys, those some query of the row sees
        queries = keys[:, p]  # (batch, q_len): kept queries, whose own key is kept
        sees = v.any(-1)  # (batch, q_len)
        rank = keys.cumsum(-1) - 1  # (batch, kv_len): index of each kept key among the row's kept keys
        rank_p = rank[:, p]  # (batch, q_len): a kept query's index among the kept keys
        first = v.to(torch.uint8).argmax(-1)  # (batch, q_len): the first key each row sees
        # The window: the most kept keys before its own that a kept query sees (an unbounded causal
        # mask gives the longest row's count, which hides nothing).
        left = torch.where(queries & sees, rank_p - rank.gather(1, first), torch.zeros_like(rank_p)).amax()
        left = left.clamp_min(0)
        # A kept query sees the kept keys of index rank_p - left .. rank_p: from position lo on (rank
        # is non-decreasing along the row and steps up at each kept key).
        lo = torch.searchsorted(rank, rank_p - left)  # (batch, q_len)
        upto = (j[None, None, :] <= p[None, :, None]) & keys[:, None, :]  # kept keys j <= p_i
        kept_ok = (v == (upto & (j[None, None, :] >= lo[:, :, None]))).all(-1)
        padding_ok = (v == (upto & (j[None, None, :] >= first[:, :, None]))).all(-1) | ~sees
        row_ok = torch.where(queries, kept_ok, padding_ok)
        causal = (off == off_clamped) & row_ok.all()
        windowed = torch.where(queries, rank_p, torch.full_like(rank_p, -1)).amax() > left  # a row cut short
        extra = [causal, left, windowed]
    values = torch.stack([f.to(torch.int64) for f in flags + [full] + ([] if causal is None else extra)]).tolist()
    if not all(values[: len(flags)]):
        return None
    if values[len(flags)]:
        return False, torch.ones(batch, q_len, dtype=torch.bool, device=device), full_keys, None
    if causal is not None and values[len(flags) + 1]:
        left, windowed = values[len(flags) + 2], values[len(flags) + 3]
        return True, queries, keys, (left if windowed else None)
    return None


class _Unpadded:
    """Where the kept tokens go in the packed (total_tokens, heads, head_dim) layout: row t of the packed
    queries is query (q_batch[t], q_pos[t]); likewise keys. cu_seqlens_q/k int32 (batch + 1)."""

    __slots__ = ("q_batch", "q_pos", "k_batch", "k_pos", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                 "max_seqlen_k")

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)

    @property
    def total_q(self):
        return self.q_batch.shape[0]

    @property
    def total_k(self):
        return self.k_batch.shape[0]


def _unpad_indices(torch, query_keep, key_keep):
    """The packing of the kept tokens of (batch, q_len) / (batch, kv_len) boolean keep masks: each batch
    row is one sequence, its kept tokens in order (left, right or any padding)."""
    q_batch, q_pos = query_keep.nonzero(as_tuple=True)  # row-major: by batch row, then position
    k_batch, k_pos = key_keep.nonzero(as_tuple=True)
    len_q = query_keep.sum(1, dtype=torch.int32)
    len_k = key_keep.sum(1, dtype=torch.int32)
    zero = len_q.new_zeros(1)
    max_q, max_k = torch.stack([len_q.max(), len_k.max()]).tolist()
    return _Unpadded(q_batch=q_batch, q_pos=q_pos, k_batch=k_batch, k_pos=k_pos,
                     cu_seqlens_q=torch.cat([zero, len_q.cumsum(0, dtype=torch.int32)]),
                     cu_seqlens_k=torch.cat([zero, len_k.cumsum(0, dtype=torch.int32)]),
                     max_seqlen_q=int(max_q), max_seqlen_k=int(max_k))


def _unpad(x, batch_index, pos_index):
    """x (batch, seq, heads, dim), any strides -> (kept tokens, heads, dim), contiguous (one gather)."""
    return x[batch_index, pos_index]


def _repad(torch, packed, batch_index, pos_index, batch, seqlen):
    """packed (kept tokens, heads, dim) -> (batch, seqlen, heads, dim), contiguous, 0 where nothing kept."""
    out = packed.new_zeros((batch, seqlen) + tuple(packed.shape[1:]))
    out[batch_index, pos_index] = packed
    return out


class _PaddingPlan:
    __slots__ = ("causal", "query_keep", "key_keep", "left", "_unpadded")

    def __init__(self, causal, query_keep, key_keep, left=None):
        self.causal, self.query_keep, self.key_keep, self.left = causal, query_keep, key_keep, left
        self._unpadded = None

    def unpadded(self, torch):
        if self._unpadded is None:
            self._unpadded = _unpad_indices(torch, self.query_keep, self.key_keep)
        return self._unpadded


def _mask_visible(torch, mask):
    """(visible, valid): the boolean "attend" tensor of a boolean or additive mask, and for an additive
    one a 0-dim tensor, true when every value is 0 or masked (else it is a bias); None for other dtypes."""
    if mask.dtype == torch.bool:
        return mask, None
    if mask.is_floating_point():
        visible = mask == 0
        return visible, (visible | (mask <= torch.finfo(mask.dtype).min / 2)).all()
    return None


def _padding_plan(torch, mask, batch, heads_q, q_len, kv_len):
    """A _PaddingPlan when the 4D mask is a padding mask (see _padding_layout), else None."""
    read = _read_mask(torch, mask, batch, heads_q, q_len, kv_len)
    if read is None:
        return None
    visible, valid = read
    layout = _padding_layout(torch, visible.expand(batch, mask.shape[1], q_len, kv_len), valid)
    return None if layout is None else _PaddingPlan(*layout)


def _varlen_device_ok(query, key, value):
    """The variable-length kernel takes CUDA tensors (the tests replace this to run on the CPU)."""
    return query.is_cuda and key.is_cuda and value.is_cuda


def _varlen_attention(torch, plan, query, key, value, scaling, softcap=None):
    """query (batch, heads_q, q_len, head_dim), key/value (batch, heads_kv, kv_len, *) through
    hopattn.varlen_attention on the kept tokens of `plan` (with its sliding window, and softcap when
    given); (batch, q_len, heads_q, v_head_dim) with the rows of queries not kept 0. Differentiable
    (gather, varlen_attention, scatter): tokens not kept get gradient 0; deterministic follows
    torch.are_deterministic_algorithms_enabled()."""
    import hopattn

    batch, q_len = query.shape[0], query.shape[2]
    if plan.query_keep.device == query.device:
        idx = plan.unpadded(torch)
    else:  # a mask on another device than the attention (not what transformers does): not cached
        idx = _unpad_indices(torch, plan.query_keep.to(query.device), plan.key_keep.to(query.device))
    q = _unpad(query.transpose(1, 2), idx.q_batch, idx.q_pos)
    k = _unpad(key.transpose(1, 2), idx.k_batch, idx.k_pos)
    v = _unpad(value.transpose(1, 2), idx.k_batch, idx.k_pos)
    head_dim, v_head_dim = q.shape[-1], v.shape[-1]
    if v_head_dim != head_dim:  # as in the dense path: pad value to the query head dim, crop the output
        v = torch.nn.functional.pad(v, [0, head_dim - v_head_dim])
    if idx.total_q == 0 or idx.total_k == 0:  # nothing kept: every row sees no key
        packed = q.new_zeros(q.shape[:-1] + (v_head_dim,))
    else:
        packed = hopattn.varlen_attention(q, k, v, idx.cu_seqlens_q, idx.cu_seqlens_k, idx.max_seqlen_q,
                                          idx.max_seqlen_k, causal=plan.causal, softmax_scale=scaling,
                                          deterministic=torch.are_deterministic_algorithms_enabled(),
                                          **_kernel_options(None if plan.left is None else (plan.left, 0),
                                                            softcap))
        if v_head_dim != head_dim:
            packed = packed[..., :v_head_dim]
    return _repad(torch, packed, idx.q_batch, idx.q_pos, batch, q_len)


def _kernel_options(window, softcap):
    """The window_size / softcap keyword arguments of hopattn.attention / varlen_attention, only those
    that are set (a call without them is the plain one)."""
    options = {}
    if window is not None:
        options["window_size"] = window
    if softcap is not None:
        options["softcap"] = softcap
    return options


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
    softcap = kwargs.pop("softcap", None)  # (sdpa, the fallback, refuses any softcap but None)
    if softcap is not None:
        from hopattn import ops

        softcap = ops._check_softcap(softcap)  # a finite float >= 0, else ValueError naming softcap
        softcap = softcap if softcap > 0 else None  # 0: off, as in FlashAttention
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
                         is_causal, kwargs, softcap)

    batch, heads_q, q_len = query.shape[0], query.shape[1], query.shape[2]
    kv_len = key.shape[2]
    window = None
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
                             dropout, scaling, is_causal, kwargs, softcap)
        sliding_window = kwargs.get("sliding_window")
        if sliding_window is not None and is_causal and key.shape[2] > sliding_window:
            # Transformers' flash-attention convention (modeling_flash_attention_utils): a causal layer
            # with sliding_window=w sees its own key and the w - 1 before it, FlashAttention's
            # window_size=(w - 1, 0) (it passes (w - 1, w - 1) with causal, whose right bound FA reads
            # as 0), the same keys as transformers' sliding_window_causal_mask_function(w) masks show
            # (kv_idx > q_idx - w). With a mask, the window is read from the mask instead.
            window = (operator.index(sliding_window) - 1, 0)
    else:
        if tracing:  # the mask's contents cannot be read while tracing
            return _fallback("mask_while_tracing", tracing, module, query, key, value, attention_mask, dropout,
                             scaling, is_causal, kwargs, softcap)
        decision = _mask_decision(torch, attention_mask, batch, heads_q, q_len, kv_len)
        if decision is None:
            plan = _cached(attention_mask, q_len, "padding",
                           lambda: _padding_plan(torch, attention_mask, batch, heads_q, q_len, kv_len))
            if plan is None:
                reason = "unsupported_mask"
            elif not _varlen_device_ok(query, key, value):
                reason = "padding_mask_not_cuda"
            else:  # with or without a gradient: varlen_attention is differentiable
                _count("varlen")
                return _varlen_attention(torch, plan, query, key, value, scaling, softcap), None
            return _fallback(reason, tracing, module, query, key, value, attention_mask, dropout, scaling,
                             is_causal, kwargs, softcap)
        kind, keys, left = decision
        causal = kind == "causal" and q_len > 1  # one query: bottom-right causal is all its keys
        if left is not None:
            window = (left, 0)  # read from the mask (for transformers' masks: sliding_window - 1)
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
                            deterministic=torch.are_deterministic_algorithms_enabled(),
                            **_kernel_options(window, softcap))
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
