# KV-cache decoding, FlashAttention-3's flash_attn_with_kvcache: hopattn.attention_with_kvcache over
# the C ABI's hopattn_attention_with_kvcache (torch CUDA tensors: the sm90 split-KV kernels, on the
# current stream) and hopattn_attention_with_kvcache_cpu (numpy arrays: the CPU reference). Forward
# only. As in ops.py, torch is never imported here. Under torch.compile and other tracing the call
# is the custom op torch.ops.hopattn.fwd_kvcache (torch_ops.py; it declares the in-place append).
#
# Python checks only what it needs to build the C struct (array types, devices, the int32 index
# tensors); the library checks every argument and its message becomes the exception's.
import ctypes
import functools

from . import _lib
from .ops import (
    _NO_TENSOR,
    _PACK_ERRORS,
    _packer,
    NO_WINDOW,
    _check_numpy_inputs,
    _check_int64,
    _check_scale,
    _check_softcap,
    _check_torch_inputs,
    _check_window,
    _direct,
    _is_numpy_array,
    _numpy_tensor,
    _torch_module_of,
    _torch_ops_module,
    _torch_tensor,
)
from .varlen import _plain_eager

KVCACHE_LAYOUT = "(batch, seqlen, heads, head_dim)"
NO_BACKWARD = "hopattn.attention_with_kvcache is forward only (decoding); it has no backward"

_declared = set()  # ids of the loaded libraries whose KV-cache signatures are set


