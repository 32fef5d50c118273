# A drop-in for FlashAttention-3's `flash_attn_interface` module (hopper/flash_attn_interface.py):
#
#     from hopattn import flash_attn_interface            # instead of: import flash_attn_interface
#     out = flash_attn_interface.flash_attn_func(q, k, v, causal=True)
#
# Same function names, argument names, argument order, defaults and return conventions. What
# hopattn computes maps one-to-one onto hopattn.attention, sliding windows (window_size) and
# softcapping (softcap) included, and the FP8 call of flash_attn_func, flash_attn_qkvpacked_func and
# flash_attn_varlen_func (e4m3 q, k, v with descales) onto hopattn.forward_fp8 / forward_fp8_varlen;
# every argument that asks for something hopattn does not do (FP8 descales elsewhere, rotary
# embeddings in the KV-cache call, ...) raises
# NotImplementedError naming the argument, before any tensor is touched: a caller must never get
# plain attention where it asked for something else.
# flash_attn_varlen_func maps onto hopattn.varlen_attention (differentiable on CUDA tensors);
# flash_attn_with_kvcache maps onto hopattn.attention_with_kvcache (forward only);
# flash_attn_combine onto hopattn.merge.combine_partials (torch arithmetic, no kernel);
# get_scheduler_metadata raises until hopattn has that feature.
#
# Like the rest of hopattn this module never imports torch (the tensors passed in come from the
# caller's torch), so importing it is cheap and works without torch.
from . import fp8, kvcache, merge, ops, varlen

__all__ = [
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_combine",
    "get_scheduler_metadata",
]



# --- unsupported arguments ----------------------------------------------------------------------


# Each rule: (argument name, predicate "is this value one hopattn supports", what hopattn supports).
# Ordered as in FA3's signatures, so the first offending argument is the one reported.
_RULES = {
    "qv": (lambda x: x is None, "None (no extra q.v term)"),
    "q_descale": (lambda x: x is None, "None (bf16/fp16 inputs; FP8 is hopattn.forward_fp8)"),
    "k_descale": (lambda x: x is None, "None (bf16/fp16 inputs; FP8 is hopattn.forward_fp8)"),
    "v_descale": (lambda x: x is None, "None (bf16/fp16 inputs; FP8 is hopattn.forward_fp8)"),
    "attention_chunk": (lambda x: x == 0, "0 (no chunked attention)"),
    # Two tuning hints whose maths is the same either way are accepted: num_splits 0 ("let the
    # library choose", which for hopattn is one split) and pack_gqa (hopattn already serves a GQA
    # group's query heads from one read of K/V). An explicit split count > 1 is not honoured.
    "num_splits": (lambda x: x in (0, 1), "0 or 1 (hopattn does not split the keys)"),
    "pack_gqa": (lambda x: x in (None, True, False), "None, True or False (a layout hint; hopattn's GQA layout is its own)"),
    "sm_margin": (lambda x: x == 0, "0 (hopattn uses every SM)"),
    # flash_attn_with_kvcache's serving features hopattn does not have.
    "rotary_cos": (lambda x: x is None, "None (apply rotary embeddings to q and k before the call)"),
    "rotary_sin": (lambda x: x is None, "None (apply rotary embeddings to q and k before the call)"),
    "cache_batch_idx": (lambda x: x is None, "None (cache row b serves batch entry b)"),
    "cache_leftpad": (lambda x: x is None, "None (every sequence starts at cache row 0)"),
    "cu_seqlens_q": (lambda x: x is None, "None (q is (batch, seqlen_q, nheads, headdim))"),
    "cu_seqlens_k_new": (lambda x: x is None, "None (k, v are (batch, seqlen_new, nheads_k, headdim))"),
    "max_seqlen_q": (lambda x: x is None, "None (no varlen q)"),
    "rotary_seqlens": (lambda x: x is None, "None (no rotary embeddings)"),
    "rotary_interleaved": (lambda x: x is True, "True, the default (no rotary embeddings)"),
    "scheduler_metadata": (lambda x: x is None, "None (hopattn schedules the splits itself)"),
}


def _reject_unsupported(function, **arguments):
    """Raise NotImplementedError naming the first argument whose value hopattn cannot honour."""
    for name, value in arguments.items():
        supported, what = _RULES[name]
        if not supported(value):
            raise NotImplementedError(
                f"{function}: {name}={_short(value)} is not supported by hopattn (supported: {what})"
            )


