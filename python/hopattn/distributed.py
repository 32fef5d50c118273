# Context-parallel ("ring") attention over torch.distributed (issue 8).
#
# Each rank of a process group holds one shard of a long sequence: q, k, v of shape
# (batch, local_seqlen, heads, head_dim). The K/V shards travel around the ring of ranks with
# point-to-point sends (dist.P2POp + dist.batch_isend_irecv): at step s rank r computes attention
# of its queries against the K/V shard of rank (r - s) mod W while the transfer for step s + 1 is
# already in flight. The partial results are merged by their log-sum-exp in fp32 (hopattn.merge's
# math, as a running merge). The backward pass runs the same schedule; the dK/dV accumulators of a
# shard travel with it and, after the last step, go one more hop back to the shard's owner.
#
# Layouts (how the full sequence is split among the W ranks; shard() / unshard() do it):
#   "contiguous": rank r holds tokens [r*L, (r+1)*L).
#   "zigzag":     the sequence is cut into 2W chunks; rank r holds chunks r and 2W-1-r, one after
#                 the other. With causal attention every rank then does the same work.
#
# Three parts, each used by both the real ring (ring_attention: one rank per process, the
# communication is torch.distributed) and the one-process emulation (ring_attention_emulated: all
# W ranks in one process, the communication is a rotation of a list, optionally one CUDA stream per
# emulated rank), so that one GPU can test the very code that runs on many:
#   * the plan (_step_plan): pure Python, which rows of the local queries and which keys of the
#     received shard take part at a step, and whether that block is causal (the diagonal) or full;
#   * the per-block compute (_block_forward / _block_backward): hopattn's kernels
#     (torch.ops.hopattn.fwd / bwd) on CUDA tensors, a plain torch reference in fp32 (fp64 for fp64
#     inputs) on CPU tensors, so the whole ring runs on CPU with the gloo backend;
#   * the merge (_merge_into) and the ring loops (_ring_forward / _ring_backward), written against a
#     small communicator interface (_ProcessGroupRing, _EmulatedRing).
#
# Neither torch nor the library is imported here at import time.
from __future__ import annotations

import contextlib
import math
from typing import NamedTuple, Optional

LAYOUTS = ("contiguous", "zigzag")

__all__ = [
    "LAYOUTS",
    "StepPlan",
    "default_layout",
    "positions",
    "ring_attention",
    "ring_attention_emulated",
    "shard",
    "unshard",
]


# --- layouts and the plan (pure Python) ---------------------------------------------------------------


def default_layout(causal):
    """The layout ring_attention uses when none is given: zigzag when causal (balanced), else contiguous."""
    return "zigzag" if causal else "contiguous"


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def _check_world(rank, world_size):
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


def _check_local_seqlen(local_seqlen, world_size, layout, what="local seqlen"):
    # One rank holds the whole sequence in either layout: any length.
    if layout == "zigzag" and world_size > 1 and local_seqlen % 2:
        raise ValueError(
            f"{what} {local_seqlen} is odd: the zigzag layout gives each rank two equal chunks, so the "
            f"full seqlen must be a multiple of 2 * world_size = {2 * world_size}"
        )


def positions(rank, world_size, seqlen, layout):
    """The global token positions (a list of ints, in local order) that `rank` holds when a
    sequence of `seqlen` tokens is split over `world_size` ranks in `layout` (what shard() takes).
    Useful for position-dependent inputs such as rotary embeddings."""
    _check_layout(layout)
    _check_world(rank, world_size)
    if world_size == 1:
        return list(range(seqlen))
    parts = world_size if layout == "contiguous" else 2 * world_size
    if seqlen % parts:
        raise ValueError(f"seqlen {seqlen} is not a multiple of {parts} ({layout} layout over {world_size} ranks)")
    c = seqlen // parts
    if layout == "contiguous":
        return list(range(rank * c, (rank + 1) * c))
    other = 2 * world_size - 1 - rank
    return list(range(rank * c, (rank + 1) * c)) + list(range(other * c, (other + 1) * c))