def _lib_kvcache():
    """The loaded library with the three KV-cache functions declared (set up once per library)."""
    lib = _lib.load()
    if id(lib) not in _declared:
        args_p = ctypes.POINTER(_lib.HopattnKvcacheArgs)
        sigs = {
            "hopattn_attention_with_kvcache_workspace_size": ([args_p], ctypes.c_size_t),
            "hopattn_attention_with_kvcache": ([args_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_int),
            "hopattn_attention_with_kvcache_cpu": ([args_p], ctypes.c_int),
        }
        try:
            for name, (argtypes, restype) in sigs.items():
                fn = getattr(lib, name)
                fn.argtypes = argtypes
                fn.restype = restype
        except AttributeError as e:
            raise _lib.LibraryNotFoundError(
                f"{_lib.library_path()} has no KV-cache entry points ({e}); rebuild the library"
            ) from e
        _declared.add(id(lib))
    return lib


_INT32_LIMIT = 1 << 31


def _check_num_splits(num_splits):
    """An int (not bool) that fits the C struct's int32; the library checks its value."""
    if type(num_splits) is int and -_INT32_LIMIT <= num_splits < _INT32_LIMIT:  # every call: the plain int first
        return num_splits
    return _check_int64("num_splits", num_splits, bits=32)


def _check_new(k, v):
    if (k is None) != (v is None):
        raise _lib.InvalidArgumentError(
            f"k and v (the new keys and values) must be given together, but only {'k' if v is None else 'v'} is"
        )


def _args(tensor, q, k_cache, v_cache, cache_seqlens, page_table, k, v, out, lse, causal, softmax_scale, num_splits,
          check_index_values, window=NO_WINDOW, softcap=0.0):
    """HopattnKvcacheArgs; tensor(name, x, code=None) makes one HopattnTensor (ops._numpy_tensor, or
    ops._torch_tensor bound to torch). None (page_table, k, v, lse) is left out. window: a
    (left, right) pair (ops._check_window), per sequence over its cache after the append; softcap
    as ops._check_softcap returns it."""

    def opt(name, x, code=None):
        return None if x is None else tensor(name, x, code)

    return _lib.make_kvcache_args(
        tensor("q", q), tensor("k_cache", k_cache), tensor("v_cache", v_cache),
        tensor("cache_seqlens", cache_seqlens, _lib.DTYPE_INT32), opt("page_table", page_table, _lib.DTYPE_INT32),
        opt("k", k), opt("v", v), tensor("out", out), opt("lse", lse),
        causal, softmax_scale, num_splits, check_index_values, window, softcap,
    )


# The CUDA route's HopattnKvcacheArgs in one struct.pack_into (as hopattn.attention's direct path,
# ops._fwd_args): building nine ctypes HopattnTensors cost most of the call's ~70 µs of Python.
# The packer is checked byte for byte against the ctypes constructor once (ops._packer); None keeps
# the constructor path.
_kv_pack = []  # [pack_into or None], built on first use


def _kv_packer():
    if not _kv_pack:
        # Sample tail: causal, has_softmax_scale, softmax_scale, num_splits, check_index_values,
        # has_window and bounds that need all 64 bits, softcap (ABI 8).
        _kv_pack.append(_packer(_lib.HopattnKvcacheArgs, 9, (1, 1, 0.5, 3, 1, 1, 1 << 40, -(1 << 35), 0.25)))
    return _kv_pack[0]


_PADS = ((0, 0, 0, 0), (0, 0, 0), (0, 0), (0,), ())  # by ndim: the unused sizes / strides


def _fields(t, code):
    """HopattnTensor's fields for t as _lib.make_tensor fills them (its stride substitutions
    included), or _NO_TENSOR for None."""
    if t is None:
        return _NO_TENSOR
    sizes = t.shape
    ndim = len(sizes)
    # q, the caches, k/v and out: 4 dims that make_tensor keeps as they are (no empty dim, last
    # dim not 1), answered without the general path's tuples.
    if ndim == 4 and sizes[3] != 1 and 0 not in sizes:
        strides = t.stride()
        return (t.data_ptr(), code, 4, *sizes, *strides)
    if ndim == 1:  # cache_seqlens: addressing_strides gives 1 for a size of 0 or 1
        n = sizes[0]
        strides = t.stride()
        return (t.data_ptr(), code, 1, n, 0, 0, 0, strides[0] if n > 1 else 1, 0, 0, 0)
    if ndim > 4:
        raise ValueError("hopattn tensors have at most 4 dims")
    strides = t.stride()
    if 0 in sizes or (ndim and sizes[-1] == 1):  # the cases addressing_strides changes
        strides = _lib.addressing_strides(sizes, strides)
    pad = _PADS[ndim]
    return (t.data_ptr(), code, ndim, *sizes, *pad, *strides, *pad)


def _packed_args(codes, q, k_cache, v_cache, cache_seqlens, page_table, k, v, out, lse, causal, softmax_scale,
                 num_splits, check_index_values, window, softcap=0.0):
    """_args' struct by one pack_into (torch tensors; codes: dtype code per attention dtype), or None
    when the packer is unavailable or a value needs ctypes' own conversion (it then decides, as before)."""
    pack = _kv_pack[0] if _kv_pack else _kv_packer()
    qc = codes.get(q.dtype)
    if pack is None or qc is None:
        return None
    i32, f32 = _lib.DTYPE_INT32, _lib.DTYPE_FP32
    fields, absent = _fields, _NO_TENSOR
    args = _lib.HopattnKvcacheArgs()
    try:
        pack(
            args, 0,
            *fields(q, qc), *fields(k_cache, codes.get(k_cache.dtype, -1)), *fields(v_cache, codes.get(v_cache.dtype, -1)),
            *fields(cache_seqlens, i32), *(absent if page_table is None else fields(page_table, i32)),
            *(absent if k is None else fields(k, codes.get(k.dtype, -1))),
            *(absent if v is None else fields(v, codes.get(v.dtype, -1))),
            *fields(out, qc), *(absent if lse is None else fields(lse, f32)),
            1 if causal else 0, *((0, 0.0) if softmax_scale is None else (1, float(softmax_scale))), num_splits,
            1 if check_index_values else 0, *_lib._window_fields(window), softcap,
        )
    except _PACK_ERRORS:
        return None
    return args


def _check_index(name, is_int32, ok_layout, layout):
    if not is_int32:
        raise _lib.InvalidArgumentError(f"{name}: dtype must be int32")
    if not ok_layout:
        raise _lib.InvalidArgumentError(f"{name} must be {layout}")


# --- numpy: the CPU reference ---------------------------------------------------------------------


def _run_numpy(q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale, num_splits, return_lse,
               window=NO_WINDOW, softcap=0.0):
    import numpy as np

    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)] + ([("k", k), ("v", v)] if k is not None else [])
    _check_numpy_inputs(named, 4, KVCACHE_LAYOUT)
    for name, a in (("cache_seqlens", cache_seqlens), ("page_table", page_table)):
        if a is None:
            continue
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray (int32) like q, got {type(a).__name__}")
        _check_index(name, a.dtype == np.int32, a.flags.c_contiguous, "C-contiguous")
    if k is not None:
        for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not a.flags.writeable:
                raise _lib.InvalidArgumentError(f"{name} is read-only, but k/v are appended to it in place")
    batch, seqlen_q, heads_q, _ = q.shape
    out = np.empty(q.shape, dtype=q.dtype)
    lse = np.empty((batch, heads_q, seqlen_q), dtype=np.float32) if return_lse else None
    args = _args(_numpy_tensor, q, k_cache, v_cache, cache_seqlens, page_table, k, v, out, lse, causal, softmax_scale,
                 num_splits, False, window, softcap)
    _lib.check(_lib_kvcache().hopattn_attention_with_kvcache_cpu(ctypes.byref(args)), "hopattn KV-cache CPU reference")
    return (out, lse) if return_lse else out


