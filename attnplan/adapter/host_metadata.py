"""Step metadata from host KV lengths (every native plan has them), at a host cost per step that
does not grow with torch's per-op overhead (issue 17).

The host works out everything per request and per new token - in one C pass (host_step.c, built
and loaded by host_native.py), or with numpy where no C compiler is found (the same bytes; a numpy op
on a few hundred ints costs ~1 us, a torch op 5-30 us of dispatch on the H100 machines' hosts) - writes
it into a pinned staging buffer that is reused across steps, and sends it in one copy; the device only
gathers the block-table entries of the new tokens and of the KV pages (one gather); the slots are
made only where read (step._Slots): two launches a step (issue 41; bench/general_step_host.py). On the
H100 the previous torch version took 0.45-1.6 ms per step (bench/RESULTS.md).

Staging reuse without a device->host sync: a ring of pinned buffers, each handed out again only
once a CUDA event recorded after the step's last reader (the copy, and FlashInfer's ``plan``,
which copies from the same host arrays) has completed - ``Event.query()``, which never waits; a
busy ring grows by one buffer instead. A step's host arrays (``*_cpu``) therefore stay valid until
its buffer is handed out again, at the earliest after ``release`` and the ring's other buffers.
"""

from __future__ import annotations

import struct
import threading
from array import array
from typing import Any, Optional

import numpy as np

from . import host_native, host_torch
from .plan_replay import cuda_index, current_stream, event_methods
from .step import PhaseBatch, StepMetadata
from attnplan.errors import AdapterCallError

# Up to this many KV pages in a step, the host also works out which block-table entry each page
# index comes from (one numpy repeat and one add: ~12 us for 64k pages on this repo's CPU, against
# the ~6 launches, ~30 us of host on the H100 machine, of the device's expansion; 256 KB more in the
# one pinned copy) and sends it with the rest, so the device does one gather; beyond it (256
# requests x 32k tokens is 524k pages) the device expands (bench/general_step_host.py).
HOST_KV_ENTRIES = 1 << 16


class HostStaging:
    """A ring of pinned int32 host buffers reused across steps (CUDA); fresh tensors elsewhere.
    The ring holds at most ``MAX_RING`` buffers: a caller that never releases (``build_step``
    called without ``plan_step``) gets fresh pinned buffers, not a ring that grows without end."""

    MAX_RING = 8
    SMALLEST = 1 << 14                       # int32s: a step of up to ~8k new tokens and pages in the first buffer

    def __init__(self, device: Any):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._index = cuda_index(self.device) if self.cuda else None
        self._ring: list[list[Any]] = []      # [host buffer, event or None, busy]
        self._next = 0
        self._query, self._record = event_methods() if self.cuda else (None, None)
        self.hint = 0                         # the last step's int32 count: the next step's is likely close
        host_native.library()                 # built (once per source) with the executor, not at its first step
        # host_torch.cpp where the device is CUDA (there each torch call from Python costs 5-23 us of host): its
        # step runs host_step.c and the device half in one call; built with the executor too; None, the Python
        # path, elsewhere or where it did not build
        self.views = host_torch.library() if self.cuda else None

    def take(self, n: int) -> tuple[Any, int]:
        """(host int32 tensor of at least ``n``, its ring slot, -1 if not from the ring). host_step.c's
        path asks for the last step's count (``hint``) and says whether the step fits what it got."""
        import torch

        if not self.cuda:
            return torch.empty(max(n, self.SMALLEST), dtype=torch.int32), -1
        for k in range(len(self._ring)):
            i = (self._next + k) % len(self._ring)
            buf, ev, busy = self._ring[i]
            if not busy and buf.numel() >= n and (ev is None or self._query(ev)):
                self._ring[i][2] = True
                self._next = (i + 1) % len(self._ring)
                return buf, i
        buf = torch.empty(max(n * 2, self.SMALLEST), dtype=torch.int32).pin_memory()
        if len(self._ring) >= self.MAX_RING:
            return buf, -1                    # not kept: freed by the caching host allocator
        self._ring.append([buf, None, True])
        return buf, len(self._ring) - 1

    def give_back(self, slot: int) -> None:
        """A buffer ``take`` handed out that no reader was enqueued on (a refused step, a larger one taken)."""
        if slot >= 0:
            self._ring[slot][2] = False

    def release(self, slot: int) -> None:
        """The step's last reader of slot ``slot`` is enqueued: the slot is free once it has run."""
        import torch

        if slot < 0:
            return
        ev = self._ring[slot][1] or torch.cuda.Event()
        # The device's current stream by its index, worked out once, its Stream object kept: torch's
        # current_stream(device) resolves a torch.device in Python and builds a Stream each call (~60 us
        # under cProfile on the H100 machine's host, bench/logs/h100-2026-11-26r/call3/prof_meta.log).
        self._record(ev, current_stream(self._index))
        self._ring[slot][1] = ev
        self._ring[slot][2] = False