class StepPlan(NamedTuple):
    """One block of a ring step: local query rows [q_lo, q_hi) * L/2 against keys [k_lo, k_hi) * L/2
    of the received shard (bounds in halves of the local length L: 0, 1 or 2), causal (the
    diagonal block, equal lengths, local order = global order) or full."""

    q_lo: int
    q_hi: int
    k_lo: int
    k_hi: int
    causal: bool

    def rows(self, local_seqlen):
        """(q_start, q_end, k_start, k_end) in tokens for shards of local_seqlen tokens."""
        h = local_seqlen // 2
        return tuple(local_seqlen if b == 2 else b * h for b in (self.q_lo, self.q_hi, self.k_lo, self.k_hi))

    @property
    def all_rows(self):
        return self.q_lo == 0 and self.q_hi == 2

    @property
    def all_keys(self):
        return self.k_lo == 0 and self.k_hi == 2


_FULL = StepPlan(0, 2, 0, 2, False)
_DIAGONAL = StepPlan(0, 2, 0, 2, True)
_ZIGZAG_FIRST_KV = StepPlan(0, 2, 0, 1, False)  # src < rank: every local query vs the src's first chunk
_ZIGZAG_SECOND_Q = StepPlan(1, 2, 0, 2, False)  # src > rank: the local second chunk vs all of src's keys


def _step_plan(rank, src_rank, world_size, causal, layout):
    """What `rank` computes against the K/V shard of `src_rank`: a StepPlan, or None when no query of
    rank sees any key of src_rank (the block is skipped and contributes lse = -inf)."""
    _check_layout(layout)
    _check_world(rank, world_size)
    _check_world(src_rank, world_size)
    if not causal:
        return _FULL
    if src_rank == rank:
        return _DIAGONAL
    if layout == "contiguous":
        return _FULL if src_rank < rank else None
    # zigzag: rank holds chunks (rank, 2W-1-rank), src holds (src, 2W-1-src).
    return _ZIGZAG_FIRST_KV if src_rank < rank else _ZIGZAG_SECOND_Q


def _src_rank(rank, step, world_size):
    return (rank - step) % world_size


def _plans(rank, world_size, causal, layout):
    """[(src_rank, plan or None)] for each step of rank's schedule."""
    return [(_src_rank(rank, s, world_size), _step_plan(rank, _src_rank(rank, s, world_size), world_size, causal,
                                                        layout)) for s in range(world_size)]


def _block_pairs(plan, local_seqlen):
    """Number of (query, key) pairs a block computes (the causal diagonal counts its lower triangle)."""
    if plan is None:
        return 0
    q0, q1, k0, k1 = plan.rows(local_seqlen)
    sq, sk = q1 - q0, k1 - k0
    return sq * (sq + 1) // 2 if plan.causal else sq * sk


# --- shard / unshard (torch tensors or numpy arrays) ---------------------------------------------------


def _is_torch(x):
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _split(x, parts, dim):
    if _is_torch(x):
        return list(x.chunk(parts, dim=dim))
    import numpy as np

    return np.split(x, parts, axis=dim)


def _cat(xs, dim):
    if _is_torch(xs[0]):
        import torch

        return torch.cat(xs, dim=dim)
    import numpy as np

    return np.concatenate(xs, axis=dim)


def shard(x, rank, world_size, layout, dim=1):
    """The part of the full-sequence tensor x (torch tensor or numpy array; the sequence along
    `dim`, 1 for the (batch, seqlen, heads, head_dim) layout) that `rank` holds in `layout`.
    The sequence length must be a multiple of world_size (contiguous) or 2 * world_size (zigzag)."""
    _check_layout(layout)
    _check_world(rank, world_size)
    if world_size == 1:
        return x  # one rank holds everything, in either layout
    seqlen = x.shape[dim]
    parts = world_size if layout == "contiguous" else 2 * world_size
    if seqlen % parts:
        raise ValueError(
            f"seqlen {seqlen} (dim {dim}) is not a multiple of {parts}: the {layout} layout over "
            f"{world_size} ranks cuts the sequence into {parts} equal chunks"
        )
    chunks = _split(x, parts, dim)
    if layout == "contiguous":
        return chunks[rank]
    return _cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim)


