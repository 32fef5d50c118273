# Context-parallel ring attention (hopattn.distributed, issue 8).
#  - numpy only (CI): the step plans of every rank cover the full sequence's causal (or full) mask,
#    each (query, key) pair exactly once, for 1..4 ranks and both layouts; zigzag balances causal
#    work; shard/unshard; plan + hopattn.merge.merge_partials reproduce full fp64 attention.
#  - torch on CPU: the one-process emulated ring (the same plan, block compute, merge and ring
#    loops as the real one) forward and backward against full-sequence fp64 autograd; the real
#    ring_attention over torch.distributed with gloo in 3 spawned processes (the world group of 3,
#    a subgroup of 2, a group of 1); the merge's -inf rows; clear errors for bad input.
#  - torch, the library and an sm_90 GPU: the emulated ring on hopattn's kernels in bf16 (W=2 and
#    4, causal and not, GQA, up to 32k tokens), on one stream and on one stream per emulated rank,
#    against single-GPU hopattn.attention on the full sequence.
# The two-GPU NCCL run of issue 8 is not here: it needs two GPUs (see docs/design-ring.md).
import datetime
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hopattn import distributed as D
from hopattn.fp8_reference import attention_fp64
from hopattn.merge import merge_partials
from hopattn_test_support import optional_torch, rel_l2

torch, HAS_SM90, needs_torch, needs_gpu = optional_torch()
LAYOUTS = ("contiguous", "zigzag")


# --- plans (pure Python + numpy) ---------------------------------------------------------------------


def planned_pair_counts(world_size, causal, layout, seqlen):
    """(seqlen, seqlen) int array: how many times the ring computes each (query, key) pair."""
    counts = np.zeros((seqlen, seqlen), dtype=np.int64)
    local = seqlen // world_size
    for rank in range(world_size):
        q_pos = np.array(D.positions(rank, world_size, seqlen, layout))
        for step in range(world_size):
            src = (rank - step) % world_size
            plan = D._step_plan(rank, src, world_size, causal, layout)
            if plan is None:
                continue
            k_pos = np.array(D.positions(src, world_size, seqlen, layout))
            q0, q1, k0, k1 = plan.rows(local)
            sq, sk = q1 - q0, k1 - k0
            if plan.causal:
                assert sq == sk, "the causal (diagonal) block must be square"
                block = np.tril(np.ones((sq, sk), dtype=np.int64))
            else:
                block = np.ones((sq, sk), dtype=np.int64)
            counts[np.ix_(q_pos[q0:q1], k_pos[k0:k1])] += block
    return counts


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_plan_covers_the_mask_exactly_once(world_size, causal, layout):
    seqlen = 2 * world_size * 5
    counts = planned_pair_counts(world_size, causal, layout, seqlen)
    want = np.tril(np.ones((seqlen, seqlen), dtype=np.int64)) if causal else np.ones((seqlen, seqlen), dtype=np.int64)
    np.testing.assert_array_equal(counts, want)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_zigzag_balances_causal_work(world_size):
    local = 2 * 16
    work = [sum(D._block_pairs(plan, local) for _, plan in D._plans(r, world_size, True, "zigzag"))
            for r in range(world_size)]
    # Every rank: the diagonal block plus W-1 blocks of L * L/2 pairs.
    assert len(set(work)) == 1
    c = local // 2
    assert work[0] == local * (local + 1) // 2 + (world_size - 1) * 2 * c * c
    if world_size > 1:  # the contiguous layout leaves the last rank with the most work
        contiguous = [sum(D._block_pairs(p, local) for _, p in D._plans(r, world_size, True, "contiguous"))
                      for r in range(world_size)]
        assert contiguous[0] < work[0] < contiguous[-1]