_IOTA: dict[Any, Any] = {}
IN = 32                  # host_step.c ap_step: where its inputs start in info (the outputs fill [0, 32))


def _iota(n: int, dtype: Any) -> Any:
    """0, 1, ..., n - 1 (read-only view of a cached arange that only grows): no arange per step."""
    a = _IOTA.get(dtype)
    if a is None or a.size < n:
        a = _IOTA[dtype] = np.arange(max(n, 2 * (0 if a is None else a.size), 1 << 12), dtype=dtype)
        a.flags.writeable = False
    return a[:n]


def _split_page(x: Any, page: int, entry: Any, offset: Any) -> None:
    """entry = x // page, offset = x % page, written into the (int32) staging views."""
    if page & (page - 1) == 0:
        np.right_shift(x, page.bit_length() - 1, out=entry)
        np.bitwise_and(x, page - 1, out=offset)
    else:
        np.divmod(x, page, out=(entry, offset))


def _host_table(t: Any, table: Any) -> Any:
    """The engine's host block table as a flat int32 numpy view, checked against the device table's shape."""
    import torch

    a = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if tuple(a.shape) != tuple(table.shape):
        raise AdapterCallError(f"block_table_cpu has shape {tuple(a.shape)}, block_table {tuple(table.shape)}: the "
                               "host copy must be the device table's")
    return np.ascontiguousarray(a, dtype=np.int32).reshape(-1)


def check_query_lens(q: Any, nd: int, q_dec: int) -> None:
    """The step's query lengths (int64 numpy): decodes take ``q_dec`` each, every request at least one.
    host_step.c ap_step checks the same, in the same order, and this raises its refusals' messages."""
    if (q[:nd] != q_dec).any():         # the indices only on the error path (flatnonzero: ~3 us a step)
        bad = np.flatnonzero(q[:nd] != q_dec).tolist()
        raise AdapterCallError(f"decode requests take {q_dec} query tokens each (1 + speculative tokens, "
                               f"the plan's q_len_per_req); requests {bad} have {[int(q[i]) for i in bad]}")
    if (q < 1).any():
        raise AdapterCallError("every request has at least one query token")


def _refuse(code: int, at: int, q: Any, nd: int, q_dec: int, page: int, width: int) -> None:
    """ap_step's refusal ``code`` (its first offending request or length ``at``) as the numpy path words it."""
    if code in (-1, -2):
        check_query_lens(q, nd, q_dec)
        raise AdapterCallError(f"request {at}'s query length {int(q[at])} is refused")     # C and numpy disagree
    if code == -3:
        raise AdapterCallError(f"{'decode' if at < nd else 'prefill'}: a request's KV length is shorter than its "
                               "query length (append this step's tokens before attending)")
    # every page index and slot comes from the table's row: a longer request would read past it
    raise AdapterCallError(f"a request's KV length {at} needs {(at + page - 1) // page} pages of {page} tokens; "
                           f"the block table holds {width} a request (pass a wider block_table)")