def unshard(shards, layout, dim=1):
    """The full-sequence tensor from the list of every rank's shard (rank order), the inverse of shard()."""
    _check_layout(layout)
    shards = list(shards)
    if not shards:
        raise ValueError("unshard needs at least one shard")
    w = len(shards)
    if w == 1:
        return shards[0]
    lengths = {s.shape[dim] for s in shards}
    if len(lengths) != 1:
        raise ValueError(f"shards differ in length along dim {dim}: {[s.shape[dim] for s in shards]}")
    if layout == "contiguous":
        return _cat(shards, dim)
    (local,) = lengths
    _check_local_seqlen(local, w, layout, "shard length")
    chunks = [None] * (2 * w)
    for r, s in enumerate(shards):
        first, second = _split(s, 2, dim)
        chunks[r], chunks[2 * w - 1 - r] = first, second
    return _cat(chunks, dim)


# --- per-block compute ---------------------------------------------------------------------------------


def _compute_dtype(torch, dtype):
    """The CPU reference's compute (and every path's merge/accumulation) dtype: fp32, fp64 for fp64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _expand_kv(torch, t, group):
    return t if group == 1 else t.repeat_interleave(group, dim=2)


def _causal_keep(torch, sq, sk, device):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (sk - sq)  # bottom-right aligned, as the kernels


def _reference_scores(torch, q, k, causal, scale, ct):
    group = q.shape[2] // k.shape[2]
    kk = _expand_kv(torch, k.to(ct), group)
    s = torch.einsum("bqhd,bkhd->bhqk", q.to(ct), kk) * scale
    if causal:
        s = s.masked_fill(~_causal_keep(torch, q.shape[1], k.shape[1], q.device), float("-inf"))
    return s


def _reference_probs(torch, s, lse):
    # Rows with lse = -inf (no key) get P = 0: subtract +inf there instead.
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, float("inf")))
    return torch.exp(s - lse_safe.unsqueeze(-1))


def _reference_forward(torch, q, k, v, causal, scale):
    """out (compute dtype) and lse (batch, heads_q, seqlen_q) of one block, plain torch (CPU path)."""
    ct = _compute_dtype(torch, q.dtype)
    group = q.shape[2] // k.shape[2]
    s = _reference_scores(torch, q, k, causal, scale, ct)
    lse = torch.logsumexp(s, dim=-1)  # -inf for a row without keys
    p = _reference_probs(torch, s, lse)
    out = torch.einsum("bhqk,bkhd->bqhd", p, _expand_kv(torch, v.to(ct), group))
    return out, lse


def _reference_backward(torch, dout, q, k, v, out, lse, causal, scale):
    """dq, dk, dv (compute dtype) of one block given the FINAL out and lse of its query rows:
    P = exp(S - lse), D = rowsum(dO*O), dV = P^T dO, dP = dO V^T, dS = P*(dP - D), dQ = scale dS K,
    dK = scale dS^T Q; GQA groups summed into their K/V head."""
    ct = _compute_dtype(torch, q.dtype)
    batch, sk, heads_kv, head_dim = k.shape
    group = q.shape[2] // heads_kv
    qf, dof, of = q.to(ct), dout.to(ct), out.to(ct)
    s = _reference_scores(torch, q, k, causal, scale, ct)
    p = _reference_probs(torch, s, lse.to(ct))
    d = (dof * of).sum(dim=-1).transpose(1, 2)  # (b, h, sq)
    kk = _expand_kv(torch, k.to(ct), group)
    vv = _expand_kv(torch, v.to(ct), group)
    dv = torch.einsum("bhqk,bqhd->bkhd", p, dof)
    dp = torch.einsum("bqhd,bkhd->bhqk", dof, vv)
    ds = p * (dp - d.unsqueeze(-1))
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, kk) * scale
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, qf) * scale
    if group > 1:
        dk = dk.reshape(batch, sk, heads_kv, group, head_dim).sum(dim=3)
        dv = dv.reshape(batch, sk, heads_kv, group, head_dim).sum(dim=3)
    return dq, dk, dv


def _hopattn_ops():
    from . import torch_ops  # registers torch.ops.hopattn.*; imports torch

    return torch_ops


def _use_kernels(q):
    """Whether blocks run hopattn's operators (CUDA tensors) or the torch reference (CPU). Tests
    patch it to send CPU tensors through the operators' CPU kernels (the library's CPU reference,
    which recomputes the block's own lse in its backward, so only a lone block's gradient matches)."""
    return q.is_cuda


def _block_forward(torch, q, k, v, causal, scale):
    """(out, lse) of one block: hopattn's sm90 kernel for CUDA tensors (out in q's dtype, lse fp32),
    the torch reference for CPU tensors (both in the compute dtype)."""
    if _use_kernels(q):
        return _hopattn_ops().fwd(q, k, v, causal, scale, False, -1, -1)
    return _reference_forward(torch, q, k, v, causal, scale)


def _block_backward(torch, dout, q, k, v, out, lse, causal, scale):
    """(dq, dk, dv) of one block given the final out/lse rows of its queries."""
    if _use_kernels(q):
        # The kernel reads lse and computes D from out/dout: dense copies of partial-row slices.
        dq, dk, dv = _hopattn_ops().bwd(dout.contiguous(), q, k, v, out.contiguous(), lse.contiguous(), causal, scale,
                                        False, -1, -1)
        return dq, dk, dv
    return _reference_backward(torch, dout, q, k, v, out, lse, causal, scale)


# --- the LSE merge -------------------------------------------------------------------------------------


def _merge_into(torch, out_acc, lse_acc, out_blk, lse_blk):
    """In place: (out_acc, lse_acc) <- the merge of itself and a block over disjoint keys.

    out_acc (b, s, h, d) and lse_acc (b, h, s) in the accumulation dtype (views are fine); out_blk,
    lse_blk any float dtype. lse = log(exp(lse_a) + exp(lse_b)), out = w_a out_a + w_b out_b with
    w_i = exp(lse_i - lse). A row with lse = -inf on both sides stays out = 0, lse = -inf (no NaN),
    the convention of hopattn.merge.merge_partials and of the kernels."""
    acc = lse_acc.dtype
    lse_b = lse_blk.to(acc)
    m = torch.maximum(lse_acc, lse_b)
    finite = torch.isfinite(m)
    m_safe = torch.where(finite, m, torch.zeros_like(m))
    w_a = torch.exp(lse_acc - m_safe)  # exp(-inf) = 0 for an empty side
    w_b = torch.exp(lse_b - m_safe)
    total = w_a + w_b  # >= 1 wherever m is finite, 0 where both sides are empty
    seen = total > 0
    total_safe = torch.where(seen, total, torch.ones_like(total))
    new_lse = torch.where(seen, m_safe + torch.log(total_safe), torch.full_like(total, float("-inf")))
    w_a = (w_a / total_safe).transpose(1, 2).unsqueeze(-1)  # (b, s, h, 1)
    w_b = (w_b / total_safe).transpose(1, 2).unsqueeze(-1)
    out_acc.mul_(w_a).add_(out_blk.to(out_acc.dtype) * w_b)
    lse_acc.copy_(new_lse)


class _ForwardState:
    """One rank's running merge: out (b, L, h, d) and lse (b, h, L) in the accumulation dtype."""

    def __init__(self, torch, q):
        self.torch = torch
        self.q = q
        self.acc_dtype = _compute_dtype(torch, q.dtype)
        self.out = None
        self.lse = None

    def _allocate(self):
        b, L, h, d = self.q.shape
        t = self.torch
        self.out = t.zeros((b, L, h, d), dtype=self.acc_dtype, device=self.q.device)
        self.lse = t.full((b, h, L), float("-inf"), dtype=self.acc_dtype, device=self.q.device)

    def add(self, q0, q1, out_blk, lse_blk):
        L = self.q.shape[1]
        if self.out is None and q0 == 0 and q1 == L:
            # The first block covering every row is the running result as it stands (fresh tensors).
            self.out = out_blk.to(self.acc_dtype)
            self.lse = lse_blk.to(self.acc_dtype)
            return
        if self.out is None:
            self._allocate()
        _merge_into(self.torch, self.out[:, q0:q1], self.lse[:, :, q0:q1], out_blk, lse_blk)

    def result(self):
        if self.out is None:  # no block at all (cannot happen with the plans here: the diagonal always runs)
            self._allocate()
        return self.out.to(self.q.dtype), self.lse