# --- torch ----------------------------------------------------------------------------------------
#
# Two routes, as hopattn.attention's (ops.py): a plain eager call goes straight to _launch_cuda; under
# torch.compile and other tracing (fake tensors, subclasses, dispatch/function modes, functorch,
# jit.trace) the call is the custom op torch.ops.hopattn.fwd_kvcache (torch_ops.py), which declares
# the in-place append (mutates_args=("k_cache", "v_cache")) and whose kernels are _op_forward.


def _check_torch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, require_cuda=True):
    """q, k_cache, v_cache (and k, v): dense CUDA tensors of 4 dims on q's device; the index tensors
    int32 on q's device with a contiguous last dim. require_cuda=False (the custom op's CPU kernel
    and fake implementation) accepts any one device."""
    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)] + ([("k", k), ("v", v)] if k is not None else [])
    if require_cuda:
        _check_torch_inputs(torch, q, k_cache, v_cache, 4, KVCACHE_LAYOUT)
        if k is not None:
            _check_torch_inputs(torch, q, k, v, 4, KVCACHE_LAYOUT)
    else:
        for name, t in named:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor like q, got {type(t).__name__}")
            if t.dim() != 4:
                raise _lib.InvalidArgumentError(f"{name}: expected 4 dims {KVCACHE_LAYOUT}, got shape {tuple(t.shape)}")
            if t.device != q.device:
                raise _lib.InvalidArgumentError(f"{name}: on device '{t.device}' but q is on '{q.device}'")
    for name, t in (("cache_seqlens", cache_seqlens), ("page_table", page_table)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor (int32) like q, got {type(t).__name__}")
        if t.device != q.device:
            raise _lib.InvalidArgumentError(f"{name}: on device '{t.device}' but q is on '{q.device}'")
        _check_index(name, t.dtype == torch.int32, t.dim() == 0 or t.stride(-1) == 1 or t.shape[-1] <= 1,
                     "contiguous along its last dim")


def _launch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale, num_splits,
            check_index_values, with_lse, window=NO_WINDOW, softcap=0.0):
    """out (contiguous, q's dtype) and with with_lse lse (batch, heads_q, seqlen_q) float32, k/v
    appended to the caches in place: the sm90 kernels on q's device and its current stream
    (_launch_cuda), or the CPU reference for CPU tensors (the custom op's CPU kernel, which always
    checks the index values). Inputs already checked by _check_torch."""
    if q.device.type != "cpu":
        return _launch_cuda(_direct(torch), q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal,
                            softmax_scale, num_splits, check_index_values, with_lse, window, softcap)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32) if with_lse else None
    args = _args(functools.partial(_torch_tensor, torch), q, k_cache, v_cache, cache_seqlens, page_table, k, v, out,
                 lse, causal, softmax_scale, num_splits, False, window, softcap)
    _lib.check(_lib_kvcache().hopattn_attention_with_kvcache_cpu(ctypes.byref(args)), "hopattn KV-cache CPU reference")
    return (out, lse) if with_lse else out


