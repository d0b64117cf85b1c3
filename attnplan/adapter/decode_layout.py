"""Decode-only steps: their device metadata computed on the device, in buffers of fixed address,
captured once per batch shape as a CUDA graph and replayed every step (issue 17).

A decode-only batch of B requests taking q query tokens each has the same shape step after step
- only the KV lengths and the block table change - so everything the kernels read (KV page
indptr, page indices, last-page lengths, qo indptr, each new token's slot) is a fixed-shape
function of those two tensors. ``DecodeLayout.compute`` is that function, written with
fixed-shape ops only (no boolean masks, no host reads), so it can be captured: per step the host
copies the lengths and the table into the layout's buffers and replays one graph, instead of the
~20 torch ops and ~40 numpy ops the general path (``host_metadata.from_host``) needs for a batch
whose shape it has not seen. vLLM 0.33 does part of this work each step with a Triton kernel
(page indices: ``_copy_page_indices_kernel``, called from ``_compute_flashinfer_kv_metadata`` in
``vllm/v1/attention/backends/flashinfer.py``) and the indptr and last-page lengths with numpy.

Page indices without a mask: entry ``(r, j)`` of the block table lands at ``kv_indptr[r] + j``
when ``j < pages[r]`` and at one spare slot past the end otherwise, a ``scatter_`` of every entry;
kernels read only up to ``kv_indptr[B]``.

``DecodeGraph`` (``graphs.py``) captures the same ``compute`` inside its whole-step graph.
On a CPU device nothing is captured and ``run`` calls ``compute``: the CPU tests hold the same
code to a naive walk of the block table.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

import numpy as np

from .step import PhaseBatch, StepMetadata
from attnplan.errors import AdapterCallError


class DecodeLayout:
    """Metadata buffers for decode-only steps of ``batch_size`` requests x ``q_len`` tokens over
    a block table ``width`` pages wide. Valid until the next step of the same shape is planned:
    kernels enqueued before then read their own step's values (one stream, stream order)."""

    def __init__(self, batch_size: int, q_len: int, page_size: int, width: int, device: Any, *,
                 bound: Optional[tuple[Any, Any]] = None, indices: bool = True):
        """``bound``: the caller's own (seq_lens, block_table), read in place every step (an
        engine's persistent buffers); else the layout owns both and ``load`` copies into them.
        ``indices``: whether the plan's decode kernel reads paged KV indices (XQA and TRTLLM-gen
        read the block table itself)."""
        import torch

        b, q, w = batch_size, q_len, width
        self.batch_size, self.q_len, self.page_size, self.width = b, q, page_size, w
        self.device = torch.device(device)
        i32 = dict(dtype=torch.int32, device=self.device)
        self.bound = bound is not None
        if bound is not None:
            self.seq_lens, self.table = bound
        else:
            # Rewritten each step (``load``). Lengths start at q so that a capture before the
            # first load reads in-range block-table columns.
            self.seq_lens = torch.full((b,), q, **i32)
            self.table = torch.zeros(b, w, **i32)
        # Outputs.
        self.kv_indptr = torch.zeros(b + 1, **i32)
        self.indices = indices
        self.kv_indices = torch.zeros(b * w + 1 if indices else 1, **i32)   # the last one takes unused entries
        self.last_page_len = torch.ones(b, **i32)
        self.qo_indptr = torch.arange(b + 1, **i32) * q           # fixed for the shape
        self.slots = torch.zeros(b * q, dtype=torch.int64, device=self.device)
        # Each new token's page and offset, so that an append per layer launches no arithmetic.
        self.slot_pages = torch.zeros(b * q, dtype=torch.int64, device=self.device)
        self.slot_offsets = torch.zeros(b * q, dtype=torch.int64, device=self.device)
        # Constants the graph reads.
        i64 = dict(dtype=torch.int64, device=self.device)
        self._token = torch.arange(q, **i64).view(1, q) - q        # token i of a request: seq - q + i
        self._col = torch.arange(w, **i64).view(1, w)
        self._graph: Any = None
        self._kernel = _fused_kernel(self.device)
        self._upto_n, self._upto = -1, None
        # Host side, fixed for the shape: qo indptr and the query lengths.
        self.qo_indptr_cpu = torch.arange(b + 1, dtype=torch.int32) * q
        self.query_lens = (q,) * b
        # The eager path's planning state for this layout (eager_plans.py): its steps so far and,
        # per decode call, the wrapper planned over these buffers (or False: the backend's own).
        self.eager_steps = 0
        self.planners: dict[int, Any] = {}

    @property
    def num_tokens(self) -> int:
        return self.batch_size * self.q_len

    def compute(self) -> None:
        """Every output from ``seq_lens`` and ``table``, capturable: one Triton launch on CUDA
        (``decode_kernel.py``), else the torch ops of ``compute_torch``."""
        if self._kernel is not None:
            self._kernel(self)
        else:
            self.compute_torch()

    def compute_torch(self) -> None:
        """Fixed-shape torch ops: seven small kernels for the slots, four for the KV page indptr
        and last-page lengths, four for the page indices (only when the plan's kernel reads them).
        The CPU path, and the reference the GPU test holds the Triton kernel to."""
        import torch

        page, w, b = self.page_size, self.width, self.batch_size
        seq = self.seq_lens
        shape = (b, self.q_len)
        # Slots. One clamp keeps every position inside the table: a length shorter than q or
        # longer than the table (refused on the host when it has the lengths) must not read out
        # of bounds, which would kill the CUDA context.
        pos = seq.view(-1, 1) + self._token                      # int64 [B, q]
        pos.clamp_(0, w * page - 1)
        col = torch.div(pos, page, rounding_mode="floor")
        pages_of, offsets = self.slot_pages.view(shape), self.slot_offsets.view(shape)
        pages_of.copy_(torch.gather(self.table, 1, col))
        torch.sub(pos, col, alpha=page, out=offsets)
        torch.add(offsets, pages_of, alpha=page, out=self.slots.view(shape))
        pages = torch.div(seq + (page - 1), page, rounding_mode="floor")
        torch.cumsum(pages, 0, dtype=torch.int32, out=self.kv_indptr[1:])
        torch.sub(seq + page, pages, alpha=page, out=self.last_page_len)   # seq - (pages - 1) * page
        if self.indices:
            dst = torch.where(self._col < pages.view(-1, 1), self.kv_indptr[:-1].view(-1, 1) + self._col, b * w)
            self.kv_indices.scatter_(0, dst.view(-1), self.table.reshape(-1))

    def fused_append(self, cache: Any, k: Any, v: Any = None) -> Any:
        """The one-launch metadata + append arguments (``kv_cache.FusedAppend``) for writing ``k``/``v``
        (MLA: the latent rows, ``v`` None) into ``cache`` at this layout's slots, or None where that
        launch does not apply: no Triton kernel (CPU, ``ATTNPLAN_DECODE_METADATA=torch``), a cache
        that quantizes (``kv_cache.fused_target``), or ``ATTNPLAN_FUSED_APPEND=0`` (benchmarks
        compare the two). The rows' addresses are baked in: for buffers that stay put (a graph's)."""
        import os

        if self._kernel is None or os.environ.get("ATTNPLAN_FUSED_APPEND") == "0":
            return None
        from . import kv_cache as kvc

        return kvc.fused_target(cache, k, v)

    def compute_append(self, cache: Any, k: Any, v: Any = None, fused: Any = None) -> None:
        """``compute`` then ``kv_cache.append(cache, slots, k, v)``: one launch with ``fused`` (from
        ``fused_append`` over the same cache and rows), else the metadata then the scatters - the
        torch path, and the reference the GPU test holds the fused launch to byte for byte."""
        if fused is not None:
            self._kernel(self, fused)
            return
        from . import kv_cache as kvc

        self.compute()
        kvc.append(cache, self.slots, k, v, pages_offsets=(self.slot_pages, self.slot_offsets))

    def phase_batch(self, seq_lens: Any, block_table: Any, max_kv_len: int, kv_indices: Any = None,
                    host: Optional["HostDecodeArrays"] = None) -> Any:
        """The decode ``PhaseBatch`` over this layout's outputs (the eager step and the whole-step
        graph both hand the kernels this): the KV lengths and table the kernel reads, the host
        arrays a host ``plan`` reads."""
        b, t = self.batch_size, self.num_tokens
        return PhaseBatch(
            phase="decode", req=slice(0, b), tok=slice(0, t), num_reqs=b, num_tokens=t, max_q_len=self.q_len,
            max_kv_len=max_kv_len, qo_indptr=self.qo_indptr, seq_lens=seq_lens, block_table=block_table,
            kv_page_indptr=self.kv_indptr, last_page_len=self.last_page_len, kv_indices=kv_indices,
            qo_indptr_cpu=self.qo_indptr_cpu, seq_lens_cpu=None if host is None else host.seq_lens,
            kv_page_indptr_cpu=None if host is None else host.kv_indptr,
            last_page_len_cpu=None if host is None else host.last_page_len, query_lens=self.query_lens)

    def indices_upto(self, num_pages: int) -> Any:
        """``kv_indices[:num_pages]``, the view kept while the count repeats (it changes once a page)."""
        if num_pages != self._upto_n:
            self._upto_n, self._upto = num_pages, self.kv_indices[:num_pages]
        return self._upto

    def launcher(self, seq_lens: Any, block_table: Any) -> Any:
        """The step's deferred device work: ``load`` then ``run``."""
        def launch() -> None:
            self.load(seq_lens, block_table)
            self.run()
        return launch

    def load(self, seq_lens: Any, block_table: Any) -> None:
        """This step's lengths and block table into the layout's buffers (asynchronous copies;
        nothing for a layout bound to the caller's tensors)."""
        if not self.bound:
            _copy2(self.seq_lens, seq_lens, self.table, block_table)

    def capture(self, pool: Any = None) -> None:
        """Record ``compute`` as a CUDA graph (CUDA devices only; the first capture of a shape
        synchronizes once, as every CUDA-graph capture does)."""
        import torch

        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self.compute()                     # lazy initialisation outside the capture
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self.compute()
        self._graph = graph

    def run(self) -> None:
        if self._graph is not None:
            self._graph.replay()
        else:
            self.compute()