def _step_forward(torch, state, rank, src, world_size, causal, layout, scale, q, k, v):
    """One rank's forward work at one step: the planned block against the received (k, v), merged."""
    plan = _step_plan(rank, src, world_size, causal, layout)
    if plan is None:
        return
    q0, q1, k0, k1 = plan.rows(q.shape[1])
    out_blk, lse_blk = _block_forward(torch, q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], plan.causal, scale)
    state.add(q0, q1, out_blk, lse_blk)


def _step_backward(torch, dq_acc, rank, src, world_size, causal, layout, scale, q, k, v, out, lse, dout):
    """One rank's backward work at one step: adds its block's dq into dq_acc; returns
    (k0, k1, dk_blk, dv_blk) for the received shard, or None when the block is skipped."""
    plan = _step_plan(rank, src, world_size, causal, layout)
    if plan is None:
        return None
    q0, q1, k0, k1 = plan.rows(q.shape[1])
    dq, dk, dv = _block_backward(torch, dout[:, q0:q1], q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], out[:, q0:q1],
                                 lse[:, :, q0:q1], plan.causal, scale)
    dq_acc[:, q0:q1] += dq
    return k0, k1, dk, dv


# --- communicators -------------------------------------------------------------------------------------
#
# A communicator runs the ring for the ranks that live in this process (`ranks`: one for the real
# ring, all W for the emulation). start(items) sends items[i] (a tuple of tensors of local rank i)
# to the next rank and returns a handle; wait(handle) returns, for each local rank, the tuple sent
# to it by the previous rank. rank_context(i) is where local rank i's work is enqueued; begin() and
# end(tensors) bracket a pass (stream ordering with the caller's stream).