def _launch_cuda(st, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale, num_splits,
                 check_index_values, with_lse, window, softcap=0.0):
    """_launch for CUDA tensors (st: ops._direct(torch)), kept flat: at small caches a decode
    step's host time is mostly this function. HopattnKvcacheArgs by one pack_into and passed as
    is (ctypes passes it by reference), ints for device and stream, the workspace from torch's
    caching allocator on q's device (in the current stream's order; a captured graph's own pool).
    The workspace-size query stays one C call: memoising it by shape cost as much host time as the
    query (~0.6 µs either way), which only revalidates the arguments and replans the split."""
    out = st.empty_like(q, memory_format=st.contiguous_format)
    if with_lse:
        shape = q.shape
        lse = q.new_empty((shape[0], shape[2], shape[1]), dtype=st.float32)
    else:
        lse = None
    codes = st.codes
    args = None
    if (codes.get(k_cache.dtype) is not None and codes.get(v_cache.dtype) is not None
            and (k is None or codes.get(k.dtype) is not None) and (v is None or codes.get(v.dtype) is not None)):
        args = _packed_args(codes, q, k_cache, v_cache, cache_seqlens, page_table, k, v, out, lse, causal,
                            softmax_scale, num_splits, check_index_values, window, softcap)
    if args is None:  # an unsupported dtype (its error comes from _torch_tensor), or no packer
        args = _args(functools.partial(_torch_tensor, st.torch), q, k_cache, v_cache, cache_seqlens, page_table, k, v,
                     out, lse, causal, softmax_scale, num_splits, check_index_values, window, softcap)
    lib = _lib_kvcache()
    dev = q.get_device()
    prev = st.exchange_device(dev)  # a no-op when q is on the current device
    try:
        # The split count (and so the workspace) follows the current device's SM count.
        need = lib.hopattn_attention_with_kvcache_workspace_size(args)
        workspace = q.new_empty(need, dtype=st.uint8) if need else None
        status = lib.hopattn_attention_with_kvcache(args, None if workspace is None else workspace.data_ptr(), need,
                                                    st.raw_stream(dev))
    finally:
        st.restore_device(prev)
    if status:
        _lib.check(status, "hopattn KV-cache attention")
    return (out, lse) if with_lse else out


def _op_forward(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale, num_splits,
                check_index_values, window=NO_WINDOW, require_cuda=True, softcap=0.0):
    """(out, lse) for the kernels of torch.ops.hopattn.fwd_kvcache (torch_ops.py): checks, then _launch.
    window: the op's (window_left, window_right); their values, and softcap's, are the library's to
    check."""
    _check_new(k, v)
    _check_torch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, require_cuda)
    return _launch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale, num_splits,
                   check_index_values, True, window, softcap)


def _plain_cuda(st, q, k_cache, v_cache, cache_seqlens, k, v, page_table):
    """True for a plain eager call (_plain_eager's condition, a torch.device(...) mode excepted) whose
    tensors pass _check_torch's CUDA rules, tested in C attribute reads alone; False sends the call
    through _run_torch, whose checks raise their own errors. k and v: both given or both None
    (_check_new)."""
    T = st.Tensor
    if not (
        type(q) is T and type(k_cache) is T and type(v_cache) is T and type(cache_seqlens) is T
        and (k is None or (type(k) is T and type(v) is T)) and (page_table is None or type(page_table) is T)
        and not st.dispatch_modes() and not st.functorch() and st.jit_tracing() is None and not st.function_modes()
    ):
        return False
    dev = q.get_device()
    strided = st.strided
    for t in (q, k_cache, v_cache) if k is None else (q, k_cache, v_cache, k, v):
        if not (t.is_cuda and t.get_device() == dev and t.dim() == 4 and t.layout is strided):
            return False
    int32 = st.torch.int32
    for t in (cache_seqlens, page_table):
        # The layout test in _check_torch's own terms, so anything it raises (the stride of a sparse
        # tensor) is raised here at the same point.
        if t is not None and not (t.is_cuda and t.get_device() == dev and t.dtype is int32
                                  and (t.dim() == 0 or t.stride(-1) == 1 or t.shape[-1] <= 1)):
            return False
    return True


