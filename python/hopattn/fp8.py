# FP8 (e4m3) forward on torch CUDA tensors, over the C ABI's FP8 entry points (hopattn_c.h, ABI 3):
# attention_fp8 (bf16/fp16 in, rotated and quantised inside), forward_fp8 (e4m3 in, with descales)
# and quantize_fp8 (the rotate-and-quantise kernel alone); and their packed variable-length forms
# (ABI 9) attention_fp8_varlen and forward_fp8_varlen (varlen.py's layout and index tensors). None
# of them is differentiable. As in ops.py, torch is never imported here: a torch tensor exists only
# if the caller imported torch. The numpy model of the arithmetic is hopattn.fp8_reference; the C++
# contract, hopattn.hpp ("FP8 (e4m3) forward (issue 4)", "FP8 on packed variable-length batches").
import ctypes

from . import _lib
from .ops import _LAYOUT, _check_int64, _check_scale, _check_torch_inputs, _torch_module_of
from .varlen import _check_torch as _check_varlen_torch
from .varlen import _index_arrays

# Rows per quantisation block (hopattn::kFp8BlockRows): descales have ceil(seqlen / 128) blocks.
FP8_BLOCK_ROWS = 128
_WORKSPACE_ALIGNMENT = 256
_SEED_LIMIT = 1 << 32


def _require_torch(name, x, fn):
    torch = _torch_module_of(x)
    if torch is None:
        raise TypeError(f"{name}: {fn} takes torch CUDA tensors, got {type(x).__name__}")
    return torch


def _check_torch_input(torch, name, x):
    """What ops._check_torch_inputs checks of q, k and v, for one tensor."""
    if x.device.type != "cuda":
        raise _lib.InvalidArgumentError(f"{name}: expected a CUDA tensor, got device '{x.device}'")
    if x.dim() != 4:
        raise _lib.InvalidArgumentError(f"{name}: expected 4 dims {_LAYOUT}, got shape {tuple(x.shape)}")
    if x.layout != torch.strided:
        raise _lib.InvalidArgumentError(f"{name}: expected a dense (strided) tensor, got layout {x.layout}")


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, int) and not hasattr(seed, "__index__"):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed.__index__())
    if not 0 <= seed < _SEED_LIMIT:
        raise _lib.InvalidArgumentError(f"seed={seed} is out of range (a uint32: 0 <= seed < 2**32)")
    return seed


def _e4m3_dtype(torch):
    dt = getattr(torch, "float8_e4m3fn", None)
    if dt is None:
        raise _lib.UnsupportedError(f"torch {torch.__version__} has no torch.float8_e4m3fn (needs torch >= 2.1)")
    return dt


def _tensor(torch, name, t):
    """A HopattnTensor for a torch tensor of any dtype the C ABI names (the library checks which
    dtype each argument takes and names the argument when it is wrong)."""
    code = _lib.torch_dtype_codes(torch).get(t.dtype)
    if code is None:
        raise _lib.InvalidArgumentError(
            f"{name}: dtype {t.dtype} has no hopattn code (bfloat16, float16, float32, float8_e4m3fn)"
        )
    return _lib.make_tensor(t.data_ptr(), code, tuple(t.shape), t.stride())