class _ProcessGroupRing:
    """The real ring: this process is one rank of a torch.distributed process group."""

    def __init__(self, torch, dist, group):
        self.torch = torch
        self.dist = dist
        self.group = group
        self.world_size = dist.get_world_size(group)
        rank = dist.get_rank(group)
        self.ranks = [rank]
        w = self.world_size
        self._next = self._global((rank + 1) % w)
        self._prev = self._global((rank - 1) % w)

    def _global(self, group_rank):
        if self.group is None or self.group is self.dist.group.WORLD:
            return group_rank
        return self.dist.get_global_rank(self.group, group_rank)

    def rank_context(self, i):
        return contextlib.nullcontext()

    def begin(self):
        pass

    def end(self, tensors):
        pass

    def start(self, items):
        # Point-to-point needs dense tensors (a copy is fine: a sender never touches what it sent).
        tensors = tuple(t.contiguous() for t in items[0])
        # Fresh receive buffers: never the tensors being computed on or sent.
        recv = tuple(self.torch.empty_like(t) for t in tensors)
        ops = [self.dist.P2POp(self.dist.isend, t, self._next, self.group, tag) for tag, t in enumerate(tensors)]
        ops += [self.dist.P2POp(self.dist.irecv, t, self._prev, self.group, tag) for tag, t in enumerate(recv)]
        return self.dist.batch_isend_irecv(ops), recv

    def wait(self, handle):
        reqs, recv = handle
        for req in reqs:
            req.wait()
        return [recv]


class _EmulatedRing:
    """All W ranks in one process: a send is a rotation of the list of items. With CUDA streams,
    local rank i works on streams[i % len(streams)], and a transfer orders the receiver's stream
    after the sender's (an event) and records the tensors on the receiver's stream for the allocator."""

    def __init__(self, torch, world_size, streams=None):
        self.torch = torch
        self.world_size = world_size
        self.ranks = list(range(world_size))
        self.streams = list(streams) if streams else None

    def _stream(self, i):
        return self.streams[i % len(self.streams)]

    def rank_context(self, i):
        if self.streams is None:
            return contextlib.nullcontext()
        return self.torch.cuda.stream(self._stream(i))

    def begin(self):
        if self.streams:
            current = self.torch.cuda.current_stream()
            for s in self.streams:
                s.wait_stream(current)

    def end(self, tensors):
        if self.streams:
            current = self.torch.cuda.current_stream()
            for s in self.streams:
                current.wait_stream(s)
            for t in tensors:
                if t is not None and t.is_cuda:
                    t.record_stream(current)

    def start(self, items):
        events = None
        if self.streams:
            events = []
            for i in range(self.world_size):
                e = self.torch.cuda.Event()
                e.record(self._stream(i))
                events.append(e)
        return list(items), events

    def wait(self, handle):
        items, events = handle
        w = self.world_size
        recv = [items[(i - 1) % w] for i in range(w)]
        if events is not None:
            for i in range(w):
                stream = self._stream(i)
                stream.wait_event(events[(i - 1) % w])
                for t in recv[i]:
                    if t.is_cuda:
                        t.record_stream(stream)
        return recv


