"""Merging partial attention results by their log-sum-exp: the math behind split-KV decoding
(issue 6's combine kernel) and ring attention (issue 8), in numpy.

If O_i = softmax(S_i) V_i over a subset i of the keys, with lse_i = log(sum(exp(S_i))) per row,
then attention over the union of the disjoint subsets is

    lse = log(sum_i exp(lse_i)),   O = sum_i exp(lse_i - lse) * O_i.

Rows that saw no key in a part have lse_i = -inf and O_i = 0, and drop out; a row that saw no key
in any part keeps lse = -inf and O = 0 (the kernel's convention), never NaN.
Shapes follow the library: out (batch, seqlen, heads, head_dim), lse (batch, heads, seqlen).
"""

from __future__ import annotations

import numpy as np


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
