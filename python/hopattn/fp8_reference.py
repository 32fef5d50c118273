"""FP8 (e4m3) attention, simulated in numpy: the oracle and the accuracy model for the FP8 kernel.

FlashAttention-3's FP8 forward quantises Q, K and V to e4m3 with scales, converts P to e4m3 in
registers before the P·V GEMM, and keeps the row sums and O in fp32. Two techniques bound the
error (Shah et al. 2024, section 3.3):

- block quantisation: one scale per tile of rows (the tiles the kernel reads) instead of one per
  tensor, so a large value only costs precision in its own tile;
- incoherent processing: Q and K are multiplied by the same random orthogonal matrix
  M = diag(random signs) @ Hadamard / sqrt(d) before quantising. Q Mᵀ (K Mᵀ)ᵀ = Q Kᵀ exactly, but
  an outlier feature is spread over all d coordinates, so the per-block maxima shrink.
  (Q M)(K M)ᵀ = Q Kᵀ for any orthogonal M; the rows are multiplied as x @ M.

Everything here is plain numpy in float64 apart from the simulated e4m3 rounding, so it runs on a
machine without a GPU (tests and CI) and serves as the reference the kernel is checked against.
Shapes follow the library: (batch, seqlen, heads, head_dim).
"""

from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0  # largest finite e4m3fn value (S.1111.110)
_E4M3_MIN_NORMAL = 2.0**-6
_E4M3_SUBNORMAL_STEP = 2.0**-9
_E4M3_MANTISSA_BITS = 3


def round_to_e4m3(x: np.ndarray) -> np.ndarray:
    """Rounds to the nearest e4m3fn value (ties to even), saturating at ±448 (the kernel's
    cvt.rn.satfinite). Returns float64 values that are exactly representable in e4m3fn."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    # Spacing of representable values around a: 2^(e - 3) in the normal range, 2^-9 below it.
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    quantum = np.where(a >= _E4M3_MIN_NORMAL, np.exp2(e - _E4M3_MANTISSA_BITS), _E4M3_SUBNORMAL_STEP)
    r = np.minimum(np.rint(a / quantum) * quantum, E4M3_MAX)  # np.rint rounds half to even
    return np.copysign(r, x)


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Rounds to the nearest bfloat16 (8 significant bits, ties to even), as the 16-bit P V path
    stores V and P (attention_fp8 with quantize_v=False). Finite inputs within float32's range; via
    float32, so a float64 value within half a float32 ulp of a bf16 tie may round the other way,
    which no error measurement here can see. Returns float64."""
    bits = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def hadamard(d: int) -> np.ndarray:
    """The d x d Sylvester Hadamard matrix (entries ±1); d must be a power of two."""
    if d < 1 or d & (d - 1):
        raise ValueError(f"head_dim must be a power of two for the Hadamard rotation, got {d}")
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def rotation_signs(d: int, seed: int) -> np.ndarray:
    """The ±1 diagonal of the rotation: sign i is -1 iff the top bit of splitmix64(seed * 2^32 + i)
    is set. A definition a CUDA kernel can reproduce exactly (no library generator involved)."""
    return np.array([-1.0 if _splitmix64(((seed & 0xFFFFFFFF) << 32) + i) >> 63 else 1.0 for i in range(d)])


def random_rotation(d: int, seed: int) -> np.ndarray:
    """M = diag(rotation_signs) @ H / sqrt(d): orthogonal, and the same seed gives the same M."""
    return rotation_signs(d, seed)[:, None] * hadamard(d) / np.sqrt(d)