# --- the ring loops ------------------------------------------------------------------------------------


def _ring_forward(torch, comm, qs, ks, vs, causal, scale, layout):
    """outs (q's dtype) and lses (accumulation dtype) of every local rank."""
    w = comm.world_size
    comm.begin()
    states = [_ForwardState(torch, q) for q in qs]
    kv = list(zip(ks, vs))
    for step in range(w):
        # The transfer for step + 1 goes out before this step's compute (k/v are only read).
        handle = comm.start(kv) if step + 1 < w else None
        for i, rank in enumerate(comm.ranks):
            with comm.rank_context(i):
                k, v = kv[i]
                _step_forward(torch, states[i], rank, _src_rank(rank, step, w), w, causal, layout, scale, qs[i], k, v)
        if handle is not None:
            kv = comm.wait(handle)
    outs, lses = [], []
    for i, st in enumerate(states):
        with comm.rank_context(i):
            out, lse = st.result()
        outs.append(out)
        lses.append(lse)
    comm.end(outs + lses)
    return outs, lses


def _ring_backward(torch, comm, douts, qs, ks, vs, outs, lses, causal, scale, layout):
    """dqs, dks, dvs (the inputs' dtypes) of every local rank, given the final outs/lses."""
    w = comm.world_size
    comm.begin()
    n = len(qs)
    acc_dtype = _compute_dtype(torch, qs[0].dtype)
    dq_accs = []
    for i in range(n):
        with comm.rank_context(i):
            dq_accs.append(torch.zeros(qs[i].shape, dtype=acc_dtype, device=qs[i].device))
    kv = list(zip(ks, vs))
    dkv_handle = None
    dkv = None
    for step in range(w):
        kv_handle = comm.start(kv) if step + 1 < w else None
        blocks = []
        for i, rank in enumerate(comm.ranks):
            with comm.rank_context(i):
                k, v = kv[i]
                blocks.append(_step_backward(torch, dq_accs[i], rank, _src_rank(rank, step, w), w, causal, layout,
                                             scale, qs[i], k, v, outs[i], lses[i], douts[i]))
        # The dK/dV accumulators of the shards now held arrive from the previous rank (step 0: a new
        # pair for the own shard); this step's block gradients are added and they move on.
        received = comm.wait(dkv_handle) if dkv_handle is not None else None
        dkv = []
        for i in range(n):
            with comm.rank_context(i):
                k, v = kv[i]
                block = blocks[i]
                if received is None and block is not None and block[0] == 0 and block[1] == k.shape[1]:
                    # Step 0 (the own shard) with every key in the block: its gradients start the sums.
                    dk_acc = block[2].to(acc_dtype).contiguous()  # dense: it is sent as it is
                    dv_acc = block[3].to(acc_dtype).contiguous()
                    block = None
                elif received is None:
                    dk_acc = torch.zeros(k.shape, dtype=acc_dtype, device=k.device)
                    dv_acc = torch.zeros(v.shape, dtype=acc_dtype, device=v.device)
                else:
                    dk_acc, dv_acc = received[i]
                if block is not None:
                    k0, k1, dk_blk, dv_blk = block
                    dk_acc[:, k0:k1] += dk_blk
                    dv_acc[:, k0:k1] += dv_blk
                dkv.append((dk_acc, dv_acc))
        # After the last step this is the extra hop that brings each accumulator home.
        dkv_handle = comm.start(dkv) if w > 1 else None
        if kv_handle is not None:
            kv = comm.wait(kv_handle)
    if dkv_handle is not None:
        dkv = comm.wait(dkv_handle)
    dqs, dks, dvs = [], [], []
    for i in range(n):
        with comm.rank_context(i):
            dqs.append(dq_accs[i].to(qs[i].dtype))
            dks.append(dkv[i][0].to(ks[i].dtype))
            dvs.append(dkv[i][1].to(vs[i].dtype))
    comm.end(dqs + dks + dvs)
    return dqs, dks, dvs


