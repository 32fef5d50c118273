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


# --- combine_partials: the same merge in FlashAttention-3's split-KV layout -------------------------

from hopattn.merge import combine_partials  # noqa: E402


def fa3_partials(parts, seed=0, mask=None, sq=9, sk=40, heads=3, head_dim=16):
    """Attention over `parts` key chunks in FA3's partial layout: out_partial float32 (parts, b, s,
    h, d) and lse_partial float32 (parts, b, s, h) as a transposed view of (parts, b, h, s), as FA3
    stores it; plus the whole attention (fp64) and its LSE (b, h, s)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, sq, heads, head_dim)) * 2
    k, v = rng.standard_normal((2, sk, heads, head_dim)), rng.standard_normal((2, sk, heads, head_dim))
    whole = attention_with_lse(q, k, v, mask)
    cuts = np.linspace(0, sk, parts + 1).astype(int)
    pieces = [attention_with_lse(q, k[:, a:b], v[:, a:b], None if mask is None else mask[:, a:b])
              for a, b in zip(cuts[:-1], cuts[1:])]
    out_partial = np.stack([p[0] for p in pieces]).astype(np.float32)
    lse_partial = np.stack([p[1] for p in pieces]).astype(np.float32).swapaxes(2, 3)
    return out_partial, lse_partial, whole


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_combine_partials_equals_whole_attention(parts):
    out_partial, lse_partial, (whole, whole_lse) = fa3_partials(parts, seed=parts)
    out, lse = combine_partials(out_partial, lse_partial)
    assert out.dtype == np.float32 and out.shape == whole.shape
    np.testing.assert_allclose(out, whole, atol=2e-6)
    assert lse.shape == (2, 9, 3) and lse.dtype == np.float32
    assert lse.swapaxes(1, 2).flags.c_contiguous  # FA3's: a transposed view of (batch, heads, seqlen)
    np.testing.assert_allclose(lse.swapaxes(1, 2), whole_lse, rtol=1e-6, atol=1e-5)
    out2, lse2 = merge_partials(list(out_partial.astype(np.float64)), list(lse_partial.swapaxes(2, 3)))
    np.testing.assert_allclose(out, out2, atol=2e-6)


def test_combine_partials_rows_no_split_saw_are_zero_whatever_the_partials_hold():
    # Causal, seqlen_q > seqlen_k: the first rows see no key in any split; split 1 misses the early
    # rows. FA3's kernels leave such a split's output unspecified: garbage (NaN, inf) must not leak.
    sq, sk = 16, 12
    mask = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
    out_partial, lse_partial, (whole, whole_lse) = fa3_partials(2, seed=3, mask=mask, sq=sq, sk=sk)
    dead = np.isneginf(lse_partial)[..., None] & np.ones_like(out_partial, dtype=bool)
    assert dead[0].any() and dead[1].any() and not dead.all()
    out_partial[dead] = np.where(np.arange(dead.sum()) % 2, np.nan, np.inf)
    out, lse = combine_partials(out_partial, lse_partial)
    assert not np.isnan(out).any() and np.all(out[:, :4] == 0)
    np.testing.assert_array_equal(np.isneginf(lse.swapaxes(1, 2)), np.isneginf(whole_lse))
    np.testing.assert_allclose(out, whole, atol=2e-6)


def test_combine_partials_a_nan_or_inf_lse_gives_nan_not_an_empty_row():
    out_partial, lse_partial, _ = fa3_partials(3, seed=4)
    lse_partial = lse_partial.copy()
    lse_partial[1, 0, 2, 1] = np.nan
    lse_partial[2, 1, 3, 0] = np.inf
    out, lse = combine_partials(out_partial, lse_partial)
    for b, s, h in ((0, 2, 1), (1, 3, 0)):
        assert np.isnan(lse[b, s, h]) and np.isnan(out[b, s, h]).all()
    assert np.isfinite(lse).sum() == lse.size - 2 and np.isfinite(out).sum() == out.size - 2 * 16


def test_combine_partials_is_stable_for_large_lse():
    out_partial = np.stack([np.ones((1, 1, 1, 4)), 3 * np.ones((1, 1, 1, 4))]).astype(np.float32)
    out, lse = combine_partials(out_partial, np.full((2, 1, 1, 1), 1e4, np.float32))
    np.testing.assert_allclose(out, 2 * np.ones((1, 1, 1, 4)))
    np.testing.assert_allclose(lse, np.float32(1e4) + np.log(2), rtol=1e-7)


def test_combine_partials_writes_into_out_in_out_dtype():
    out_partial, lse_partial, (whole, _) = fa3_partials(2, seed=5)
    out = np.full(whole.shape, np.nan, np.float16)
    got, _ = combine_partials(out_partial, lse_partial, out=out, out_dtype=np.float16)
    assert got is out and out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), whole, atol=2e-3)
    got, _ = combine_partials(out_partial, lse_partial, out_dtype="float16")
    np.testing.assert_array_equal(got, out)


@pytest.mark.parametrize("change, error, match", [
    (dict(out_partial=lambda o: o.astype(np.float64)), TypeError, "out_partial: dtype must be float32"),
    (dict(lse_partial=lambda l: l.astype(np.float16)), TypeError, "lse_partial: dtype must be float32"),
    (dict(out_partial=lambda o: o[0]), ValueError, "out_partial: expected shape"),
    (dict(out_partial=lambda o: o[:0]), ValueError, "num_splits >= 1"),
    (dict(lse_partial=lambda l: l[:, :, :, :2]), ValueError, "lse_partial: expected shape"),
    (dict(lse_partial=lambda l: l.swapaxes(2, 3)), ValueError, "lse_partial: expected shape"),
    (dict(lse_partial=lambda l: l.tolist()), TypeError, "lse_partial: expected a torch tensor or numpy array"),
    (dict(out_dtype="bfloat16"), ValueError, "out_dtype: must be float32, bfloat16 or float16"),
    (dict(out_dtype=np.dtype("int32")), ValueError, "out_dtype"),
    (dict(out=lambda w: np.zeros(w.shape, np.float16)), TypeError, "out: dtype float16 is not the output type float32"),
    (dict(out=lambda w: np.zeros(w.shape[:3] + (8,), np.float32)), ValueError, "out: expected shape"),
    (dict(out=lambda w: w.tolist()), TypeError, "out: expected the same kind of array"),
])
def test_combine_partials_rejects_bad_arguments_by_name(change, error, match):
    out_partial, lse_partial, (whole, _) = fa3_partials(2, seed=6)
    args = dict(out_partial=out_partial, lse_partial=lse_partial, out=None, out_dtype=None)
    for name, value in change.items():
        if name == "out":
            args[name] = value(np.zeros(whole.shape, np.float32))
        elif callable(value):
            args[name] = value(args[name])
        else:
            args[name] = value
    with pytest.raises(error, match=match):
        combine_partials(**args)
