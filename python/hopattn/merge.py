"""Merging partial attention results by their log-sum-exp: the math behind split-KV decoding
(issue 6's combine kernel) and ring attention (issue 8), in numpy.

If O_i = softmax(S_i) V_i over a subset i of the keys, with lse_i = log(sum(exp(S_i))) per row,
then attention over the union of the disjoint subsets is

    lse = log(sum_i exp(lse_i)),   O = sum_i exp(lse_i - lse) * O_i.

Rows that saw no key in a part have lse_i = -inf and O_i = 0, and drop out; a row that saw no key
in any part keeps lse = -inf and O = 0 (the kernel's convention), never NaN.
Shapes follow the library: out (batch, seqlen, heads, head_dim), lse (batch, heads, seqlen).
combine_partials is the same merge in FlashAttention-3's split-KV layout (its flash_attn_combine),
in float32 on torch tensors or numpy arrays.
"""

from __future__ import annotations

import numpy as np

from .ops import _torch_module_of


def merge_partials(outs, lses):
    """Merges partial results computed over disjoint key sets. Accumulates in float64.

    outs: sequence of arrays (batch, seqlen_q, heads, head_dim); lses: matching sequence of
    (batch, heads, seqlen_q) natural-log LSEs. Returns (out, lse) of the whole key set.
    """
    if len(outs) == 0 or len(outs) != len(lses):
        raise ValueError(f"need as many partial outputs as LSEs, got {len(outs)} and {len(lses)}")
    lse_stack = np.stack([np.asarray(l, dtype=np.float64) for l in lses])  # (parts, b, h, s)
    m = lse_stack.max(axis=0)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lse_stack - m_safe)  # exp(-inf) = 0 for empty parts
    total = w.sum(axis=0)
    lse = np.where(total > 0, m_safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
    weights = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)  # (parts, b, h, s)
    out = sum(
        np.asarray(o, dtype=np.float64) * weights[i].transpose(0, 2, 1)[..., None] for i, o in enumerate(outs)
    )
    return out, lse


# --- FA3's split-KV combine layout, on torch tensors or numpy arrays ---------------------------------

# The output types a combine may write, by the name of the dtype (torch's or numpy's); FA3 allows
# these three (numpy has no bfloat16).
_COMBINE_OUT_DTYPES = ("float32", "bfloat16", "float16")


def _dtype_name(dtype):
    """'float32' for torch.float32, numpy.float32 and np.dtype('float32') alike."""
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch."):]
    try:
        return np.dtype(dtype).name
    except TypeError:
        return text


class _CombineBackend:
    """The few array operations combine_partials needs, on torch tensors (any device: torch is
    taken from the tensor, never imported here) or on numpy arrays."""

    def __init__(self, like):
        self.torch = _torch_module_of(like)
        self.xp = self.torch if self.torch is not None else np

    def is_array(self, x):
        return isinstance(x, self.torch.Tensor) if self.torch is not None else isinstance(x, np.ndarray)

    def amax0(self, x):
        return x.amax(dim=0) if self.torch is not None else x.max(axis=0)

    def where_zero(self, mask, x):
        """x with 0 where mask holds (without reading x there: 0 * inf or NaN stays out)."""
        return x.masked_fill(mask, 0.0) if self.torch is not None else np.where(mask, 0.0, x).astype(x.dtype)

    def empty(self, shape, dtype, like):
        if self.torch is not None:
            return self.torch.empty(shape, dtype=dtype, device=like.device)
        return np.empty(shape, dtype=dtype)

    def out_dtype(self, name):
        return getattr(self.torch, name) if self.torch is not None else np.dtype(name)