# --- autograd ------------------------------------------------------------------------------------------

_FUNCTION = None


def _ring_function(torch):
    """The torch.autograd.Function over the ring (built on first use: torch is imported lazily).
    apply(comm, causal, scale, layout, n, *qs, *ks, *vs) -> (*outs, *lses); lses not differentiable."""
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION

    class RingAttentionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, comm, causal, scale, layout, n, *tensors):
            qs, ks, vs = list(tensors[:n]), list(tensors[n:2 * n]), list(tensors[2 * n:])
            outs, lses = _ring_forward(torch, comm, qs, ks, vs, causal, scale, layout)
            ctx.save_for_backward(*qs, *ks, *vs, *outs, *lses)
            ctx.ring = (comm, causal, scale, layout, n)
            ctx.mark_non_differentiable(*lses)
            return (*outs, *lses)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            comm, causal, scale, layout, n = ctx.ring
            saved = ctx.saved_tensors
            qs, ks, vs = saved[:n], saved[n:2 * n], saved[2 * n:3 * n]
            outs, lses = saved[3 * n:4 * n], saved[4 * n:]
            douts = list(grads[:n])  # zeros where an out took no part in the loss (materialised)
            dqs, dks, dvs = _ring_backward(torch, comm, douts, qs, ks, vs, outs, lses, causal, scale, layout)
            return (None, None, None, None, None, *dqs, *dks, *dvs)

    _FUNCTION = RingAttentionFunction
    return _FUNCTION


# --- checks --------------------------------------------------------------------------------------------


def _check_shard_inputs(torch, q, k, v, layout, world_size, where=""):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}{where}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}{where}: expected 4 dims (batch, local_seqlen, heads, head_dim), got shape "
                             f"{tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name}{where}: on device {t.device} but q is on {q.device}")
        if t.dtype != q.dtype:
            raise ValueError(f"{name}{where}: dtype {t.dtype} differs from q's {q.dtype}")
        if not t.is_floating_point():
            raise ValueError(f"{name}{where}: expected a floating-point tensor, got {t.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k{where} shape {tuple(k.shape)} differs from v's {tuple(v.shape)}")
    b, L, hq, d = q.shape
    if k.shape[0] != b or k.shape[1] != L or k.shape[3] != d:
        raise ValueError(
            f"k/v{where} shape {tuple(k.shape)} does not match q's {tuple(q.shape)}: ring attention needs the "
            "same batch, local seqlen (q and k/v shards cover the same tokens) and head_dim"
        )
    hk = k.shape[2]
    if hk == 0 or hq % hk:
        raise ValueError(f"q{where} has {hq} heads, not a multiple of k/v's {hk} (GQA/MQA)")
    if L == 0 or d == 0 or b == 0:
        raise ValueError(f"q{where}: empty shard {tuple(q.shape)} (batch, local seqlen and head_dim must be > 0)")
    _check_local_seqlen(L, world_size, layout, f"local seqlen{where}")


def _resolve(causal, softmax_scale, layout):
    """(causal, scale or None for the default, layout) with the options checked."""
    if layout is None:
        layout = default_layout(causal)
    _check_layout(layout)
    scale = None
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not hasattr(softmax_scale, "__float__"):
            raise TypeError(f"softmax_scale must be a float or None, got {type(softmax_scale).__name__}")
        scale = float(softmax_scale)
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"softmax_scale must be finite and > 0, got {scale}")
    return bool(causal), scale, layout


# --- public API ----------------------------------------------------------------------------------------