def _numpy_step(q: Any, s: Any, nd: int, q_dec: int, page: int, width: int, kv_needed: bool, bt: Any,
                staging: HostStaging, mla_ctx: bool = False) -> tuple[Any, int, int, list]:
    """host_step.c ap_step in numpy (no C compiler, or ``ATTNPLAN_NATIVE_HOST=0``): the same checks, the
    same ``info`` and the same bytes. (staging buffer, its ring slot, the layout's int32 count, info)."""
    import torch

    check_query_lens(q, nd, q_dec)
    seq = (s.numpy() if isinstance(s, torch.Tensor) else np.asarray(s)).astype(np.int64)
    if (seq < q).any():
        _refuse(-3, int(np.flatnonzero(seq < q)[0]), q, nd, q_dec, page, width)
    longest = int(seq.max(initial=0))
    if (longest + page - 1) // page > width:
        _refuse(-4, longest, q, nd, q_dec, page, width)
    b = len(q)
    qo = np.zeros(b + 1, dtype=np.int64)
    q.cumsum(out=qo[1:])
    pages = (seq + page - 1) // page
    kv_ptr = np.zeros(b + 1, dtype=np.int64)
    pages.cumsum(out=kv_ptr[1:])
    t_all, p_all, p_dec = int(qo[-1]), int(kv_ptr[-1]), int(kv_ptr[nd])
    on_host = kv_needed and p_all <= HOST_KV_ENTRIES
    on_device = kv_needed and not on_host
    if on_device:
        bt = None
    p_host = p_all if on_host else 0
    phases = [(r0, r1) for r0, r1 in ((0, nd), (nd, b)) if r1 > r0]
    n_k = [r1 - r0 for r0, r1 in phases]
    if bt is None:
        sizes = [t_all + p_host, t_all]
    else:
        sizes = [2 * t_all, t_all, t_all, *(([p_dec, p_all - p_dec] if on_host else [0, 0]) if len(n_k) == 2 else [p_host])]
    sizes += [*[n + 1 for n in n_k], *[n + 1 for n in n_k], *n_k, *n_k]
    if on_device:
        sizes += [b, b]
    ctx_parts = mla_ctx and bool((seq[nd:] > q[nd:]).any())
    if ctx_parts:          # host_step.c fill_context: query lens, context lens, their indptr, a byte per token
        sizes += [b - nd, b - nd, b - nd + 1, (t_all - int(qo[nd]) + 3) // 4]
    total = sum(sizes)
    host, slot = staging.take(total)
    h = host.numpy()
    row = _iota(b, np.int64) * width                   # block-table entry of each request's page 0
    # New token i of request r sits at KV position pos = seq[r] - q[r] + (i - qo[r]), in block-table
    # entry r * width + pos // page at offset pos % page. With x = r * width * page + pos (a multiple
    # of page added), x // page and x % page are both at once.
    small = b * width * page + longest < 2**31
    dt = np.int32 if small else np.int64
    x = (row * page + seq - q - qo[:-1]).astype(dt).repeat(q)
    np.add(x, _iota(t_all, dt), out=x)
    o = (2 if bt is None else 4) * t_all + p_host
    if bt is None:
        _split_page(x, page, h[:t_all], h[t_all + p_host:o])
        if p_host:                           # page j of request r: entry r * width + j
            np.add((row - kv_ptr[:-1]).astype(np.int32).repeat(pages), _iota(p_all, np.int32),
                   out=h[t_all:t_all + p_all])
    else:
        entry, offset = np.empty_like(x), np.empty_like(x)
        _split_page(x, page, entry, offset)
        slots64 = h[:2 * t_all].view(np.int64)
        np.take(bt, entry, out=h[2 * t_all:3 * t_all])                  # each new token's page, its offset
        h[3 * t_all:4 * t_all] = offset
        np.multiply(h[2 * t_all:3 * t_all], page, out=slots64, dtype=np.int64)     # int32 pages, int64 slots
        slots64 += offset
        if p_host:
            np.take(bt, (row - kv_ptr[:-1]).repeat(pages) + _iota(p_all, np.int64), out=h[4 * t_all:o])
    for ptr in (qo, kv_ptr):             # per phase, restarted at 0
        for r0, r1 in phases:
            np.subtract(ptr[r0:r1 + 1], ptr[r0], out=h[o:o + r1 - r0 + 1])
            o += r1 - r0 + 1
    h[o:o + b] = seq
    last = h[o + b:o + 2 * b]
    np.subtract(seq, 1, out=last)
    np.remainder(last, page, out=last)
    last += 1
    if on_device:
        h[o + 2 * b:o + 3 * b] = row - kv_ptr[:-1]
        h[o + 3 * b:o + 4 * b] = pages
    maxes = []
    for r0, r1 in ((0, nd), (nd, b)):
        maxes += [int(q[r0:r1].max()), int(seq[r0:r1].max())] if r1 > r0 else [0, 0]
    info = [t_all, p_all, int(on_host), int(on_device), int(bt is not None), int(qo[nd]), p_dec, *maxes,
            len(sizes), *sizes]
    info += [0] * (IN - len(info))
    if ctx_parts:
        n, c = b - nd, seq[nd:] - q[nd:]
        o = total - sum(sizes[-4:])
        h[o:o + n] = q[nd:]
        o += n
        h[o:o + n] = c
        h[o + n] = 0
        np.cumsum(c, out=h[o + n + 1:o + 2 * n + 1])
        has = h[o + 2 * n + 1:total].view(np.uint8)
        has[:] = 0
        has[:t_all - int(qo[nd])] = np.repeat(c > 0, q[nd:])
        info[30], info[31] = int(c.sum()), int(c.max())
    return host, slot, total, info


_TLS = threading.local()
# info's inputs written and its outputs read through the struct module: ~0.5 us each where numpy's slice
# assignment from a tuple and its tolist take ~1.2 and ~0.6 (this repo's CPU)
_INPUTS, _OUTPUTS = struct.Struct("10q"), struct.Struct(f"{IN}q")


def _native_step(lib: Any, ql: Any, s: Any, nd: int, q_dec: int, page: int, width: int, kv_needed: bool, bt: Any,
                 staging: HostStaging, mla_ctx: bool = False, table: Any = None) -> tuple[Any, int, int, tuple, Any]:
    """host_step.c ap_step over the step's own host arrays (pointers: no copies where the lengths are
    contiguous int32 / int64 already), into a free staging buffer - a larger one where the layout needs
    it. Every pointer from the cheapest accessor (numpy's ``.ctypes`` costs ~2.5 us a read). ``lib``: host_step.c
    through ctypes, or, given the device ``table``, host_torch.cpp, whose ``step`` makes the device half in the
    same call (its five results last; None from ctypes)."""
    import torch

    qa: Any = None
    if isinstance(ql, (list, tuple)):
        try:
            qa = array("q", ql)
            q_ptr = qa.buffer_info()[0]
        except (TypeError, OverflowError):       # numpy's conversion below, as the numpy path makes it
            qa = None
    if qa is None:
        qa = np.ascontiguousarray(ql.numpy() if isinstance(ql, torch.Tensor) else ql, dtype=np.int64)
        q_ptr = qa.__array_interface__["data"][0]
    if isinstance(s, torch.Tensor) and s.dtype in (torch.int32, torch.int64) and s.is_contiguous() \
            and s.device.type == "cpu":
        keep, seq_ptr, seq64 = s, s.data_ptr(), int(s.dtype == torch.int64)
    else:
        keep = np.ascontiguousarray(s.numpy() if isinstance(s, torch.Tensor) else s, dtype=np.int64)
        seq_ptr, seq64 = keep.__array_interface__["data"][0], 1
    tls = _TLS
    info = getattr(tls, "info", None)
    if info is None:
        info = tls.info = np.zeros(IN + 10, dtype=np.int64)
        tls.ptr = info.ctypes.data
    host, slot = staging.take(staging.hint)
    _INPUTS.pack_into(info, IN * 8, len(qa), nd, q_dec, page, width, kv_needed, HOST_KV_ENTRIES, seq64, host.numel(),
                      mla_ctx)
    bt_ptr = None if bt is None else bt.__array_interface__["data"][0]

    def call(host: Any) -> tuple[int, Any]:
        # the step into ``host`` (its capacity in info: pack_into's above, the retry's below; the module's step
        # sets it itself)
        if table is None:
            return lib.ap_step(q_ptr, seq_ptr, bt_ptr, host.data_ptr(), tls.ptr), None
        total, *views = lib.step(q_ptr, seq_ptr, bt_ptr or 0, host, tls.ptr, table)
        return total, views
    total, views = call(host)
    if total < 0 or total > host.numel():
        staging.give_back(slot)
        if total < 0:
            _refuse(total, int(info[0]), np.asarray(qa, dtype=np.int64), nd, q_dec, page, width)
        host, slot = staging.take(total)
        info[IN + 8] = host.numel()
        total, views = call(host)
    staging.hint = total
    return host, slot, total, _OUTPUTS.unpack_from(info), views


def _context_parts(extra: dict, hv: Any, dv: Any, t_prefill: int, total: int, longest: int, seq_cpu: Any) -> None:
    """MLA's chunked prefill reads, per prefill request, its query length (the ragged new part's KV lengths) and
    its cached context (executor._plan_mla_prefill plans the ragged context part over it, ``gather_context``
    gathers it): host and device views of the copy's four context parts (host_step.c fill_context), the
    per-token mask a bool view of its bytes - no launch of its own. A step whose prefill requests have no
    context (``total`` 0) brings none of them - only the ragged context part and the merge read them, which it
    never runs: eight views and three torch calls a step less (issue 41) -, and its new part's KV lengths are
    the prefill's seq lens (``seq_cpu``: each equals the query length)."""
    import torch

    if total == 0:
        extra.update(new_lens=seq_cpu, context_lens=None, context_lens_dev=None, context_indptr_cpu=None,
                     context_indptr=None, has_context=None, any_context=False, context_tokens=0, longest_context=0)
        return
    extra.update(new_lens=hv[0], context_lens=hv[1], context_lens_dev=dv[1], context_indptr_cpu=hv[2],
                 context_indptr=dv[2], has_context=dv[3].view(torch.uint8)[:t_prefill].view(torch.bool),
                 any_context=True, context_tokens=total, longest_context=longest)


def from_host(plan: Any, inp: Any, needs: Any, kind: str, staging: Optional[HostStaging] = None,
              q_dec: Optional[int] = None) -> Any:
    """``StepMetadata`` for a batch whose KV lengths the host knows (``inp.seq_lens_cpu``). ``q_dec``: a
    decode request's query length (default: the plan's). Checks the query lengths (``check_query_lens``).

    Host cost (issue 41): the step's checks and every per-token and per-page array come from one call
    of host_step.c (host_native.py), written straight into the pinned staging buffer - by numpy ``out=``
    where it did not compile (the same bytes); the host and device views of each part come from one
    ``split_with_sizes`` each; the device runs the one copy and one gather (the new tokens' and the KV
    pages' block-table entries at once) - 2 launches where the KV pages number at most
    ``HOST_KV_ENTRIES`` (before: 6, and 11 past 4096 pages); the int64 slots are made from the pages and
    offsets at their first read (step._Slots), which the appends never make. With the
    engine's host block table (``inp.block_table_cpu``) the host also gathers the slots and page
    indices, and the copy is the step's one device operation. On CUDA host_step.c's call, the copy, the
    views, the gather and the table per phase are one call into host_torch.cpp (``HostStaging.views``, its
    ``step``: host_step.c is compiled into it); its ``step_views`` makes the device half alone where the host
    half is numpy's, the Python twin ``_step_views`` where the module is not built (the CPU). An MLA plan's
    prefill requests bring their cached context in the same copy (``_context_parts``)."""
    import torch

    page, nd, table = plan.kv_cache.page_size, inp.num_decodes, inp.block_table
    ql, s = inp.query_lens, inp.seq_lens_cpu
    b, width = len(ql), table.shape[1]
    n_seq = s.numel() if isinstance(s, torch.Tensor) else len(s)
    if n_seq != b:
        raise AdapterCallError(f"seq_lens_cpu has {n_seq} entries for {b} requests")
    if q_dec is None:
        q_dec = plan.decode.q_len_per_req
    # The engine's host copy of the block table: the host gathers too (no device op but the one copy).
    bt = None if inp.block_table_cpu is None else _host_table(inp.block_table_cpu, table)
    staging = staging or HostStaging("cpu")
    # Layout of the one copy (int32; host_step.c ap_step and _numpy_step write it): block-table entry
    # of each new token [T] and, page indices on the host, of each KV page [P] (adjacent: one gather
    # serves both) | each new token's offset in its page [T] | per phase present: qo indptr [n+1] | per
    # phase: kv page indptr [n+1] | seq lens [n] | last page lens [n] | page indices expanded on the
    # device: each request's first entry minus kv_ptr [B] and its pages [B]. With the host's block
    # table the token parts are the slots themselves (int64, as int32 pairs: the buffer's start is
    # 8-byte aligned) [2T], each new token's page [T] and offset [T], and each phase's page indices.
    # One split_with_sizes views every part apart, on the host and on the device.
    # MLA: the prefill requests' cached context too (host_step.c fill_context), for its ragged context part
    lib, want_kv, mla = host_native.library(), needs.needs_paged_kv_indices, bool(plan.kv_cache.mla)
    fused = staging.views if lib is not None else None
    if fused is not None:
        # host_torch.cpp's step: ap_step, then the copy, both sides' views, the gather (no host table) split into
        # the new tokens' entries and each phase's page indices, the table per phase - one call
        host, slot, total, info, (hv, dv, entries, kv, tables) = _native_step(
            fused, ql, s, nd, q_dec, page, width, want_kv, bt, staging, mla, table)
    elif lib is not None:
        host, slot, total, info, _ = _native_step(lib, ql, s, nd, q_dec, page, width, want_kv, bt, staging, mla)
    else:
        host, slot, total, info = _numpy_step(np.asarray(ql, dtype=np.int64), s, nd, q_dec, page, width, want_kv, bt,
                                              staging, mla)
    t_all, p_all, kv_on_host, kv_on_device, use_bt, t_dec, p_dec = info[:7]
    m = (nd > 0) + (b > nd)
    h0 = 3 + m if use_bt else 2                          # the token parts' count: the rest are per request
    kv_parts: Any = (None, None)
    device = table.device
    if fused is None:
        # the device half as host_torch.cpp's step makes it: its step_views where only ap_step is not its own
        # (ATTNPLAN_NATIVE_HOST=0), else the Python twin
        views = _step_views if staging.views is None else staging.views.step_views
        hv, dv, entries, kv, tables = views(host, info[12:12 + info[11]], table, not use_bt,
                                            [t_all, p_dec, p_all - p_dec] if m == 2 and kv_on_host else
                                            [t_all, p_all] if kv_on_host else [t_all], [nd, b - nd] if m == 2 else [])
    if use_bt:
        slots, pages_of, offsets = dv[0].view(torch.int64), dv[1], dv[2]
        if kv_on_host:
            kv_parts = dv[3:3 + m]
    else:
        if kv_on_host:
            kv_parts = kv
        elif kv_on_device:
            # Pages can number hundreds of thousands (256 requests x 32k tokens): the device expands them.
            entry = torch.arange(p_all, dtype=torch.int32, device=device) + torch.repeat_interleave(
                dv[h0 + 4 * m], dv[h0 + 4 * m + 1], output_size=p_all)
            kv = torch.take(table, entry.long()).to(torch.int32)
            kv_parts = kv.split_with_sizes([p_dec, p_all - p_dec]) if m == 2 else (kv,)
        # The slots (table entry * page + offset) only where something reads them (step._Slots): the
        # appends read each new token's page and offset (kv_cache.append), so a step launches no more.
        slots, pages_of, offsets = None, entries, dv[1]
    # each new token's page and offset: an append per layer then launches no arithmetic (kv_cache.append)
    step = StepMetadata(kind=kind, needs=needs, num_tokens=t_all, slots=slots, slot_pages=pages_of,
                        slot_offsets=offsets, page_size=page)
    step.extra["staging_slot"] = slot
    qlens = tuple(ql) if isinstance(ql, (list, tuple)) else tuple(int(x) for x in ql)
    # the per-phase device seq lens are the copy's own (the engine's, by the contract, hold the same)
    k = 0
    for phase, r0, r1, t0, t1, max_q, max_kv in (("decode", 0, nd, 0, t_dec, info[7], info[8]),
                                                 ("prefill", nd, b, t_dec, t_all, info[9], info[10])):
        if r1 == r0:
            continue
        setattr(step, phase, PhaseBatch(
            phase=phase, req=slice(r0, r1), tok=slice(t0, t1), num_reqs=r1 - r0,
            num_tokens=t1 - t0, max_q_len=max_q, max_kv_len=max_kv, qo_indptr=dv[h0 + k],
            seq_lens=dv[h0 + 2 * m + k], block_table=tables[k], kv_page_indptr=dv[h0 + m + k],
            last_page_len=dv[h0 + 3 * m + k], qo_indptr_cpu=hv[h0 + k], seq_lens_cpu=hv[h0 + 2 * m + k],
            kv_page_indptr_cpu=hv[h0 + m + k], last_page_len_cpu=hv[h0 + 3 * m + k], query_lens=qlens[r0:r1],
            kv_indices=kv_parts[k]))
        k += 1
    if mla and b > nd:
        _context_parts(step.extra, hv[-4:], dv[-4:], t_all - t_dec, info[30], info[31], step.prefill.seq_lens_cpu)
    return step


def _step_views(host: Any, sizes: Any, table: Any, gather: bool, entry_split: list, table_split: list) -> tuple:
    """host_torch.cpp ``step_views`` in Python, call for call (where it did not build, and on the CPU): (host
    views, device views, the gathered entries or None, the gather's KV parts, the table per phase)."""
    import torch

    h = host[:sum(sizes)]
    device = table.device
    # the one copy (pinned source on CUDA: asynchronous); on the CPU a copy all the same
    d = h.clone() if device.type == "cpu" else h.to(device, non_blocking=True)
    hv, dv = h.split_with_sizes(sizes), d.split_with_sizes(sizes)
    entries, kv = None, []
    if gather:
        # index_select on the table's flat view where it is contiguous (int32 indices, no conversion), take
        # (int64 indices, any strides) where it is not
        entries = table.view(-1).index_select(0, dv[0]) if table.is_contiguous() else torch.take(table, dv[0].long())
        if entries.dtype != torch.int32:
            entries = entries.to(torch.int32)
        if len(entry_split) > 1:
            entries, *kv = entries.split_with_sizes(entry_split)
    return hv, dv, entries, kv, (table.split_with_sizes(table_split) if table_split else (table,))
