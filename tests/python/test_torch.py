# hopattn.attention on torch CUDA tensors (the sm90 kernels) against torch's fp32 SDPA math
# backend: dtypes x head dims x causal x shapes, lse, streams, strided views and error cases.
# Skips without torch, without an sm_90 GPU, or without the library (fails if it is required).
import math

import pytest

torch = pytest.importorskip("torch")

import hopattn  # noqa: E402
from hopattn_test_support import require_library_or_skip_module  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"needs an sm_90 GPU, found {torch.cuda.get_device_name()}", allow_module_level=True)
require_library_or_skip_module()

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REL_L2_TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 3e-3}
BUILT_KERNELS = {(dtype, head_dim) for direction, dtype, head_dim in hopattn.build_info()["kernels"] if direction == "fwd"}


def skip_unless_built(dtype_name, head_dim):
    if (dtype_name, head_dim) not in BUILT_KERNELS:
        pytest.skip(f"fwd:{dtype_name}:{head_dim} not in this build ({hopattn.build_info()['instantiations']})")


def random_qkv(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(s, h):
        return torch.randn((batch, s, h, head_dim), generator=gen, device="cuda", dtype=torch.float32).to(dtype)

    return rand(seqlen_q, heads_q), rand(seqlen_k, heads_kv), rand(seqlen_k, heads_kv)


def visible_mask(seqlen_q, seqlen_k, causal, device="cuda"):
    """(sq, sk) bool; bottom-right aligned causal: query i sees key j iff j <= i + sk - sq."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    if not causal:
        return torch.ones((seqlen_q, seqlen_k), dtype=torch.bool, device=device)
    return j <= i + (seqlen_k - seqlen_q)


def sdpa_reference(q, k, v, causal, softmax_scale=None):
    """fp32 math-backend SDPA on the same (rounded) inputs: returns out (b, sq, hq, d), lse (b, hq, sq)."""
    seqlen_q, heads_q, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.float().transpose(1, 2).repeat_interleave(group, dim=1)
    mask = visible_mask(seqlen_q, seqlen_k, causal)
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    # Rows that see no key: our contract is 0 (SDPA versions differ between NaN and 0).
    row_has_key = mask.any(dim=1)[:, None]
    out = torch.where(row_has_key, out, torch.zeros_like(out))
    scores = (qf @ kf.transpose(-1, -2)) * scale
    lse = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return out.transpose(1, 2), lse


def rel_l2(got, want):
    got, want = got.double(), want.double()
    denom = want.norm()
    if denom == 0:
        return got.norm().item()
    return ((got - want).norm() / denom).item()


def assert_matches(q, k, v, causal, softmax_scale=None, fn=hopattn.attention):
    out, lse = fn(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    want_out, want_lse = sdpa_reference(q, k, v, causal, softmax_scale)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    assert torch.isfinite(out).all()
    err = rel_l2(out, want_out)
    assert err < REL_L2_TOLERANCE[q.dtype], f"rel-L2 {err:.3e}"
    # Same -inf pattern, finite values close (both sum fp32 products of the same rounded inputs).
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[finite], want_lse[finite], rtol=1e-3, atol=1e-3)
    return out, lse


SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv)
    (1, 1, 1, 2, 2),
    (2, 17, 17, 4, 4),
    (1, 1000, 1000, 2, 2),
    (2, 128, 1000, 4, 4),  # sq < sk
    (1, 1000, 128, 2, 2),  # sq > sk: causal rows i < 872 see no key
    (2, 17, 300, 8, 2),  # GQA 8:2
    (1, 1, 1000, 8, 2),  # one query (decode-like) with GQA
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_matches_sdpa(dtype_name, head_dim, causal, shape):
    skip_unless_built(dtype_name, head_dim)
    q, k, v = random_qkv(*shape, head_dim, DTYPES[dtype_name])
    assert_matches(q, k, v, causal)


def first_built():
    if not BUILT_KERNELS:
        pytest.skip("no sm90 kernels in this build")
    dtype_name, head_dim = sorted(BUILT_KERNELS, key=lambda x: (x[1] != 128, x))[0]
    return DTYPES[dtype_name], head_dim


def test_tail_split_shapes_match_and_repeat_bitwise():
    # Fewer query tiles than SMs, many key blocks: hopattn.attention passes a workspace and the
    # kernel splits every tile along its keys (hopattn.hpp, forward's workspace form). The merge
    # sums the pieces in a fixed order, so repeated calls agree bit for bit.
    dtype, head_dim = first_built()
    for shape in [(1, 300, 4097, 8, 2), (2, 1000, 2500, 4, 4)]:
        q, k, v = random_qkv(*shape, head_dim, dtype, seed=7)
        out, lse = assert_matches(q, k, v, causal=False)
        for _ in range(3):
            again, again_lse = hopattn.attention(q, k, v, causal=False, return_lse=True)
            assert torch.equal(again, out) and torch.equal(again_lse, lse)


def test_custom_softmax_scale():
    dtype, head_dim = first_built()
    q, k, v = random_qkv(2, 100, 150, 4, 2, head_dim, dtype, seed=3)
    assert_matches(q, k, v, causal=True, softmax_scale=0.05)


def test_without_lse():
    dtype, head_dim = first_built()
    q, k, v = random_qkv(1, 64, 64, 2, 2, head_dim, dtype)
    out = hopattn.attention(q, k, v)
    assert isinstance(out, torch.Tensor)
    assert rel_l2(out, sdpa_reference(q, k, v, False)[0]) < REL_L2_TOLERANCE[dtype]


def test_runs_on_current_non_default_stream():
    # On a side stream, a long sleep precedes the copy of new values into q. If hopattn launched on
    # any stream other than the current one it would race ahead and read the old q.
    dtype, head_dim = first_built()
    q, k, v = random_qkv(2, 512, 512, 4, 4, head_dim, dtype, seed=4)
    new_q = random_qkv(2, 512, 512, 4, 4, head_dim, dtype, seed=5)[0]
    want = sdpa_reference(new_q, k, v, True)[0]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU cycles
        q.copy_(new_q)
        out = hopattn.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    assert rel_l2(out, want) < REL_L2_TOLERANCE[dtype]


def test_strided_packed_qkv():
    dtype, head_dim = first_built()
    gen = torch.Generator(device="cuda").manual_seed(6)
    qkv = torch.randn((2, 300, 3, 4, head_dim), generator=gen, device="cuda").to(dtype)
    q, k, v = qkv.unbind(dim=2)
    assert not q.is_contiguous()
    out = assert_matches(q, k, v, causal=True)[0]
    contiguous = hopattn.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert rel_l2(out, contiguous) < 1e-6


def test_strided_heads_major():
    # (b, h, s, d) storage viewed as (b, s, h, d).
    dtype, head_dim = first_built()
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in random_qkv(2, 200, 333, 8, 2, head_dim, dtype, seed=7))
    assert_matches(q, k, v, causal=False)


def test_reference_kernel_matches_sdpa():
    q, k, v = random_qkv(2, 77, 130, 4, 2, 96, torch.bfloat16, seed=8)  # any head_dim <= 512
    assert_matches(q, k, v, causal=True, fn=hopattn.attention_reference)


def test_no_keys_and_empty_batch():
    dtype, head_dim = first_built()
    q, k, v = random_qkv(2, 5, 0, 2, 2, head_dim, dtype)
    out, lse = hopattn.attention(q, k, v, return_lse=True)
    assert (out == 0).all() and torch.isneginf(lse).all()
    q, k, v = random_qkv(0, 5, 5, 2, 2, head_dim, dtype)
    out, lse = hopattn.attention(q, k, v, return_lse=True)
    assert out.shape == q.shape and lse.shape == (0, 2, 5)


# --- errors ----------------------------------------------------------------------------------------


def test_dtype_mismatch():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 128, torch.bfloat16)
    with pytest.raises(ValueError, match="k: dtype fp16 differs"):
        hopattn.attention(q, k.half(), v)


def test_cpu_tensor_is_rejected_clearly():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 128, torch.bfloat16)
    with pytest.raises(ValueError, match="k: expected a CUDA tensor"):
        hopattn.attention(q, k.cpu(), v)
    with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
        hopattn.attention(q.cpu(), k.cpu(), v.cpu())


def test_fp32_is_unsupported():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 128, torch.float32)
    with pytest.raises(NotImplementedError, match="dtype fp32"):
        hopattn.attention(q, k, v)


def test_unsupported_head_dim():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 96, torch.bfloat16)
    with pytest.raises(NotImplementedError, match="head_dim 96"):
        hopattn.attention(q, k, v)


def test_non_contiguous_last_dim():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 256, torch.bfloat16)
    with pytest.raises(ValueError, match="last dim"):
        hopattn.attention(q[..., ::2], k[..., ::2], v[..., ::2])


def test_misaligned_pointer():
    _, head_dim = first_built()
    q, k, v = random_qkv(1, 16, 16, 2, 2, head_dim, torch.bfloat16)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype, device="cuda")[1:].view(q.shape)
    shifted.copy_(q)
    with pytest.raises(ValueError, match="q.data is not 16-byte aligned"):
        hopattn.attention(shifted, k, v)


def test_unsupported_torch_dtype():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 128, torch.float64)
    with pytest.raises(ValueError, match="q: dtype torch.float64"):
        hopattn.attention(q, k, v)


def test_mixed_torch_and_numpy():
    q, k, v = random_qkv(1, 16, 16, 2, 2, 128, torch.bfloat16)
    with pytest.raises(TypeError, match="k: expected a torch.Tensor"):
        hopattn.attention(q, k.float().cpu().numpy(), v)