def _copy2(dst_a: Any, src_a: Any, dst_b: Any, src_b: Any) -> None:
    """Two asynchronous copies in one dispatch: ``_foreach_copy_`` launches one multi-tensor
    kernel where the pairs allow it (same dtype and device, contiguous), and falls back to
    per-tensor copies otherwise. On the H100's host it cost 6.9 us against 12.6 us for two
    ``copy_`` calls (bench/decode_steps.py breakdown, issue 41)."""
    global _FOREACH_COPY
    if _FOREACH_COPY is None:
        import torch

        _FOREACH_COPY = torch._foreach_copy_
    _FOREACH_COPY([dst_a, dst_b], [src_a, src_b], non_blocking=True)


_FOREACH_COPY: Any = None


def _fused_kernel(device: Any) -> Any:
    """``decode_kernel.decode_metadata`` on a CUDA device with triton importable, unless
    ``ATTNPLAN_DECODE_METADATA=torch`` asks for the torch ops (benchmarks compare the two)."""
    import os

    if device.type != "cuda" or os.environ.get("ATTNPLAN_DECODE_METADATA") == "torch":
        return None
    try:
        from .decode_kernel import decode_metadata
    except ImportError:
        return None
    return decode_metadata


class HostDecodeArrays:
    """What a host-planned kernel's ``plan`` reads for a decode-only step of one shape, from host
    KV lengths, written in place into buffers allocated once per shape (issue 41): six numpy
    ufuncs with positional ``out`` on B ints (~1 us each on the H100's host), no allocation, no
    torch dispatch per step. Plain host memory, not pinned: FlashInfer's ``plan`` copies
    pageable arrays of its own (``qo_indptr_host``) anyway, and a pageable source is staged before
    ``copy_`` returns, so the next step may rewrite these buffers at once (a pinned ring cost
    more, 49 us against 24 us, bench/RESULTS.md). Valid until the next ``fill`` - the same
    contract as the layout's device buffers."""

    __slots__ = ("batch_size", "q_len", "page", "width", "seq_lens", "kv_indptr", "last_page_len", "num_pages",
                 "max_kv_len", "_seq", "_ptr", "_ptr1", "_last", "_pages", "_tmp", "_tmp_u", "_span")

    def __init__(self, batch_size: int, q_len: int, page: int, width: int):
        import torch

        b = batch_size
        self.batch_size, self.q_len, self.page, self.width = b, q_len, page, width
        buf = torch.zeros(3 * b + 1, dtype=torch.int32)
        h = buf.numpy()
        # One host buffer: seq lens [B] | KV page indptr [B + 1] | last-page lengths [B].
        self.seq_lens, self.kv_indptr, self.last_page_len = buf[:b], buf[b:2 * b + 1], buf[2 * b + 1:]
        self._seq, self._ptr, self._last = h[:b], h[b:2 * b + 1], h[2 * b + 1:]
        self._ptr1 = self._ptr[1:]
        self._pages = np.empty(b, dtype=np.int32)
        self._tmp = np.empty(b, dtype=np.int32)
        self._tmp_u = self._tmp.view(np.uint32)
        self._span = width * page - q_len          # seq - q_len must lie in [0, span]
        self.num_pages = 0
        self.max_kv_len = 0

    def page_counts_key(self) -> bytes:
        """This fill's KV page indptr as bytes (~0.1 us): equal keys, equal page counts per request."""
        return self._ptr.tobytes()

    def _lengths(self, seq_lens_cpu: Any) -> Any:
        s = seq_lens_cpu.numpy() if hasattr(seq_lens_cpu, "numpy") else np.asarray(seq_lens_cpu)
        if s.shape != self._seq.shape:
            raise AdapterCallError(f"decode: {s.shape[0] if s.ndim == 1 else s.shape} host KV lengths for a batch "
                                   f"of {self.batch_size} requests")
        return s

    def bound(self, seq_lens_cpu: Any) -> int:
        """The longest KV length, after refusing lengths the shape cannot hold: shorter than the
        query (nothing appended) or longer than the table's pages. One subtraction and one
        reduction: a length below q_len wraps to a huge unsigned value."""
        return self._bound(self._lengths(seq_lens_cpu))

    def _bound(self, s: Any) -> int:
        np.subtract(s, self.q_len, self._tmp, casting="unsafe")
        d = int(np.maximum.reduce(self._tmp_u))
        if d > self._span:
            lo, hi = int(s.min()), int(s.max())
            if lo < self.q_len:
                raise AdapterCallError("decode: a request's KV length is shorter than its query length "
                                       "(append this step's tokens before attending)")
            raise AdapterCallError(f"decode: a request holds {hi} KV tokens, more than its block table's "
                                   f"{self.width} pages of {self.page} hold")
        return d + self.q_len

    def fill(self, seq_lens_cpu: Any) -> "HostDecodeArrays":
        """This step's lengths in; refuses lengths the layout cannot hold before anything reads them."""
        s = self._lengths(seq_lens_cpu)
        hi = self._bound(s)
        page, seq, pages, last, tmp = self.page, self._seq, self._pages, self._last, self._tmp
        seq[...] = s
        # seq + page - 1 = pages * page + (last - 1): one divmod gives both.
        np.add(seq, page - 1, tmp)
        np.divmod(tmp, page, pages, last)
        np.add(last, 1, last)
        pages.cumsum(out=self._ptr1)
        self.num_pages = int(self._ptr[-1])
        self.max_kv_len = hi
        return self