def _workspace(torch, nbytes, device):
    """(tensor, pointer) of nbytes uninitialised device bytes, 256-byte aligned; (None, None) for 0.
    The caller keeps the tensor referenced until the call is enqueued; torch's allocator orders any
    later reuse of the memory after it on the stream."""
    if not nbytes:
        return None, None
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=device)
    ptr = workspace.data_ptr()
    if ptr % _WORKSPACE_ALIGNMENT:  # not with torch's CUDA allocator (512-byte blocks); just in case
        workspace = torch.empty(nbytes + _WORKSPACE_ALIGNMENT, dtype=torch.uint8, device=device)
        ptr = -(-workspace.data_ptr() // _WORKSPACE_ALIGNMENT) * _WORKSPACE_ALIGNMENT
    return workspace, ptr


def _stream(torch, device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _descale_arg(torch, name, d, shape, device):
    """None (left out: 1), a torch tensor passed as is (the library checks shape, fp32 and
    contiguity), or a Python number / 0-dim tensor broadcast to `shape` (one value for the tensor)."""
    if d is None:
        return None
    if isinstance(d, bool):
        raise TypeError(f"{name}: expected a float32 tensor, a float or None, got bool")
    if isinstance(d, torch.Tensor):
        if d.device != device:
            raise _lib.InvalidArgumentError(f"{name}: on device '{d.device}' but q is on '{device}'")
        if d.dim() == 0:
            return d.to(torch.float32).reshape((1,) * len(shape)).expand(*shape).contiguous()
        return d
    if hasattr(d, "__float__"):
        return torch.full(shape, float(d), dtype=torch.float32, device=device)
    raise TypeError(f"{name}: expected a float32 tensor, a float or None, got {type(d).__name__}")


def attention_fp8(q, k, v, causal=False, softmax_scale=None, incoherent=True, block_quant=True, seed=0, return_lse=False,
                  rotate_v=False, quantize_v=True):
    """Softmax attention with FP8 (e4m3) tensor-core math, FlashAttention-3's FP8 forward.

    q: (batch, seqlen_q, heads_q, head_dim), k, v: (batch, seqlen_k, heads_kv, head_dim): torch
    CUDA tensors, bfloat16 or float16 (all the same), head_dim 64/128/256, heads_q a multiple of
    heads_kv; any strides with a contiguous last dim (rows 16-byte aligned). Runs on the current
    stream of q's device: a rotate-and-quantise pass over Q and K, a quantise-and-transpose pass
    over V, then the FP8 attention kernel; the e4m3 copies live in a workspace allocated here with
    torch (no host synchronisation).

    incoherent: multiply Q and K by the same random orthogonal M = diag(signs(seed)) * H / sqrt(d)
    (H the Hadamard matrix) before quantising; Q K^T is unchanged while outlier features spread over
    all coordinates. seed (0 <= seed < 2**32) picks the signs, as hopattn.fp8_reference
    .rotation_signs defines them. block_quant: one scale per 128 rows of each (batch, head) of Q
    and K (else one per (batch, head)); V always has one per (batch, kv head). rotate_v (with
    incoherent): V is rotated by the same M before quantising, and the kernel multiplies O by M^T
    before writing it. Off by default: on the paper's outlier inputs it did not change the error
    (docs/perf-notes.md) and costs a pass over V. P is rounded to e4m3 before P V; the row sums, O
    and lse are fp32.

    quantize_v=False: only Q K^T runs in e4m3. V is read as it is (no pass over it) and P is rounded
    to q's 16-bit dtype, so P V runs at the 16-bit tensor-core rate. On the paper's outlier inputs
    e4m3 V is ~40% of the remaining squared error, which this removes (bench/fp8_accuracy.py).
    Fixed-length batches only; not with rotate_v.

    causal, softmax_scale (default 1/sqrt(head_dim)) and the rows that see no key are as in
    hopattn.attention. Returns out (batch, seqlen_q, heads_q, head_dim) in q's dtype, contiguous,
    and with return_lse also lse (batch, heads_q, seqlen_q) float32.

    Not differentiable: the outputs carry no autograd history even when the inputs require grad.
    Expect errors of a few percent (relative L2), see bench/fp8_accuracy.py.
    """
    _check_scale(softmax_scale)
    seed = _check_seed(seed)
    torch = _require_torch("q", q, "attention_fp8")
    _check_torch_inputs(torch, q, k, v)
    lib = _lib.load()
    batch, seqlen_q, heads_q, head_dim = q.shape
    with torch.cuda.device(q.device):
        out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
        lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device) if return_lse else None
        args = _lib.make_fp8_attention_args(
            _tensor(torch, "q", q),
            _tensor(torch, "k", k),
            _tensor(torch, "v", v),
            _tensor(torch, "out", out),
            None if lse is None else _tensor(torch, "lse", lse),
            causal,
            softmax_scale,
            incoherent,
            block_quant,
            seed,
            rotate_v,
            quantize_v,
        )
        # 0 when the arguments are invalid: the call below then reports what is wrong.
        nbytes = int(lib.hopattn_attention_fp8_workspace_size(ctypes.byref(args)))
        workspace, ptr = _workspace(torch, nbytes, q.device)
        status = lib.hopattn_attention_fp8(ctypes.byref(args), ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes),
                                           _stream(torch, q.device))
        _lib.check(status, "hopattn attention_fp8")
        del workspace
    return (out, lse) if return_lse else out