def test_plan_table():
    # The zigzag causal plan, as docs/design-ring.md tabulates it.
    assert D._step_plan(1, 1, 3, True, "zigzag") == D.StepPlan(0, 2, 0, 2, True)
    assert D._step_plan(2, 0, 3, True, "zigzag") == D.StepPlan(0, 2, 0, 1, False)
    assert D._step_plan(0, 2, 3, True, "zigzag") == D.StepPlan(1, 2, 0, 2, False)
    assert D._step_plan(0, 1, 2, True, "contiguous") is None
    assert D._step_plan(1, 0, 2, True, "contiguous") == D.StepPlan(0, 2, 0, 2, False)
    assert D._step_plan(0, 1, 2, False, "zigzag") == D.StepPlan(0, 2, 0, 2, False)
    assert D.StepPlan(1, 2, 0, 1, False).rows(10) == (5, 10, 0, 5)
    assert D.default_layout(True) == "zigzag" and D.default_layout(False) == "contiguous"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shard_unshard_roundtrip_numpy(world_size, layout):
    x = np.arange(2 * 12 * 3).reshape(2, 12, 3)
    shards = [D.shard(x, r, world_size, layout) for r in range(world_size)]
    np.testing.assert_array_equal(D.unshard(shards, layout), x)
    for r, s in enumerate(shards):
        np.testing.assert_array_equal(s[0, :, 0] // 3, D.positions(r, world_size, 12, layout))
    # Along another dim (the lse layout (batch, heads, seqlen)).
    y = np.moveaxis(x, 1, 2)
    np.testing.assert_array_equal(D.unshard([D.shard(y, r, world_size, layout, dim=2) for r in range(world_size)],
                                            layout, dim=2), y)


@needs_torch
def test_one_rank_takes_any_length():
    # W=1 holds the whole sequence: no chunking, so an odd length is fine in either layout.
    assert D.positions(0, 1, 7, "zigzag") == list(range(7))
    q, k, v, dout = cpu_inputs(7, 2, 1, torch.float64)
    got = run_emulated(q, k, v, dout, 1, True, None)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, reference_with_grads(q, k, v, dout, True)):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10, msg=name)


def test_zigzag_positions():
    assert D.positions(0, 2, 8, "zigzag") == [0, 1, 6, 7]
    assert D.positions(1, 2, 8, "zigzag") == [2, 3, 4, 5]
    assert D.positions(1, 2, 8, "contiguous") == [4, 5, 6, 7]


def test_bad_layout_and_lengths():
    x = np.zeros((1, 10, 2, 4))
    with pytest.raises(ValueError, match="multiple of 4"):
        D.shard(x, 0, 2, "zigzag")  # 10 tokens cannot make 2 * 2 equal chunks
    with pytest.raises(ValueError, match="multiple of 3"):
        D.shard(x, 0, 3, "contiguous")
    with pytest.raises(ValueError, match="layout must be one of"):
        D.shard(x, 0, 2, "striped")
    with pytest.raises(ValueError, match="rank must be"):
        D.shard(x, 2, 2, "contiguous")
    with pytest.raises(ValueError, match="world_size"):
        D._step_plan(0, 0, 0, True, "zigzag")
    with pytest.raises(ValueError, match="differ in length"):
        D.unshard([np.zeros((1, 4)), np.zeros((1, 6))], "contiguous")
    with pytest.raises(ValueError, match="odd"):
        D.unshard([np.zeros((1, 3)), np.zeros((1, 3))], "zigzag")