_INT32: Any = None


def _caller_key(seq_lens: Any, table: Any) -> Optional[tuple]:
    """Identity of the caller's (seq_lens, block_table): address, shape and strides (int32 only),
    and the device's index (``get_device``: an int, no device object built per step)."""
    global _INT32
    if _INT32 is None:
        import torch

        _INT32 = torch.int32
    if seq_lens.dtype is not _INT32 or table.dtype is not _INT32:
        return None
    return (seq_lens.data_ptr(), seq_lens.shape, seq_lens.stride(), table.data_ptr(), table.shape, table.stride(),
            table.get_device())


class _Shape:
    """One (batch size, q_len, table width): its layouts and its host arrays, made once."""

    __slots__ = ("key", "own", "bound", "bound_key", "last_key", "streak", "host")

    def __init__(self, key: tuple[int, int, int], own: DecodeLayout):
        self.key, self.own, self.bound, self.bound_key, self.last_key, self.streak = key, own, None, None, None, 0
        self.host: Optional[HostDecodeArrays] = None

    def host_arrays(self, page: int) -> HostDecodeArrays:
        if self.host is None:
            b, q, w = self.key
            self.host = HostDecodeArrays(b, q, page, w)
        return self.host


class DecodeLayouts:
    """The executor's layouts, one per (batch size, q_len, table width), least recently used
    dropped past ``MAX``. A shape whose caller passes the same seq_lens and block table tensors
    (address, shape, strides) ``BIND_AFTER`` steps running - an engine's persistent buffers, as
    vLLM keeps them - gets a second layout captured over those tensors, which then needs no copies
    at all while they stay the same. Graphs share one memory pool: they replay one after another on
    one stream and keep nothing in it between replays (outputs live in the layouts' buffers)."""

    MAX = 64
    BIND_AFTER = 3

    def __init__(self, page_size: int, device: Any, *, indices: bool = True):
        import torch

        self.page_size = page_size
        self.indices = indices
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._pool: Any = None
        self._shapes: OrderedDict[tuple[int, int, int], _Shape] = OrderedDict()

    def __len__(self) -> int:
        return len(self._shapes)

    def _new(self, b: int, q: int, w: int, bound: Optional[tuple[Any, Any]] = None) -> DecodeLayout:
        layout = DecodeLayout(b, q, self.page_size, w, self.device, bound=bound, indices=self.indices)
        if self.cuda:
            import torch

            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            layout.capture(self._pool)
        return layout

    def shape(self, batch_size: int, q_len: int, width: int) -> _Shape:
        """The cached entry of this shape (made, and its metadata graph captured, on first use)."""
        key = (batch_size, q_len, width)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape(key, self._new(batch_size, q_len, width))
            if len(self._shapes) > self.MAX:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(key)
        return shape

    def pick(self, shape: _Shape, seq_lens: Any = None, table: Any = None) -> DecodeLayout:
        """The shape's layout for the caller's tensors: the one bound to them when there is one
        (then ``load`` copies nothing), else the one that copies them in."""
        if seq_lens is None or table is None:
            return shape.own
        ck = _caller_key(seq_lens, table)
        if ck is not None and ck == shape.bound_key:
            return shape.bound
        shape.streak = shape.streak + 1 if ck is not None and ck == shape.last_key else 1
        shape.last_key = ck
        if ck is not None and shape.streak >= self.BIND_AFTER:
            b, q, w = shape.key
            shape.bound = self._new(b, q, w, bound=(seq_lens, table))
            shape.bound_key = ck
            return shape.bound
        return shape.own

    def get(self, batch_size: int, q_len: int, width: int, seq_lens: Any = None, table: Any = None) -> DecodeLayout:
        """The layout for this shape; with the caller's tensors, the one bound to them when there
        is one (then ``load`` copies nothing)."""
        return self.pick(self.shape(batch_size, q_len, width), seq_lens, table)