def _run_torch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale, num_splits,
               return_lse, check_index_values, window=NO_WINDOW, softcap=0.0):
    _check_torch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k_cache, v_cache, k, v)):
        raise NotImplementedError(NO_BACKWARD)
    # is_compiling() first, as in hopattn.attention: dynamo reads it as True and never looks further.
    if not torch.compiler.is_compiling():
        if _plain_eager(_direct(torch), (q, k_cache, v_cache, cache_seqlens, k, v, page_table)):
            return _launch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal, softmax_scale,
                           num_splits, check_index_values, return_lse, window, softcap)
    out, lse = _torch_ops_module().fwd_kvcache(q, k_cache, v_cache, cache_seqlens, k, v, page_table, causal,
                                               softmax_scale, num_splits, check_index_values, *window, softcap)
    return (out, lse) if return_lse else out


# --- public API -----------------------------------------------------------------------------------


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, k=None, v=None, page_table=None, causal=False,
                           softmax_scale=None, num_splits=0, return_lse=False, check_index_values=False,
                           window_size=NO_WINDOW, softcap=0.0):
    """Attention of new query tokens against a key/value cache: decoding (a few tokens per
    sequence) and chunked prefill (many) (FlashAttention-3's flash_attn_with_kvcache). Forward only.

    Kernels: split-KV decoding for few query tokens; from 32 query tokens per sequence on a
    contiguous cache, the forward (FlashAttention-3) kernel, within 1-3% of hopattn.attention on the
    same keys and 3.3-3.7x faster than the decode kernel from 128 tokens up (H200). A paged cache
    takes it too when page_size is a multiple of the kernel's key tile (128 keys at head_dim 64 and
    at causal head_dim 128; 0-10% below a contiguous cache); smaller pages, or num_splits > 1, keep
    the decode kernel, which chunked prefill runs 3.6-4.6x slower (docs/design-kvcache-prefill.md).
    Neither kernel reads cache rows past a sequence's keys, so unused cache slots may hold anything,
    NaN included.

    q: (batch, seqlen_q, heads_q, head_dim). k_cache, v_cache: (batch, max_seqlen_k, heads_kv,
    head_dim), or with page_table (num_pages, page_size, heads_kv, head_dim), any page_size; heads_q
    a multiple of heads_kv (GQA/MQA); any strides with a contiguous last dim. cache_seqlens: int32
    (batch,), the tokens already cached per sequence. page_table: optional int32 (batch,
    max_pages); entry [b, p] is the page holding tokens p*page_size .. (p+1)*page_size - 1 of
    sequence b (entries past a sequence's tokens are not read).

    k, v: optional (batch, seqlen_new, heads_kv, head_dim) new keys and values, written into the
    cache IN PLACE at positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1, then attended
    to; cache_seqlens itself is not changed (add seqlen_new to it for the next step). Sequence b
    attends to its first cache_seqlens[b] + seqlen_new cached keys.

    causal: bottom-right aligned (query i of b sees key j iff j <= i + len_k(b) - seqlen_q), with
    len_k(b) = cache_seqlens[b] + seqlen_new; a row that sees no key gets out 0 and lse -inf.
    softmax_scale defaults to 1/sqrt(head_dim). window_size: (left, right) sliding window per
    sequence, as hopattn.attention's with seqlen_k = len_k(b): query i of b sees key j iff
    i + len_k(b) - seqlen_q - left <= j <= i + len_k(b) - seqlen_q + right, -1 leaving that side
    unbounded; (-1, -1), the default, is no window. causal is the window's right = 0, so with
    causal=True right must be -1 or 0. Python checks only that it is a pair of ints (TypeError
    otherwise); the library rejects bad values (below -1, or right > 0 with causal) with
    InvalidArgumentError naming window.left / window.right. On the GPU only the keys a window
    reaches are read (a 4k window over a 128k cache reads about 4k keys). softcap: as
    hopattn.attention's (0.0, the default, is off; > 0: each score becomes softcap *
    tanh(softmax_scale * q.k / softcap) before the softmax; a finite float >= 0, else
    InvalidArgumentError naming softcap; C ABI 8). num_splits: key splits per (batch, kv head); 0 lets the library
    choose, any value gives the same result up to fp32 rounding.

    * torch CUDA tensors (bfloat16/float16, head_dim 64/128/256; the index tensors int32 on the same
      device): the sm90 kernels on the current stream, with a workspace from torch's allocator.
      Nothing synchronises the host unless check_index_values=True, which copies cache_seqlens and
      page_table to the host and checks the values (lengths within the cache, pages within the
      pool) as the CPU reference always does; HOPATTN_DEBUG_CHECKS=1 turns it on for every call.
      Without it, bad values give wrong results but no out-of-bounds access.
    * numpy arrays (float32/float16/ml_dtypes bfloat16; int32 index arrays): the CPU reference,
      which also appends to k_cache/v_cache in place (they must be writable).

    Returns out (batch, seqlen_q, heads_q, head_dim), contiguous, q's dtype; with return_lse=True
    (out, lse) with lse (batch, heads_q, seqlen_q) float32, the natural-log log-sum-exp of the
    scaled scores.

    Two routes, the same kernels and bits, as hopattn.attention: a plain eager call goes straight to
    the library; under torch.compile / torch.export, fake tensors and other tracing the call is the
    custom op torch.ops.hopattn.fwd_kvcache (no graph break; it declares k_cache and v_cache as
    mutated, so functionalization keeps the append). Both can be captured in CUDA graphs. With grad
    mode on and q, k_cache, v_cache, k or v requiring grad it raises NotImplementedError.
    """
    _check_scale(softmax_scale)
    window = _check_window(window_size)
    softcap = _check_softcap(softcap)
    num_splits = _check_num_splits(num_splits)
    _check_new(k, v)
    scale = None if softmax_scale is None else float(softmax_scale)
    torch = _torch_module_of(q)
    if torch is not None:
        # Plain eager CUDA tensors go straight to _launch_cuda, with _check_torch's rules in a few C
        # reads (_plain_cuda): at small caches this call's host time bounds the decode step. As in
        # hopattn.attention, is_compiling() comes first: dynamo reads it as True, so a traced call
        # never looks at the state below and takes _run_torch, the route it always took.
        if not torch.compiler.is_compiling():
            st = _direct(torch)
            if _plain_cuda(st, q, k_cache, v_cache, cache_seqlens, k, v, page_table):
                if st.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad or v_cache.requires_grad
                                             or (k is not None and (k.requires_grad or v.requires_grad))):
                    raise NotImplementedError(NO_BACKWARD)
                return _launch_cuda(st, q, k_cache, v_cache, cache_seqlens, k, v, page_table, bool(causal), scale,
                                    num_splits, bool(check_index_values), bool(return_lse), window, softcap)
        return _run_torch(torch, q, k_cache, v_cache, cache_seqlens, k, v, page_table, bool(causal), scale, num_splits,
                          bool(return_lse), bool(check_index_values), window, softcap)
    if _is_numpy_array(q):
        return _run_numpy(q, k_cache, v_cache, cache_seqlens, k, v, page_table, bool(causal), scale, num_splits,
                          bool(return_lse), window, softcap)
    raise TypeError(f"q: expected a torch.Tensor (CUDA) or numpy.ndarray, got {type(q).__name__}")