def quantize(x: np.ndarray, granularity: str, block_rows: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scales x (batch, seqlen, heads, d) into e4m3 range and rounds it.

    granularity: "tensor" (one scale), "head" (one per batch and head, as FlashAttention-3's
    public code), or "block" (one per batch, head and tile of `block_rows` rows).
    Returns (dequantised values, scales); the scale maps the block's |max| to 448.
    """
    b, s, h, d = x.shape
    if granularity == "tensor":
        amax = np.abs(x).max(keepdims=True)  # (1, 1, 1, 1)
        scale = np.where(amax > 0, amax / E4M3_MAX, 1.0)
        return round_to_e4m3(x / scale) * scale, scale
    if granularity == "head":
        amax = np.abs(x).max(axis=(1, 3), keepdims=True)  # (b, 1, h, 1)
        scale = np.where(amax > 0, amax / E4M3_MAX, 1.0)
        return round_to_e4m3(x / scale) * scale, scale
    if granularity == "block":
        if block_rows <= 0:
            raise ValueError("block quantisation needs block_rows > 0")
        nblk = -(-s // block_rows)
        pad = nblk * block_rows - s
        xp = np.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0)))
        xb = xp.reshape(b, nblk, block_rows, h, d)
        amax = np.abs(xb).max(axis=(2, 4), keepdims=True)  # (b, nblk, 1, h, 1)
        scale = np.where(amax > 0, amax / E4M3_MAX, 1.0)
        deq = (round_to_e4m3(xb / scale) * scale).reshape(b, nblk * block_rows, h, d)[:, :s]
        return deq, scale
    raise ValueError(f"unknown granularity {granularity!r}")


def _attention(q, k, v, causal, scale, mask, round_p):
    """float64 attention and natural-log LSE; GQA by head groups; bottom-right causal alignment;
    mask (seqlen_q, seqlen_k), True = visible. round_p, if given, rounds P = exp(s - rowmax) before
    P·V while the row sum keeps the unrounded P. Rows that see no key: O = 0, lse = -inf."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = hq // hk
    kk = np.repeat(k, g, axis=2)
    vv = np.repeat(v, g, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * (1.0 / np.sqrt(d) if scale is None else scale)
    if causal:
        mask_c = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        mask = mask_c if mask is None else mask & mask_c
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    mx_safe = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - mx_safe)
    total = p.sum(axis=-1)
    seen = total > 0
    lse = np.where(seen, mx_safe[..., 0] + np.log(np.where(seen, total, 1.0)), -np.inf)
    pv = round_p(p) if round_p is not None else p
    out = np.einsum("bhqk,bkhd->bqhd", pv, vv) / np.where(seen, total, 1.0).transpose(0, 2, 1)[..., None]
    return out, lse


def attention_fp64(q, k, v, causal=False, scale=None, mask=None, return_lse=False):
    """Exact attention in float64. mask (seqlen_q, seqlen_k), True = visible, combines with causal.
    Returns O (batch, seqlen_q, heads, d), and lse (batch, heads, seqlen_q) when return_lse."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    out, lse = _attention(q, k, v, causal, scale, mask, None)
    return (out, lse) if return_lse else out


def fp8_inputs(q, k, v, incoherent=True, granularity="block", block_m=128, block_n=128, seed=0, quantize_v=True):
    """Q, K, V as the FP8 kernel sees them, dequantised to float64: Q and K rotated by the same
    random_rotation(d, seed) when `incoherent`, Q quantised in tiles of block_m rows, K and V in
    tiles of block_n rows (for granularity="block"; see quantize for the others). quantize_v=False
    (the 16-bit P V kernels): V is only rounded to bf16."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    if incoherent:
        # x @ M = (x * signs) @ H / sqrt(d): the signs act before the Hadamard transform. (x @ M^T
        # would flip the signs of H's outputs only, leave every |value| and so the quantisation
        # error unchanged, and make the seed irrelevant.)
        m = random_rotation(q.shape[-1], seed)
        q, k = q @ m, k @ m
    vd = quantize(v, granularity, block_n)[0] if quantize_v else round_to_bf16(v)
    return quantize(q, granularity, block_m)[0], quantize(k, granularity, block_n)[0], vd


# The kernel converts 2^P_EXPONENT_BIAS * P to e4m3 (BlockScaledSoftmax in src/sm90/ws/softmax.cuh):
# P in (0, 1] would put most probabilities of a diffuse row below e4m3's smallest normal, 2^-6.
P_EXPONENT_BIAS = 8


def round_p_to_e4m3(p: np.ndarray) -> np.ndarray:
    """P as the kernel's P·V GEMM sees it: 2^8 P rounded to e4m3, scaled back."""
    return round_to_e4m3(p * 2.0**P_EXPONENT_BIAS) * 2.0**-P_EXPONENT_BIAS


def attention_from_fp8(qd, kd, vd, causal=False, quantize_p=True, p_format="e4m3"):
    """The FP8 kernel's arithmetic on dequantised inputs: S and the softmax in float64, P (which
    is exp(s - rowmax) in (0, 1]) rounded as round_p_to_e4m3 before P·V when `quantize_p` (or to
    bf16 with p_format="bf16", the 16-bit P V kernels), the row sum taken over the unrounded P (the
    kernel sums fp32 P). Rows are independent when not causal, so a caller may pass a slice of
    query rows to bound memory."""
    if p_format not in ("e4m3", "bf16"):
        raise ValueError(f"p_format must be 'e4m3' or 'bf16', got {p_format!r}")
    round_p = (round_p_to_e4m3 if p_format == "e4m3" else round_to_bf16) if quantize_p else None
    return _attention(qd, kd, vd, causal, None, None, round_p)[0]


def attention_fp8_simulated(
    q,
    k,
    v,
    causal=False,
    incoherent=True,
    granularity="block",
    block_m=128,
    block_n=128,
    seed=0,
    quantize_p=True,
    quantize_v=True,
):
    """FP8 attention as the kernel computes it (fp8_inputs, then attention_from_fp8); with
    quantize_v=False as attention_fp8(quantize_v=False) does: V and P in bf16.
    Returns O (batch, seqlen_q, heads, d) in float64."""
    qd, kd, vd = fp8_inputs(q, k, v, incoherent, granularity, block_m, block_n, seed, quantize_v)
    return attention_from_fp8(qd, kd, vd, causal, quantize_p, "e4m3" if quantize_v else "bf16")


def outlier_inputs(shape, rng, outlier_std=10.0, outlier_prob=0.001):
    """The paper's accuracy protocol: N(0, 1) + N(0, outlier_std^2) * Bernoulli(outlier_prob)."""
    base = rng.standard_normal(shape)
    spikes = rng.standard_normal(shape) * outlier_std * (rng.random(shape) < outlier_prob)
    return base + spikes


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))