def _short(value):
    """A compact repr: tensors and arrays by type and shape, not by contents."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"<{type(value).__name__} of shape {tuple(shape)}>"
    return repr(value)


def _not_yet(function, feature, arguments, hint=""):
    raise NotImplementedError(f"{function}: {feature} ({arguments}) is not implemented in hopattn yet{hint}")


def _window(window_size, causal):
    """FA3's window_size as hopattn's: with causal FA3 sets the right bound to 0 whatever was passed
    (mha_fwd: `if (is_causal) { window_size_right = 0; }`), and callers rely on it, e.g. Transformers
    passes window_size=(w, w) with causal=True for sliding-window layers. hopattn rejects a right
    bound > 0 with causal, so do as FA3 does (-1 stays: with causal hopattn reads it as 0 too).
    The form is checked as hopattn.attention checks it."""
    window = ops._check_window(window_size)
    if causal and window[1] != -1:
        window = (window[0], 0)
    return window


# --- supported ----------------------------------------------------------------------------------


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=ops.NO_WINDOW,
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
    return_attn_probs=False,
):
    """FlashAttention-3's flash_attn_func on hopattn: exact softmax attention, differentiable.

    q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim) with nheads a
    multiple of nheads_k (MQA/GQA). causal: mask aligned to the bottom-right corner (a row that sees
    no key gives 0). window_size=(left, right): sliding window, bottom-right aligned, -1 unbounded
    (with causal the right bound is 0, as in FA3). softmax_scale defaults to 1/sqrt(headdim).
    softcap > 0: each score becomes softcap * tanh(softmax_scale * q.k / softcap) before the
    softmax, forward and backward, as in FA3; 0.0 is off (a finite float >= 0, else ValueError).
    deterministic makes the backward bitwise reproducible.

    Returns out (batch, seqlen_q, nheads, headdim); with return_attn_probs=True, (out, softmax_lse)
    with softmax_lse (batch, nheads, seqlen_q) float32, as FA3 does (no probabilities).

    FP8, as FA3: q, k, v torch.float8_e4m3fn with q_descale, k_descale, v_descale float32
    (batch, nheads_k) (None: 1), forward only, out bfloat16: runs hopattn.forward_fp8, the q
    descale of kv head j applying to the query heads of its group. Causal or full (no window and no
    softcap in hopattn's FP8 kernels: NotImplementedError).

    The other arguments exist for signature compatibility; any non-default value raises
    NotImplementedError naming it (see docs/python.md for what maps and what does not).
    """
    e4m3 = _is_e4m3(q)
    _reject_unsupported(
        "flash_attn_func",
        qv=qv, attention_chunk=attention_chunk, num_splits=num_splits, pack_gqa=pack_gqa, sm_margin=sm_margin,
        **({} if e4m3 else dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)),
    )
    window = _window(window_size, causal)
    softcap = ops._check_softcap(softcap)  # before the copies below touch a tensor
    if e4m3:
        return _fp8_forward("flash_attn_func", q, k, v, (q_descale, k_descale, v_descale), softmax_scale, causal,
                            window, softcap, return_attn_probs)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    return ops.attention(
        q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=bool(return_attn_probs),
        deterministic=deterministic, window_size=window, softcap=softcap,
    )


def _is_e4m3(t):
    """A torch.float8_e4m3fn tensor (told by its dtype's name: this module never imports torch)."""
    return str(getattr(t, "dtype", "")) == "torch.float8_e4m3fn"


def _fp8_forward(function, q, k, v, descales, softmax_scale, causal, window, softcap, return_attn_probs,
                 varlen_args=None):
    """FA3's FP8 call on hopattn.forward_fp8 (forward_fp8_varlen with varlen_args: cu_seqlens_q,
    cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k). FA3 takes one descale per
    (batch, kv head) for each of q, k and v; hopattn takes q's per (batch, query head, block) and k's
    per (batch, kv head, block): q's is repeated over each kv head's group of query heads, and both
    get a block axis of 1. The heads are dim 2 of fixed-length q/k and dim 1 of packed ones."""
    if window != ops.NO_WINDOW:
        raise NotImplementedError(
            f"{function}: window_size={window} with e4m3 inputs is not supported by hopattn (its FP8 forward has "
            "causal or full attention only)")
    if softcap != 0.0:
        raise NotImplementedError(f"{function}: softcap={softcap} with e4m3 inputs is not supported by hopattn")
    q_descale, k_descale, v_descale = descales
    heads = 1 if varlen_args is not None else 2
    group = int(q.shape[heads]) // max(int(k.shape[heads]), 1)
    qd = None if q_descale is None else _contiguous(_repeat_heads(q_descale, group)[:, :, None])
    kd = None if k_descale is None else _contiguous(k_descale[:, :, None])
    vd = None if v_descale is None else _contiguous(v_descale)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    if varlen_args is None:
        return fp8.forward_fp8(q, k, v, qd, kd, vd, causal=causal, softmax_scale=softmax_scale,
                               return_lse=bool(return_attn_probs))
    cu_q, cu_k, max_q, max_k, used_q, used_k = varlen_args
    return fp8.forward_fp8_varlen(q, k, v, cu_q, cu_k, max_q, max_k, qd, kd, vd, seqused_q=used_q, seqused_k=used_k,
                                  causal=causal, softmax_scale=softmax_scale, return_lse=bool(return_attn_probs))


def _repeat_heads(d, group):
    """(batch, heads_kv) -> (batch, heads_kv * group), each kv head's value repeated over its group."""
    if hasattr(d, "repeat_interleave"):
        return d.repeat_interleave(group, dim=1)
    import numpy as np

    return np.repeat(d, group, axis=1)


def _contiguous(t):
    if hasattr(t, "contiguous"):
        return t.contiguous()
    import numpy as np

    return np.ascontiguousarray(t)


def _last_dim_contiguous(t):
    """FA3 copies a torch tensor whose last dim is strided; hopattn.attention would reject it, so
    do as FA3 does. Other strides pass through untouched (hopattn reads them in place)."""
    if ops._torch_module_of(t) is not None and t.dim() > 0 and t.stride(-1) != 1:
        return t.contiguous()
    return t


def flash_attn_qkvpacked_func(
    qkv,
    softmax_scale=None,
    causal=False,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=ops.NO_WINDOW,
    attention_chunk=0,
    softcap=0.0,
    deterministic=False,
    num_heads_q=None,
    sm_margin=0,
    return_attn_probs=False,
):
    """flash_attn_func on one packed tensor: qkv (batch, seqlen, 3, nheads, headdim), or with
    num_heads_q (GQA) qkv (batch, seqlen, num_heads_q + 2 * nheads_k, headdim) holding q's heads,
    then k's, then v's. q, k and v are strided views of qkv: nothing is copied, and the gradient
    lands in one tensor shaped like qkv. window_size and softcap as for flash_attn_func. An e4m3
    qkv with (batch, nheads_k) descales is FA3's FP8 call, as in flash_attn_func (forward only)."""
    e4m3 = _is_e4m3(qkv)
    _reject_unsupported(
        "flash_attn_qkvpacked_func",
        attention_chunk=attention_chunk, sm_margin=sm_margin,
        **({} if e4m3 else dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)),
    )
    window = _window(window_size, causal)
    softcap = ops._check_softcap(softcap)
    q, k, v = _unpack_qkv(qkv, num_heads_q)
    if e4m3:
        return _fp8_forward("flash_attn_qkvpacked_func", q, k, v, (q_descale, k_descale, v_descale), softmax_scale,
                            causal, window, softcap, return_attn_probs)
    return ops.attention(
        q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=bool(return_attn_probs),
        deterministic=deterministic, window_size=window, softcap=softcap,
    )


def _unpack_qkv(qkv, num_heads_q):
    shape = tuple(getattr(qkv, "shape", ()))
    if len(shape) == 5 and shape[2] == 3:
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if len(shape) == 4 and num_heads_q is not None:
        heads_kv, odd = divmod(shape[2] - num_heads_q, 2)
        if num_heads_q <= 0 or heads_kv <= 0 or odd:
            raise ValueError(
                f"qkv: {shape[2]} heads do not split into num_heads_q={num_heads_q} plus two equal k and v parts"
            )
        k_start, v_start = num_heads_q, num_heads_q + heads_kv
        return qkv[:, :, :k_start], qkv[:, :, k_start:v_start], qkv[:, :, v_start:]
    raise ValueError(
        "qkv: expected shape (batch, seqlen, 3, nheads, headdim), or (batch, seqlen, "
        f"num_heads_q + 2 * nheads_k, headdim) with num_heads_q given; got {shape} with num_heads_q={num_heads_q}"
    )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    seqused_q=None,
    seqused_k=None,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=ops.NO_WINDOW,
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
    return_attn_probs=False,
):
    """FlashAttention-3's flash_attn_varlen_func on hopattn: attention over sequences of different
    lengths packed along the token dim (hopattn.varlen_attention); differentiable on CUDA tensors.

    q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim); cu_seqlens_q, cu_seqlens_k:
    int32 (batch + 1,) prefix sums of the sequence lengths; max_seqlen_q, max_seqlen_k: the longest
    sequence of each side; seqused_q, seqused_k: optional int32 (batch,), use only the first
    seqused[b] tokens of sequence b. causal is bottom-right aligned per sequence, and so is
    window_size=(left, right) (with causal the right bound is 0, as in FA3). softcap as for
    flash_attn_func (0.0: off).

    Returns out (total_q, nheads, headdim); with return_attn_probs=True, (out, softmax_lse) with
    softmax_lse (nheads, total_q) float32, as FA3 does (no probabilities).

    With grad mode on and q, k or v requiring grad, out is differentiable with respect to q, k and v
    (hopattn's sm90 varlen backward; no gradient for the index tensors). deterministic=True makes
    that backward bitwise reproducible, as in FA3 (no effect on the forward). FP8 (e4m3 q, k, v with
    (batch, nheads_k) descales) as in flash_attn_func, on hopattn.forward_fp8_varlen. Any other
    argument at a non-default value raises NotImplementedError naming it.
    """
    e4m3 = _is_e4m3(q)
    _reject_unsupported(
        "flash_attn_varlen_func",
        qv=qv, attention_chunk=attention_chunk, num_splits=num_splits, pack_gqa=pack_gqa, sm_margin=sm_margin,
        **({} if e4m3 else dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)),
    )
    window = _window(window_size, causal)
    softcap = ops._check_softcap(softcap)  # before the copies below touch a tensor
    if e4m3:
        varlen_args = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k)
        return _fp8_forward("flash_attn_varlen_func", q, k, v, (q_descale, k_descale, v_descale), softmax_scale,
                            causal, window, softcap, return_attn_probs, varlen_args)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    return varlen.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal, softmax_scale=softmax_scale,
        seqused_q=seqused_q, seqused_k=seqused_k, return_lse=bool(return_attn_probs), deterministic=deterministic,
        window_size=window, softcap=softcap,
    )


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    qv=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    page_table=None,
    cu_seqlens_q=None,
    cu_seqlens_k_new=None,
    max_seqlen_q=None,
    rotary_seqlens=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    softmax_scale=None,
    causal=False,
    window_size=ops.NO_WINDOW,
    attention_chunk=0,
    softcap=0.0,
    rotary_interleaved=True,
    scheduler_metadata=None,
    num_splits=0,
    pack_gqa=None,
    sm_margin=0,
    return_softmax_lse=False,
):
    """FlashAttention-3's flash_attn_with_kvcache on hopattn (hopattn.attention_with_kvcache):
    decoding attention against a contiguous or paged KV cache, with an optional in-place append.
    Forward only.

    q: (batch, seqlen_q, nheads, headdim). k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k,
    headdim), or with page_table (num_blocks, page_block_size, nheads_k, headdim). k, v: optional
    (batch, seqlen_new, nheads_k, headdim), written into the caches IN PLACE at cache_seqlens and
    then attended to. cache_seqlens: int32 (batch,) or an int (the same length for every sequence);
    None means the whole cache (seqlen_cache, or page_table's pages) is valid, and then k, v cannot
    be appended. page_table: int32 (batch, max_num_blocks_per_seq). causal: bottom-right aligned.
    window_size=(left, right): sliding window per sequence, bottom-right aligned over its cache
    after the append (query i of sequence b sees key j iff i + len_k - seqlen_q - left <= j <=
    i + len_k - seqlen_q + right, len_k = cache_seqlens[b] + seqlen_new), -1 unbounded; with
    causal the right bound is 0, as in FA3 (so (w, w) with causal=True is (w, 0)). A pair of ints,
    else TypeError naming window_size; bad values (below -1) raise ValueError from the library.
    num_splits: 0 lets hopattn choose; any value gives the same result up to fp32 rounding.

    Returns out (batch, seqlen_q, nheads, headdim); with return_softmax_lse=True (out, softmax_lse)
    with softmax_lse (batch, nheads, seqlen_q) float32, as FA3 does.

    softcap > 0: each score becomes softcap * tanh(softmax_scale * q.k / softcap) before the
    softmax, as in flash_attn_func (C ABI 8).

    Rotary embeddings, cache_batch_idx, cache_leftpad, varlen q/new keys, scheduler metadata
    and FP8 descales are not supported: any non-default value raises NotImplementedError naming the
    argument (see docs/python.md).
    """
    _reject_unsupported(
        "flash_attn_with_kvcache",
        qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new,
        max_seqlen_q=max_seqlen_q, rotary_seqlens=rotary_seqlens, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, attention_chunk=attention_chunk,
        rotary_interleaved=rotary_interleaved, scheduler_metadata=scheduler_metadata, pack_gqa=pack_gqa,
        sm_margin=sm_margin,
    )
    window = _window(window_size, causal)  # before any tensor is touched
    softcap = ops._check_softcap(softcap)
    # As FA3: q, k, v get a contiguous last dim; the caches are never copied (the append is in place).
    q, k, v = (None if t is None else _last_dim_contiguous(t) for t in (q, k, v))
    cache_seqlens = _cache_seqlens(q, k_cache, cache_seqlens, page_table, k)
    return kvcache.attention_with_kvcache(
        q, k_cache, v_cache, cache_seqlens, k=k, v=v, page_table=page_table, causal=causal,
        softmax_scale=softmax_scale, num_splits=num_splits, return_lse=bool(return_softmax_lse),
        window_size=window, softcap=softcap,
    )


