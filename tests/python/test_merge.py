# LSE merging of partial attention (hopattn.merge): attention over K/V split into parts, merged,
# must equal attention over the whole, including rows that see no key in some or all parts.
import numpy as np
import pytest

from hopattn.fp8_reference import attention_fp64
from hopattn.merge import merge_partials


def attention_with_lse(q, k, v, mask=None):
    return attention_fp64(q, k, v, mask=mask, return_lse=True)


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_merge_equals_whole(parts):
    rng = np.random.default_rng(parts)
    q = rng.standard_normal((2, 9, 3, 16)) * 2
    k, v = rng.standard_normal((2, 40, 3, 16)), rng.standard_normal((2, 40, 3, 16))
    whole, whole_lse = attention_with_lse(q, k, v)
    cuts = np.linspace(0, 40, parts + 1).astype(int)
    pieces = [attention_with_lse(q, k[:, a:b], v[:, a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    out, lse = merge_partials([p[0] for p in pieces], [p[1] for p in pieces])
    np.testing.assert_allclose(out, whole, atol=1e-12)
    np.testing.assert_allclose(lse, whole_lse, atol=1e-12)


def test_merge_with_causal_parts_and_empty_rows():
    # Causal over 12 keys split in two: early rows see nothing of the second half (lse -inf there);
    # with seqlen_q > seqlen_k the first rows see no key at all and must stay O = 0, lse = -inf.
    rng = np.random.default_rng(0)
    sq, sk = 16, 12
    q = rng.standard_normal((1, sq, 2, 8))
    k, v = rng.standard_normal((1, sk, 2, 8)), rng.standard_normal((1, sk, 2, 8))
    mask = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
    whole, whole_lse = attention_with_lse(q, k, v, mask)
    halves = [
        attention_with_lse(q, k[:, :6], v[:, :6], mask[:, :6]),
        attention_with_lse(q, k[:, 6:], v[:, 6:], mask[:, 6:]),
    ]
    out, lse = merge_partials([h[0] for h in halves], [h[1] for h in halves])
    assert np.isneginf(whole_lse[0, 0, 0]) and np.all(out[0, 0] == 0)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(whole_lse))
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, whole, atol=1e-12)
    np.testing.assert_allclose(lse[np.isfinite(lse)], whole_lse[np.isfinite(whole_lse)], atol=1e-12)


def test_merge_is_stable_for_large_lse():
    # LSEs near 1e4 would overflow exp() without subtracting the max first.
    o1, o2 = np.ones((1, 1, 1, 4)), 3 * np.ones((1, 1, 1, 4))
    out, lse = merge_partials([o1, o2], [np.full((1, 1, 1), 1e4), np.full((1, 1, 1), 1e4)])
    np.testing.assert_allclose(out, 2 * np.ones((1, 1, 1, 4)))
    np.testing.assert_allclose(lse, 1e4 + np.log(2))


def test_merge_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="as many partial outputs as LSEs"):
        merge_partials([np.zeros((1, 1, 1, 4))], [])