def decode_step(plan: Any, inp: Any, needs: Any, layouts: DecodeLayouts, *, defer_launch: bool = False) -> Any:
    """``StepMetadata`` of a decode-only step through its shape's cached entry: the host lengths
    (when given) into the shape's host arrays, the caller's lengths and table into its layout
    (copy, replay), views of both - nothing per request, nothing allocated but the step's two
    small records (issue 41). ``defer_launch``: leave the copy and the replay to
    ``step.extra["launch"]()``, so that a host ``plan`` can run first - FlashInfer's plan copies
    pageable host arrays, and such a copy waits for the work already in the stream (measured on
    the H100: ~60 us per step when the metadata graph was enqueued just before it)."""
    table = inp.block_table
    b, q = len(inp.query_lens), plan.decode.q_len_per_req
    width = table.shape[1]
    shape = layouts.shape(b, q, width)
    host, max_kv_len = None, inp.max_seq_len or width * layouts.page_size
    if inp.seq_lens_cpu is not None:
        arrays = shape.host_arrays(layouts.page_size)
        if needs.needs_host_seq_lens:       # a host plan reads them (FlashInfer's wrappers)
            host = arrays.fill(inp.seq_lens_cpu)
            max_kv_len = host.max_kv_len
        else:                               # device-tensor calls: the checked bound alone
            max_kv_len = arrays.bound(inp.seq_lens_cpu)
    layout = layouts.pick(shape, inp.seq_lens, table)
    indices = needs.needs_paged_kv_indices
    if indices and not layout.indices:
        raise AdapterCallError("the plan's decode kernel reads paged KV indices: build its DecodeLayouts with indices=True")
    if not defer_launch:
        layout.load(inp.seq_lens, table)
        layout.run()
    kv_indices = None
    if indices:
        kv_indices = layout.indices_upto(host.num_pages) if host is not None else layout.kv_indices[:-1]
    batch = layout.phase_batch(inp.seq_lens, table, max_kv_len, kv_indices, host)
    step = StepMetadata(kind="decode_only", needs=needs, num_tokens=layout.num_tokens, slots=layout.slots, decode=batch,
                        slot_pages=layout.slot_pages, slot_offsets=layout.slot_offsets)
    step.extra["layout"] = layout
    if host is not None:
        step.extra["host_arrays"] = host
    if defer_launch:
        step.extra["launch"] = layout.launcher(inp.seq_lens, table)
    return step