@pytest.mark.parametrize("heads", [(2, 2), (4, 1)])
@pytest.mark.parametrize("world_size", [2, 3])
def test_numpy_ring_with_merge_partials(world_size, heads):
    # The ring's arithmetic with numpy pieces: each rank's planned blocks (fp64 attention with
    # LSE), placed into its local rows (skipped rows: out 0, lse -inf), merged by merge_partials.
    layout, seqlen, (hq, hk) = "zigzag", 2 * world_size * 6, heads
    rng = np.random.default_rng(world_size)
    q = rng.standard_normal((2, seqlen, hq, 8))
    k, v = rng.standard_normal((2, seqlen, hk, 8)), rng.standard_normal((2, seqlen, hk, 8))
    want, want_lse = attention_fp64(q, k, v, causal=True, return_lse=True)
    local = seqlen // world_size
    outs, lses = [], []
    for rank in range(world_size):
        q_r = D.shard(q, rank, world_size, layout)
        parts, part_lses = [], []
        for src, plan in D._plans(rank, world_size, True, layout):
            out = np.zeros_like(q_r)
            lse = np.full((2, hq, local), -np.inf)
            if plan is not None:
                q0, q1, k0, k1 = plan.rows(local)
                k_s, v_s = (D.shard(t, src, world_size, layout)[:, k0:k1] for t in (k, v))
                out[:, q0:q1], lse[:, :, q0:q1] = attention_fp64(q_r[:, q0:q1], k_s, v_s, causal=plan.causal,
                                                                  return_lse=True)
            parts.append(out)
            part_lses.append(lse)
        o, l = merge_partials(parts, part_lses)
        outs.append(o)
        lses.append(l)
    np.testing.assert_allclose(D.unshard(outs, layout), want, atol=1e-12)
    np.testing.assert_allclose(D.unshard(lses, layout, dim=2), want_lse, atol=1e-12)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_bench_rank_flops(world_size):
    # bench/ring.py's per-rank FLOPs: zigzag gives every rank 1/W of the full causal count (up to
    # the diagonal blocks' triangles, counted at half as the single-GPU causal count does).
    import common
    import ring

    seqlen, args = 1024 * world_size, (1, 16, 128)
    flops = [ring.rank_flops(r, world_size, seqlen, *args) for r in range(world_size)]
    assert len(set(flops)) == 1
    assert flops[0] * world_size == common.attention_flops(1, 16, seqlen, seqlen, 128, True)
    assert ring.rank_flops(0, world_size, seqlen, *args, direction="bwd") == 5 * flops[0] // 2
    # At W=2 a rank does twice the work of one causal sequence of its own length.
    if world_size == 2:
        assert flops[0] == 2 * common.attention_flops(1, 16, seqlen // 2, seqlen // 2, 128, True)


def test_import_needs_neither_torch_nor_library():
    code = ("import sys, hopattn.distributed as d; assert 'torch' not in sys.modules; "
            "print(d.positions(0, 2, 8, 'zigzag'))")
    env = dict(os.environ, HOPATTN_LIBRARY="/nonexistent/libhopattn.so",
               PYTHONPATH=str(Path(D.__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 1, 6, 7]"


# --- torch on CPU: the emulated ring -----------------------------------------------------------------


def reference_attention(q, k, v, causal, scale=None):
    """Full-sequence attention in the inputs' dtype with torch autograd (independent of the module)."""
    group = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        n = q.shape[1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vv), torch.logsumexp(s, dim=-1)


def cpu_inputs(seqlen, heads_q, heads_kv, dtype, batch=2, head_dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(h):
        return torch.randn((batch, seqlen, h, head_dim), generator=gen, dtype=torch.float64).to(dtype)

    return rand(heads_q), rand(heads_kv), rand(heads_kv), rand(heads_q)


def run_emulated(q, k, v, dout, world_size, causal, layout, **kwargs):
    """Shards the full tensors, runs the emulated ring forward and backward; returns the
    unsharded out, lse, dq, dk, dv."""
    lay = layout or D.default_layout(causal)
    shards = [[D.shard(t.detach(), r, world_size, lay).requires_grad_() for r in range(world_size)] for t in (q, k, v)]
    outs, lses = D.ring_attention_emulated(*shards, causal=causal, layout=layout, return_lse=True, **kwargs)
    torch.autograd.backward(outs, [D.shard(dout, r, world_size, lay) for r in range(world_size)])
    grads = [D.unshard([s.grad for s in per_rank], lay) for per_rank in shards]
    return (D.unshard([o.detach() for o in outs], lay), D.unshard(lses, lay, dim=2), *grads)


def reference_with_grads(q, k, v, dout, causal, scale=None):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, lse = reference_attention(q, k, v, causal, scale)
    out.backward(dout.double())
    return out.detach(), lse, q.grad, k.grad, v.grad


@needs_torch
@pytest.mark.parametrize("heads", [(4, 1), (2, 2)])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_emulated_ring_fp64(world_size, causal, layout, heads):
    q, k, v, dout = cpu_inputs(2 * world_size * 6, *heads, torch.float64)
    got = run_emulated(q, k, v, dout, world_size, causal, layout)
    want = reference_with_grads(q, k, v, dout, causal)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        assert g.dtype == torch.float64, name
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10, msg=name)


@needs_torch
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_emulated_ring_fp32(world_size, causal, layout):
    q, k, v, dout = cpu_inputs(2 * world_size * 16, 8, 2, torch.float32, head_dim=32, seed=world_size)
    got = run_emulated(q, k, v, dout, world_size, causal, layout)
    want = reference_with_grads(q, k, v, dout, causal)
    assert got[0].dtype == torch.float32 and got[1].dtype == torch.float32
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(g.double(), w, atol=1e-5, rtol=1e-5, msg=name)


@needs_torch
def test_emulated_ring_scale_and_strided_inputs():
    # A custom softmax_scale, and shards that are strided views (a slice of a packed qkv).
    world_size, seqlen = 2, 24
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn((1, seqlen, 3, 2, 8), generator=gen, dtype=torch.float64)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    dout = torch.randn((1, seqlen, 2, 8), generator=gen, dtype=torch.float64)
    got = run_emulated(q, k, v, dout, world_size, True, "zigzag", softmax_scale=0.7)
    want = reference_with_grads(q, k, v, dout, True, scale=0.7)
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10, msg=name)


@needs_torch
def test_emulated_ring_without_grad_and_lse_not_differentiable():
    q, k, v, _ = cpu_inputs(16, 2, 2, torch.float32)
    shards = [[D.shard(t, r, 2, "zigzag") for r in range(2)] for t in (q, k, v)]
    outs = D.ring_attention_emulated(*shards, causal=True)
    assert len(outs) == 2 and not outs[0].requires_grad
    shards = [[s.requires_grad_() for s in per_rank] for per_rank in shards]
    outs, lses = D.ring_attention_emulated(*shards, causal=True, return_lse=True)
    assert outs[0].requires_grad and not lses[0].requires_grad
    # Only one rank's output in the loss: the other's gradient is zero, the sums still arrive.
    outs[1].sum().backward()
    assert shards[0][0].grad is not None and torch.count_nonzero(shards[0][0].grad) == 0


@needs_torch
def test_merge_handles_empty_rows():
    out_acc = torch.zeros((1, 3, 1, 2))
    lse_acc = torch.tensor([[[float("-inf"), 0.0, float("-inf")]]])
    out_blk = torch.tensor([[[[0.0, 0.0]], [[2.0, 2.0]], [[4.0, 4.0]]]])
    lse_blk = torch.tensor([[[float("-inf"), 0.0, 1.0]]])
    out_acc[:, 1] = 1.0
    D._merge_into(torch, out_acc, lse_acc, out_blk, lse_blk)
    assert not torch.isnan(out_acc).any() and not torch.isnan(lse_acc).any()
    assert torch.isneginf(lse_acc[0, 0, 0]) and torch.all(out_acc[0, 0] == 0)
    torch.testing.assert_close(out_acc[0, 1], torch.tensor([[1.5, 1.5]]))
    torch.testing.assert_close(lse_acc[0, 0, 1], torch.tensor(math.log(2.0)))
    torch.testing.assert_close(out_acc[0, 2], torch.tensor([[4.0, 4.0]]))
    torch.testing.assert_close(lse_acc[0, 0, 2], torch.tensor(1.0))


@needs_torch
def test_bad_input_errors():
    q, k, v, _ = cpu_inputs(16, 4, 2, torch.float32)
    qs, ks, vs = ([D.shard(t, r, 2, "zigzag") for r in range(2)] for t in (q, k, v))
    with pytest.raises(ValueError, match="one q, k and v shard per rank"):
        D.ring_attention_emulated(qs, ks[:1], vs, causal=True)
    with pytest.raises(ValueError, match="rank 1.*every rank needs shards of one shape"):
        D.ring_attention_emulated([qs[0], qs[1][:, :4]], [ks[0], ks[1][:, :4]], [vs[0], vs[1][:, :4]], causal=True)
    with pytest.raises(ValueError, match="multiple of 2 \\* world_size"):
        odd = [t[:, :7] for t in qs]
        D.ring_attention_emulated(odd, [t[:, :7] for t in ks], [t[:, :7] for t in vs], causal=True)
    with pytest.raises(ValueError, match="not a multiple of k/v's"):
        D.ring_attention_emulated(qs, [t[:, :, :1].expand(-1, -1, 3, -1) for t in ks],
                                  [t[:, :, :1].expand(-1, -1, 3, -1) for t in vs])
    with pytest.raises(ValueError, match="same batch, local seqlen"):
        D.ring_attention_emulated(qs, [t[:, :4] for t in ks], [t[:, :4] for t in vs], layout="contiguous")
    with pytest.raises(ValueError, match="dtype"):
        D.ring_attention_emulated(qs, [t.double() for t in ks], [t.double() for t in vs])
    with pytest.raises(ValueError, match="4 dims"):
        D.ring_attention_emulated([t[0] for t in qs], ks, vs)
    with pytest.raises(ValueError, match="layout must be one of"):
        D.ring_attention_emulated(qs, ks, vs, layout="striped")
    with pytest.raises(ValueError, match="softmax_scale"):
        D.ring_attention_emulated(qs, ks, vs, softmax_scale=-1.0)
    with pytest.raises(ValueError, match="streams are for CUDA"):
        D.ring_attention_emulated(qs, ks, vs, streams=[object()])
    with pytest.raises(ValueError, match="shape"):
        D.ring_attention_emulated(qs, ks, [t[..., :8] for t in vs])
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        D.ring_attention_emulated([t.numpy() for t in qs], ks, vs)
    with pytest.raises(ValueError, match="empty shard"):
        D.ring_attention_emulated([t[:0] for t in qs], [t[:0] for t in ks], [t[:0] for t in vs])


@needs_torch
def test_ring_attention_needs_an_initialised_group():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    q, k, v, _ = cpu_inputs(8, 2, 2, torch.float32)
    with pytest.raises(RuntimeError, match="init_process_group"):
        D.ring_attention(q, k, v)


@needs_torch
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_emulated_ring_through_the_operators_cpu_kernels(world_size, monkeypatch):
    # The blocks through torch.ops.hopattn.fwd/bwd as on CUDA, here on the operators' CPU kernels
    # (the library's CPU reference): checks the operator calls' arguments. That reference's
    # backward recomputes the block's own lse instead of taking the merged one, so gradients are
    # only checked with one rank (one block per query row).
    if not hasattr(torch.library, "custom_op"):
        pytest.skip("torch without torch.library.custom_op")
    import hopattn

    try:
        hopattn.build_info()
    except hopattn.LibraryNotFoundError as e:
        if os.environ.get("HOPATTN_REQUIRE_LIBRARY", "") not in ("", "0"):
            pytest.fail(f"HOPATTN_REQUIRE_LIBRARY is set but the library did not load: {e}", pytrace=False)
        pytest.skip(f"libhopattn.so not available: {e}")
    monkeypatch.setattr(D, "_use_kernels", lambda q: True)
    q, k, v, dout = cpu_inputs(2 * world_size * 8, 4, 2, torch.float32, head_dim=32, seed=5)
    got = run_emulated(q, k, v, dout, world_size, True, "zigzag")
    want = reference_with_grads(q, k, v, dout, True)
    checked = ("out", "lse", "dq", "dk", "dv") if world_size == 1 else ("out", "lse")
    for name, g, w in zip(checked, got, want):
        torch.testing.assert_close(g.double(), w, atol=1e-5, rtol=1e-5, msg=name)


# --- torch on CPU: the real ring over gloo, in spawned processes ------------------------------------


def _gloo_cases():
    """(group members, causal, layout, heads, dtype) run by the spawned ranks; every rank creates
    every group (torch.distributed's rule), members run the case."""
    return [
        ((0, 1, 2), True, None, (4, 1), torch.float32),  # W=3, zigzag, GQA 4:1
        ((0, 1, 2), False, None, (2, 2), torch.float64),  # W=3, contiguous, non-causal
        ((1, 2), True, "contiguous", (4, 2), torch.float32),  # W=2 on a subgroup (global ranks 1, 2)
        ((1, 2), True, "zigzag", (2, 2), torch.float64),
        ((0,), True, "zigzag", (2, 1), torch.float32),  # W=1: no communication
    ]


def _gloo_worker(rank, world_size, port):
    import torch.distributed as dist

    torch.set_num_threads(1)  # tiny shapes; 3 processes share the CPUs
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        groups = {}
        for members, *_ in _gloo_cases():
            if members not in groups:
                groups[members] = dist.new_group(list(members)) if len(members) < world_size else None
        for i, (members, causal, layout, heads, dtype) in enumerate(_gloo_cases()):
            if rank not in members:
                continue
            group, w, r = groups[members], len(members), members.index(rank)
            lay = layout or D.default_layout(causal)
            q, k, v, dout = cpu_inputs(2 * w * 8, *heads, dtype, seed=i)
            qs, ks, vs = (D.shard(t, r, w, lay).requires_grad_() for t in (q, k, v))
            out, lse = D.ring_attention(qs, ks, vs, group=group, causal=causal, layout=layout, return_lse=True)
            out.backward(D.shard(dout, r, w, lay))
            want = reference_with_grads(q, k, v, dout, causal)
            tol = 1e-10 if dtype == torch.float64 else 1e-5
            got = (out.detach(), lse, qs.grad, ks.grad, vs.grad)
            dims = (1, 2, 1, 1, 1)
            for name, g, wt, dim in zip(("out", "lse", "dq", "dk", "dv"), got, want, dims):
                torch.testing.assert_close(g.double(), D.shard(wt, r, w, lay, dim=dim), atol=tol, rtol=tol,
                                           msg=f"case {i} rank {rank} {name}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_torch
def test_ring_attention_gloo_processes():
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    # spawn, not fork: a forked child cannot run autograd once the parent has (pytest ran other
    # tests first: "Unable to handle autograd's threading in combination with fork-based
    # multiprocessing", seen on the GPU machine). spawn re-imports torch per process (seconds).
    method = "spawn"
    mp.start_processes(_gloo_worker, args=(3, _free_port()), nprocs=3, join=True, start_method=method)


# --- sm_90 GPU: the emulated ring on hopattn's kernels -----------------------------------------------


def gpu_inputs(seqlen, heads_q, heads_kv, head_dim, dtype, batch=1, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(h):
        return torch.randn((batch, seqlen, h, head_dim), generator=gen, device="cuda").to(dtype)

    return rand(heads_q), rand(heads_kv), rand(heads_kv), rand(heads_q)


def single_gpu_reference(q, k, v, dout, causal):
    import hopattn

    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = hopattn.attention(q, k, v, causal=causal, return_lse=True)
    out.backward(dout)
    return out.detach(), lse, q.grad, k.grad, v.grad


def check_against_single_gpu(got, want):
    out, lse, *grads = got
    want_out, want_lse, *want_grads = want
    assert out.dtype == want_out.dtype
    assert rel_l2(out, want_out) <= 1e-2
    torch.testing.assert_close(out.float(), want_out.float(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=1e-4)
    for name, g, w in zip(("dq", "dk", "dv"), grads, want_grads):
        assert g.dtype == w.dtype, name
        err = rel_l2(g, w)
        assert err <= 2e-2, f"{name}: rel L2 {err:.2e}"


@needs_gpu
@pytest.mark.parametrize(
    "world_size,seqlen,causal,layout,heads",
    [
        (2, 8192, True, "zigzag", (8, 2)),
        (2, 32768, True, "zigzag", (4, 1)),
        (4, 8192, True, "zigzag", (8, 2)),
        (2, 4096, True, "contiguous", (4, 4)),
        (2, 8192, False, "contiguous", (8, 2)),
        (4, 4096, False, "zigzag", (4, 1)),
    ],
)
def test_emulated_ring_gpu(world_size, seqlen, causal, layout, heads):
    from hopattn_test_support import gpu_kernel_pair

    dtype, head_dim = gpu_kernel_pair(prefer_head_dim=128)
    q, k, v, dout = gpu_inputs(seqlen, *heads, head_dim, dtype)
    got = run_emulated(q, k, v, dout, world_size, causal, layout)
    check_against_single_gpu(got, single_gpu_reference(q, k, v, dout, causal))


@needs_gpu
@pytest.mark.parametrize("world_size,n_streams", [(2, 2), (4, 2), (4, 4)])
def test_emulated_ring_gpu_streams(world_size, n_streams):
    # One CUDA stream per emulated rank: the transfers order the receiving stream after the
    # sender's (events), the dK/dV accumulators included; results as on one stream.
    from hopattn_test_support import gpu_kernel_pair

    dtype, head_dim = gpu_kernel_pair(prefer_head_dim=128)
    q, k, v, dout = gpu_inputs(8192, 8, 2, head_dim, dtype, seed=1)
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    got = run_emulated(q, k, v, dout, world_size, True, "zigzag", streams=streams)
    torch.cuda.synchronize()
    want = single_gpu_reference(q, k, v, dout, True)
    check_against_single_gpu(got, want)
    one_stream = run_emulated(q, k, v, dout, world_size, True, "zigzag")
    torch.testing.assert_close(got[0], one_stream[0], atol=0, rtol=0)  # the forward is deterministic