def forward_fp8(q, k, v, q_descale=None, k_descale=None, v_descale=None, causal=False, softmax_scale=None,
                out_dtype=None, return_lse=False):
    """The FP8 attention kernel on inputs quantised elsewhere.

    q: (batch, seqlen_q, heads_q, head_dim), k, v: (batch, seqlen_k, heads_kv, head_dim): torch
    CUDA tensors of dtype torch.float8_e4m3fn, head_dim 64/128/256, any strides with a contiguous
    last dim (rows 16-byte aligned). The true values are x_e4m3 * x_descale, with float32 CUDA
    descales (contiguous):

      q_descale: (batch, heads_q, nq), nq = 1 (one per head) or ceil(seqlen_q / 128) (per block)
      k_descale: (batch, heads_kv, nk), nk = 1 or ceil(seqlen_k / 128)
      v_descale: (batch, heads_kv)

    None means 1; a Python float or a 0-dim tensor is one scale for the whole tensor (broadcast to
    the per-head shape). softmax_scale (default 1/sqrt(head_dim)) applies to the true q.k.
    v may instead be bfloat16/float16: only Q K^T runs in e4m3, V is read in place and P is
    rounded to v's dtype (as attention_fp8 with quantize_v=False), with no v_descale, no
    workspace, and out_dtype defaulting to (and required to be) v's dtype.
    out_dtype: torch.bfloat16 (None, the default) or torch.float16. The call re-lays V out
    (transposed, what FP8 WGMMA reads) into a workspace allocated here with torch, then runs the
    kernel on the current stream. Returns out (batch, seqlen_q, heads_q, head_dim) of out_dtype,
    and with return_lse also lse (batch, heads_q, seqlen_q) float32. Not differentiable.
    """
    _check_scale(softmax_scale)
    torch = _require_torch("q", q, "forward_fp8")
    _check_torch_inputs(torch, q, k, v)
    _e4m3_dtype(torch)  # e4m3 inputs need torch.float8_e4m3fn (torch >= 2.1)
    lib = _lib.load()
    if out_dtype is None:  # a 16-bit v (the 16-bit P V kernels) sets it; else bf16
        out_dtype = v.dtype if v.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype (torch.bfloat16 or torch.float16), got {type(out_dtype).__name__}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    heads_kv = k.shape[2]
    with torch.cuda.device(q.device):
        qd = _descale_arg(torch, "q_descale", q_descale, (batch, heads_q, 1), q.device)
        kd = _descale_arg(torch, "k_descale", k_descale, (batch, heads_kv, 1), q.device)
        vd = _descale_arg(torch, "v_descale", v_descale, (batch, heads_kv), q.device)
        out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=out_dtype, device=q.device)
        lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device) if return_lse else None
        args = _lib.make_fp8_fwd_args(
            _tensor(torch, "q", q),
            _tensor(torch, "k", k),
            _tensor(torch, "v", v),
            None if qd is None else _tensor(torch, "q_descale", qd),
            None if kd is None else _tensor(torch, "k_descale", kd),
            None if vd is None else _tensor(torch, "v_descale", vd),
            _tensor(torch, "out", out),
            None if lse is None else _tensor(torch, "lse", lse),
            causal,
            softmax_scale,
        )
        nbytes = int(lib.hopattn_forward_fp8_workspace_size(ctypes.byref(args)))
        workspace, ptr = _workspace(torch, nbytes, q.device)
        status = lib.hopattn_forward_fp8(ctypes.byref(args), ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes),
                                         _stream(torch, q.device))
        _lib.check(status, "hopattn forward_fp8")
        del workspace
    return (out, lse) if return_lse else out