def _cache_seqlens(q, k_cache, cache_seqlens, page_table, k):
    """cache_seqlens as hopattn takes it: an int is broadcast to int32 (batch,) on q's device (as
    FA3 does); None means the whole cache; a tensor or array passes through unchanged."""
    if cache_seqlens is None:
        if k is not None:
            raise NotImplementedError(
                "flash_attn_with_kvcache: k, v with cache_seqlens=None is not supported by hopattn "
                "(the whole cache would be in use, leaving no room to append; pass cache_seqlens)"
            )
        shape = getattr(k_cache, "shape", None)
        if shape is None or len(shape) < 2:
            return cache_seqlens  # attention_with_kvcache reports the bad argument
        if page_table is None:
            cache_seqlens = int(shape[1])
        else:
            cache_seqlens = int(page_table.shape[-1]) * int(shape[1])
    torch = ops._torch_module_of(q)
    if (
        isinstance(cache_seqlens, bool)
        or not hasattr(cache_seqlens, "__index__")
        or ops._torch_module_of(cache_seqlens) is not None
        or ops._is_numpy_array(cache_seqlens)
    ):
        return cache_seqlens  # a tensor or array (or something attention_with_kvcache reports)
    batch = int(getattr(q, "shape", (0,))[0])
    if torch is not None:
        return torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=q.device)
    if ops._is_numpy_array(q):
        import numpy as np

        return np.full((batch,), int(cache_seqlens), dtype=np.int32)
    return cache_seqlens


# --- the other serving entry points -------------------------------------------------------


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """FA3's merge of split-KV partial results: hopattn.merge.combine_partials (float32 tensor
    arithmetic in torch on the partials' device, split by split; no dedicated kernel).

    out_partial float32 (num_splits, batch, seqlen, nheads, headdim), lse_partial float32
    (num_splits, batch, seqlen, nheads) natural-log (a split that saw none of a row's keys: -inf).
    Returns (out, softmax_lse) as FA3's fwd_combine: out (batch, seqlen, nheads, headdim) in
    out_dtype (float32, bfloat16 or float16; default float32), written into `out` when given;
    softmax_lse float32 (batch, seqlen, nheads). A row no split saw gets out 0 and lse -inf
    (FA3's kernel writes +inf there)."""
    return merge.combine_partials(out_partial, lse_partial, out=out, out_dtype=out_dtype)


def get_scheduler_metadata(*args, **kwargs):
    """FA3's precomputed decode schedule, an input of flash_attn_with_kvcache. Not implemented;
    always raises NotImplementedError."""
    _not_yet("get_scheduler_metadata", "the KV-cache scheduler", "scheduler_metadata")