def ring_attention(q, k, v, group=None, causal=False, softmax_scale=None, layout=None, return_lse=False):
    """Exact attention over a sequence sharded across the ranks of a torch.distributed group.

    q, k, v: this rank's shards, (batch, local_seqlen, heads, head_dim); k/v may have fewer heads
    (GQA/MQA). Every rank must pass shards of the same shape, cut from the full sequence by
    shard(x, rank, world_size, layout) (rank and world_size of `group`). group: the process group
    (None: the default one); world size 1 runs without communication.
    layout: "contiguous" or "zigzag"; default zigzag when causal (every rank does the same work),
    contiguous otherwise. causal: the full sequence's causal mask (token i sees j <= i).
    softmax_scale: defaults to 1/sqrt(head_dim).

    CUDA tensors (bf16/fp16) run hopattn's kernels (torch.ops.hopattn.fwd/bwd) on the current
    stream with NCCL (or any backend with point-to-point) for the transfers; CPU tensors run a torch
    reference in fp32 (fp64 for fp64 inputs), e.g. with gloo. Partial results are merged by their
    LSE in fp32.

    Returns out, this rank's rows of the attention output in q's dtype; with return_lse=True
    (out, lse) where lse (batch, heads, local_seqlen) is fp32 (fp64 for fp64 inputs), natural log,
    not differentiable. Differentiable with respect to q, k and v.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_attention needs torch.distributed initialised (dist.init_process_group)")
    comm = _ProcessGroupRing(torch, dist, group)
    causal, scale, layout = _resolve(causal, softmax_scale, layout)
    _check_shard_inputs(torch, q, k, v, layout, comm.world_size)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Sent tensors must be dense; the rest keep their strides.
    k, v = k.contiguous(), v.contiguous()
    out, lse = _ring_function(torch).apply(comm, causal, scale, layout, 1, q, k, v)
    return (out, lse) if return_lse else out


def ring_attention_emulated(q_shards, k_shards, v_shards, causal=False, softmax_scale=None, layout=None,
                            streams=None, return_lse=False):
    """ring_attention for all W ranks in one process, for testing the ring on one device: the same
    plan, per-block compute, merge and ring loops, with the transfers replaced by a rotation of the
    list of shards. q_shards etc.: lists of the W ranks' shards (rank order, as shard() cuts them).
    streams: None (everything on the current stream) or a sequence of CUDA streams; emulated rank i
    then works on streams[i % len(streams)], ordered after the previous rank's stream at each
    transfer. Differentiable. Returns the list of outs (and the list of lses with return_lse)."""
    import torch

    q_shards, k_shards, v_shards = list(q_shards), list(k_shards), list(v_shards)
    w = len(q_shards)
    if w == 0:
        raise ValueError("ring_attention_emulated needs at least one shard")
    if len(k_shards) != w or len(v_shards) != w:
        raise ValueError(f"need one q, k and v shard per rank, got {w}, {len(k_shards)} and {len(v_shards)}")
    first = q_shards[0]
    causal, scale, layout = _resolve(causal, softmax_scale, layout)
    for r in range(w):
        _check_shard_inputs(torch, q_shards[r], k_shards[r], v_shards[r], layout, w, f" (rank {r})")
        for name, shards in (("q", q_shards), ("k", k_shards), ("v", v_shards)):
            t, t0 = shards[r], shards[0]
            if t.shape != t0.shape or t.dtype != t0.dtype or t.device != t0.device:
                raise ValueError(
                    f"{name} shard of rank {r} is {tuple(t.shape)} {t.dtype} on {t.device} but rank 0's is "
                    f"{tuple(t0.shape)} {t0.dtype} on {t0.device}: every rank needs shards of one shape"
                )
    scale = 1.0 / math.sqrt(first.shape[-1]) if scale is None else scale
    if streams is not None:
        streams = list(streams)
        if not streams:
            streams = None
        elif not first.is_cuda:
            raise ValueError("streams are for CUDA tensors")
    comm = _EmulatedRing(torch, w, streams)
    results = _ring_function(torch).apply(comm, causal, scale, layout, w, *q_shards, *k_shards, *v_shards)
    outs, lses = list(results[:w]), list(results[w:])
    return (outs, lses) if return_lse else outs