def quantize_fp8(x, rotate=True, block_quant=True, seed=0):
    """hopattn's rotate-and-quantise kernel on its own (what attention_fp8 does to Q and K).

    x: (batch, seqlen, heads, head_dim) bfloat16/float16 CUDA tensor (head_dim a multiple of 16 up
    to 256; 64, 128 or 256 with rotate), any strides with a contiguous last dim. With rotate, rows
    are first multiplied by M(seed) = diag(signs(seed)) * H / sqrt(head_dim) (the same M as
    attention_fp8 with the same seed). Each block (128 rows of one (batch, head); with
    block_quant=False the whole (batch, head)) is scaled so that its |max| maps to 448 and rounded
    to nearest e4m3 (saturating).

    Returns (x_e4m3, descale): x_e4m3 contiguous torch.float8_e4m3fn of x's shape, descale
    float32 (batch, heads, ceil(seqlen / 128)) (or (batch, heads, 1)) with the rotated x ~
    x_e4m3 * descale (descale = amax / 448, 1 for an all-zero block); directly usable as
    forward_fp8's q_descale / k_descale. Runs on the current stream; deterministic (the same
    input and seed give the same bytes). Not differentiable.
    """
    seed = _check_seed(seed)
    torch = _require_torch("x", x, "quantize_fp8")
    _check_torch_input(torch, "x", x)
    e4m3 = _e4m3_dtype(torch)
    lib = _lib.load()
    batch, seqlen, heads, _ = x.shape
    nblocks = -(-seqlen // FP8_BLOCK_ROWS) if block_quant else 1
    with torch.cuda.device(x.device):
        out = torch.empty(tuple(x.shape), dtype=e4m3, device=x.device)
        descale = torch.empty((batch, heads, nblocks), dtype=torch.float32, device=x.device)
        if x.numel() == 0:
            # Nothing to quantise: a (batch, heads, 1) descale is 1, as for any all-zero block. (The
            # library would write nothing, and rejects a (batch, heads, 0) descale's torch strides.)
            descale.fill_(1.0)
            return out, descale
        args = _lib.make_fp8_quantize_args(
            _tensor(torch, "x", x), _tensor(torch, "out", out), _tensor(torch, "descale", descale), rotate, block_quant, seed
        )
        # The library names x "in".
        _lib.check(lib.hopattn_quantize_fp8(ctypes.byref(args), _stream(torch, x.device)), "hopattn quantize_fp8 (x)")
    return out, descale


# --- packed variable-length batches (C ABI 9) -------------------------------------------------------


def _varlen_batch(cu_seqlens_q):
    """The number of sequences, batch = cu_seqlens_q.shape[0] - 1, for broadcasting scalar
    descales; 0 when cu_seqlens_q is not a vector (the library then names it, before it looks at
    the descales)."""
    return max(cu_seqlens_q.shape[0] - 1, 0) if cu_seqlens_q.dim() == 1 else 0


def _varlen_call(torch, lib, size_fn, call_fn, what, args, device):
    """Workspace (size from the library, bytes from torch's allocator) and the call on the current
    stream of device; raises what the library reports."""
    # 0 when the arguments are invalid (or there is nothing to run): the call then reports or no-ops.
    nbytes = int(size_fn(ctypes.byref(args)))
    workspace, ptr = _workspace(torch, nbytes, device)
    status = call_fn(ctypes.byref(args), ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes), _stream(torch, device))
    _lib.check(status, what)
    del workspace