def combine_partials(out_partial, lse_partial, out=None, out_dtype=None):
    """Merges split-KV partial results in FlashAttention-3's layout (its flash_attn_combine).

    out_partial: float32 (num_splits, batch, seqlen, heads, head_dim), split i's normalised output;
    lse_partial: float32 (num_splits, batch, seqlen, heads), its natural-log LSE (any strides: FA3's
    own is a transposed view of (num_splits, batch, heads, seqlen)); a split that saw no key of a
    row has lse -inf there and drops out, whatever its output holds. Torch tensors (on any device)
    or numpy arrays, not mixed.

    Returns (out, lse): out (batch, seqlen, heads, head_dim) in out_dtype (float32, bfloat16 or
    float16; default float32), written into `out` when given (its dtype must be that type), and
    lse float32 (batch, seqlen, heads), a transposed view of a (batch, heads, seqlen) buffer as
    FA3's. Computed in float32, as FA3's kernel, split by split. A row no split saw gets out 0 and
    lse -inf (hopattn's convention; FA3's kernel writes +inf there); a NaN or +inf LSE gives NaN.
    """
    be = _CombineBackend(out_partial)
    for name, x in (("out_partial", out_partial), ("lse_partial", lse_partial)):
        if not be.is_array(x):
            raise TypeError(f"{name}: expected a torch tensor or numpy array like out_partial, got {type(x).__name__}")
        if _dtype_name(x.dtype) != "float32":
            raise TypeError(f"{name}: dtype must be float32 (FA3's partials), got {_dtype_name(x.dtype)}")
    shape = tuple(out_partial.shape)
    if len(shape) != 5 or shape[0] < 1:
        raise ValueError(f"out_partial: expected shape (num_splits >= 1, batch, seqlen, nheads, headdim), got {shape}")
    splits, batch, seqlen, heads, head_dim = shape
    if tuple(lse_partial.shape) != shape[:4]:
        raise ValueError(f"lse_partial: expected shape {shape[:4]} (num_splits, batch, seqlen, nheads), "
                         f"got {tuple(lse_partial.shape)}")
    if be.torch is not None and lse_partial.device != out_partial.device:
        raise ValueError(f"lse_partial: on {lse_partial.device}, out_partial on {out_partial.device}")
    name = "float32" if out_dtype is None else _dtype_name(out_dtype)
    if name not in _COMBINE_OUT_DTYPES or (be.torch is None and name == "bfloat16"):
        raise ValueError(f"out_dtype: must be float32, bfloat16 or float16 (numpy: float32 or float16), got {out_dtype!r}")
    if out is not None:
        if not be.is_array(out):
            raise TypeError(f"out: expected the same kind of array as out_partial, got {type(out).__name__}")
        if tuple(out.shape) != (batch, seqlen, heads, head_dim):
            raise ValueError(f"out: expected shape {(batch, seqlen, heads, head_dim)}, got {tuple(out.shape)}")
        if _dtype_name(out.dtype) != name:
            raise TypeError(f"out: dtype {_dtype_name(out.dtype)} is not the output type {name} (set out_dtype)")
        if be.torch is not None and out.device != out_partial.device:
            raise ValueError(f"out: on {out.device}, out_partial on {out_partial.device}")

    xp = be.xp
    with np.errstate(divide="ignore", invalid="ignore"):  # numpy: log(0) = -inf and NaN inputs are meant
        top = be.amax0(lse_partial)  # (batch, seqlen, heads)
        top = be.where_zero(xp.isneginf(top), top)  # a row no split saw: exp(-inf - 0) = 0, not NaN
        weight = xp.exp(lse_partial - top)  # (splits, ...): 0 for a split that saw nothing
        total = weight.sum(0)
        lse = top + xp.log(total)  # -inf where total is 0, NaN where an LSE was NaN or +inf
        safe_total = total + (total == 0)  # 1 where no split saw the row: its weights are all 0
        acc = None
        for i in range(splits):
            scale = (weight[i] / safe_total)[..., None]
            part = be.where_zero(scale == 0, out_partial[i] * scale)
            acc = part if acc is None else acc + part
    lse_buffer = be.empty((batch, heads, seqlen), lse.dtype, out_partial).swapaxes(1, 2)
    lse_buffer[...] = lse
    if out is None:
        out = be.empty((batch, seqlen, heads, head_dim), be.out_dtype(name), out_partial)
    out[...] = acc
    return out, lse_buffer