def attention_fp8_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                         seqused_k=None, causal=False, softmax_scale=None, incoherent=True, block_quant=True, seed=0,
                         return_lse=False, rotate_v=False, check_index_values=False):
    """attention_fp8 on a packed variable-length batch (FlashAttention-3's varlen layout).

    q: (total_q, heads_q, head_dim), k, v: (total_k, heads_kv, head_dim): torch CUDA tensors,
    bfloat16 or float16 (all the same), head_dim 64/128/256, heads_q a multiple of heads_kv; any
    strides with a contiguous last dim (rows 16-byte aligned). Sequence b is rows
    cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q and cu_seqlens_k[b] .. cu_seqlens_k[b+1] of k and v.
    cu_seqlens_q, cu_seqlens_k: int32 CUDA tensors on q's device, contiguous, batch + 1 entries,
    prefix sums starting at 0. max_seqlen_q, max_seqlen_k: ints at least the longest sequence of each
    side. seqused_q, seqused_k: optional int32 (batch,): only the first seqused[b] tokens of sequence
    b take part; the other query rows get out 0, lse -inf. Zero-length sequences are fine. All as
    hopattn.varlen_attention; no window or softcap (the FP8 kernel has neither).

    Quantisation as attention_fp8's, per sequence: incoherent (rotation M(seed), 0 <= seed < 2**32),
    block_quant (one scale per 128 rows of one (sequence, head), counted from the sequence's first
    token, so a block never mixes sequences; else one per (sequence, head)), V one scale per
    (sequence, kv head), rotate_v. Each sequence's rows are what attention_fp8 gives on that
    sequence alone as a batch of one, with the same options. The kernel reads no value of another
    sequence: unlike varlen_attention, V rows outside the sequences need not be finite. Runs on the
    current stream of q's device; the e4m3 copies live in a workspace allocated here with torch.

    causal: bottom-right aligned per sequence; softmax_scale defaults to 1/sqrt(head_dim).
    check_index_values=True copies the index tensors to the host (a sync) and checks their values
    as varlen_attention does (HOPATTN_DEBUG_CHECKS=1 turns it on for every call). Returns out
    (total_q, heads_q, head_dim) in q's dtype, contiguous, and with return_lse also lse
    (heads_q, total_q) float32; rows past cu_seqlens_q[batch] are not written.

    Not differentiable: the outputs carry no autograd history even when the inputs require grad.
    """
    _check_scale(softmax_scale)
    seed = _check_seed(seed)
    max_seqlen_q = _check_int64("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _check_int64("max_seqlen_k", max_seqlen_k)
    torch = _require_torch("q", q, "attention_fp8_varlen")
    index = _index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    _check_varlen_torch(torch, q, k, v, index)
    lib = _lib.load()
    total_q, heads_q, head_dim = q.shape
    with torch.cuda.device(q.device):
        out = torch.empty((total_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
        lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device) if return_lse else None
        idx = {name: None if t is None else _tensor(torch, name, t) for name, t in index.items()}
        args = _lib.make_fp8_varlen_attention_args(
            _tensor(torch, "q", q),
            _tensor(torch, "k", k),
            _tensor(torch, "v", v),
            _tensor(torch, "out", out),
            None if lse is None else _tensor(torch, "lse", lse),
            idx["cu_seqlens_q"],
            idx["cu_seqlens_k"],
            idx["seqused_q"],
            idx["seqused_k"],
            max_seqlen_q,
            max_seqlen_k,
            causal,
            softmax_scale,
            incoherent,
            block_quant,
            seed,
            rotate_v,
            check_index_values,
        )
        _varlen_call(torch, lib, lib.hopattn_attention_fp8_varlen_workspace_size, lib.hopattn_attention_fp8_varlen,
                     "hopattn attention_fp8_varlen", args, q.device)
    return (out, lse) if return_lse else out


def forward_fp8_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q_descale=None, k_descale=None,
                       v_descale=None, seqused_q=None, seqused_k=None, causal=False, softmax_scale=None, out_dtype=None,
                       return_lse=False, check_index_values=False):
    """forward_fp8 on a packed variable-length batch: the FP8 kernel on inputs quantised elsewhere.

    q: (total_q, heads_q, head_dim), k, v: (total_k, heads_kv, head_dim): torch CUDA tensors of
    dtype torch.float8_e4m3fn, head_dim 64/128/256, any strides with a contiguous last dim (rows
    16-byte aligned). cu_seqlens_q/k, max_seqlen_q/k, seqused_q/k, causal and check_index_values as
    attention_fp8_varlen. The true values are x_e4m3 * x_descale, with float32 CUDA descales
    (contiguous), batch = cu_seqlens_q.shape[0] - 1 sequences:

      q_descale: (batch, heads_q, nq), nq = 1 (one per (sequence, head)) or ceil(max_seqlen_q / 128)
                 (block j of sequence b scales its rows [128 j, 128 j + 128))
      k_descale: (batch, heads_kv, nk), nk = 1 or ceil(max_seqlen_k / 128), likewise
      v_descale: (batch, heads_kv)

    None means 1; a Python float or a 0-dim tensor is one scale for the whole tensor (broadcast to
    the per-head shape). softmax_scale (default 1/sqrt(head_dim)) applies to the true q.k.
    out_dtype: torch.bfloat16 (None, the default) or torch.float16. The call re-lays V out
    (transposed, whole 128-key tiles per sequence) into a workspace allocated here with torch, then
    runs the kernel on the current stream. Returns out (total_q, heads_q, head_dim) of out_dtype,
    and with return_lse also lse (heads_q, total_q) float32; rows past cu_seqlens_q[batch] are not
    written. Not differentiable.
    """
    _check_scale(softmax_scale)
    max_seqlen_q = _check_int64("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _check_int64("max_seqlen_k", max_seqlen_k)
    torch = _require_torch("q", q, "forward_fp8_varlen")
    index = _index_arrays(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)
    _check_varlen_torch(torch, q, k, v, index)
    _e4m3_dtype(torch)  # e4m3 inputs need torch.float8_e4m3fn (torch >= 2.1)
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype (torch.bfloat16 or torch.float16), got {type(out_dtype).__name__}")
    total_q, heads_q, head_dim = q.shape
    heads_kv = k.shape[1]
    batch = _varlen_batch(cu_seqlens_q)
    with torch.cuda.device(q.device):
        qd = _descale_arg(torch, "q_descale", q_descale, (batch, heads_q, 1), q.device)
        kd = _descale_arg(torch, "k_descale", k_descale, (batch, heads_kv, 1), q.device)
        vd = _descale_arg(torch, "v_descale", v_descale, (batch, heads_kv), q.device)
        lib = _lib.load()  # after every check made here: a bad argument above needs no library
        out = torch.empty((total_q, heads_q, head_dim), dtype=out_dtype, device=q.device)
        lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device) if return_lse else None
        idx = {name: None if t is None else _tensor(torch, name, t) for name, t in index.items()}
        args = _lib.make_fp8_varlen_fwd_args(
            _tensor(torch, "q", q),
            _tensor(torch, "k", k),
            _tensor(torch, "v", v),
            None if qd is None else _tensor(torch, "q_descale", qd),
            None if kd is None else _tensor(torch, "k_descale", kd),
            None if vd is None else _tensor(torch, "v_descale", vd),
            _tensor(torch, "out", out),
            None if lse is None else _tensor(torch, "lse", lse),
            idx["cu_seqlens_q"],
            idx["cu_seqlens_k"],
            idx["seqused_q"],
            idx["seqused_k"],
            max_seqlen_q,
            max_seqlen_k,
            causal,
            softmax_scale,
            check_index_values,
        )
        _varlen_call(torch, lib, lib.hopattn_forward_fp8_varlen_workspace_size, lib.hopattn_forward_fp8_varlen,
                     "hopattn forward_fp8_varlen", args, q.device)
    return (out, lse) if return_lse else out
