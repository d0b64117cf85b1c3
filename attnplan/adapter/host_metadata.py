"""Step metadata from host KV lengths (every native plan has them), at a host cost per step that
does not grow with torch's per-op overhead (issue 17).

The host works out everything per request and per new token - in one C pass (host_step.c, built
and loaded by host_native.py), or with numpy where no C compiler is found (the same bytes; a numpy op
on a few hundred ints costs ~1 us, a torch op 5-30 us of dispatch on the H100 machines' hosts) - writes
it into a pinned staging buffer that is reused across steps, and sends it in one copy; the device only
gathers the block-table entries of the new tokens and of the KV pages (one gather) and turns the
first into slots (one add): three launches a step (issue 41; bench/general_step_host.py). On the
H100 the previous torch version took 0.45-1.6 ms per step (bench/RESULTS.md).

Staging reuse without a device->host sync: a ring of pinned buffers, each handed out again only
once a CUDA event recorded after the step's last reader (the copy, and FlashInfer's ``plan``,
which copies from the same host arrays) has completed - ``Event.query()``, which never waits; a
busy ring grows by one buffer instead. A step's host arrays (``*_cpu``) therefore stay valid until
its buffer is handed out again, at the earliest after ``release`` and the ring's other buffers.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np

from . import host_native
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

    def __init__(self, device: Any):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._index = (self.device.index if self.device.index is not None else torch.cuda.current_device()) \
            if self.cuda else None
        self._ring: list[list[Any]] = []      # [host buffer, event or None, busy]
        self._next = 0
        host_native.library()                 # built (once per source) with the executor, not at its first step

    def take(self, n: int) -> tuple[Any, int]:
        """(host int32 tensor of at least ``n``, its ring slot, -1 if not from the ring)."""
        import torch

        if not self.cuda:
            return torch.empty(n, dtype=torch.int32), -1
        for k in range(len(self._ring)):
            i = (self._next + k) % len(self._ring)
            buf, ev, busy = self._ring[i]
            if not busy and buf.numel() >= n and (ev is None or ev.query()):
                self._ring[i][2] = True
                self._next = (i + 1) % len(self._ring)
                return buf, i
        buf = torch.empty(max(n * 2, 1 << 14), dtype=torch.int32).pin_memory()
        if len(self._ring) >= self.MAX_RING:
            return buf, -1                    # not kept: freed by the caching host allocator
        self._ring.append([buf, None, True])
        return buf, len(self._ring) - 1

    def release(self, slot: int) -> None:
        """The step's last reader of slot ``slot`` is enqueued: the slot is free once it has run."""
        import torch

        if slot < 0:
            return
        ev = self._ring[slot][1] or torch.cuda.Event()
        # The device's current stream by its index, worked out once: torch.cuda.current_stream(device)
        # resolves a torch.device in Python each call (~60 us under cProfile on the H100 machine's host,
        # bench/logs/h100-2026-11-26r/call3/prof_meta.log).
        ev.record(torch.cuda.current_stream(self._index))
        self._ring[slot][1] = ev
        self._ring[slot][2] = False


_IOTA: dict[Any, Any] = {}


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


class _NumpyFill:
    """host_step.c's two calls in numpy (no C compiler, or ``ATTNPLAN_NATIVE_HOST=0``): the same bytes."""

    def __init__(self, q: Any, s: Any, page: int):
        import torch

        self.q, self.page = q, page
        self.seq = (s.numpy() if isinstance(s, torch.Tensor) else np.asarray(s)).astype(np.int64)

    def measure(self) -> tuple[int, int, int, int]:
        """(new tokens, KV pages, longest KV length, first request whose KV is shorter than its query or -1)."""
        q, seq, page = self.q, self.seq, self.page
        if (seq < q).any():                 # the index only on the error path (flatnonzero: ~3 us a step)
            return 0, 0, 0, int(np.flatnonzero(seq < q)[0])
        b = len(q)
        self.qo = qo = np.zeros(b + 1, dtype=np.int64)
        q.cumsum(out=qo[1:])
        self.pages = pages = (seq + page - 1) // page
        self.kv_ptr = kv_ptr = np.zeros(b + 1, dtype=np.int64)
        pages.cumsum(out=kv_ptr[1:])
        return int(qo[-1]), int(kv_ptr[-1]), int(seq.max(initial=0)), -1

    def fill(self, host: Any, nd: int, width: int, t_all: int, p_host: int, kv_on_device: bool, bt: Any,
             phases: list) -> tuple[int, int, list[int]]:
        """Writes the layout into ``host``; (decode tokens, decode pages, [max q, max kv] per phase)."""
        q, seq, page, qo, kv_ptr, pages = self.q, self.seq, self.page, self.qo, self.kv_ptr, self.pages
        h = host.numpy()
        b = len(q)
        p_all = int(kv_ptr[-1])
        row = _iota(b, np.int64) * width                   # block-table entry of each request's page 0
        # New token i of request r sits at KV position pos = seq[r] - q[r] + (i - qo[r]), in block-table
        # entry r * width + pos // page at offset pos % page. With x = r * width * page + pos (a multiple
        # of page added), x // page and x % page are both at once.
        small = b * width * page + int(seq.max(initial=0)) < 2**31
        dt = np.int32 if small else np.int64
        x = (row * page + seq - q - qo[:-1]).astype(dt).repeat(q)
        np.add(x, _iota(t_all, dt), out=x)
        o = 2 * t_all + p_host
        if bt is None:
            _split_page(x, page, h[:t_all], h[t_all + p_host:o])
            if p_host:                           # page j of request r: entry r * width + j
                np.add((row - kv_ptr[:-1]).astype(np.int32).repeat(pages), _iota(p_all, np.int32),
                       out=h[t_all:t_all + p_all])
        else:
            entry, offset = np.empty_like(x), np.empty_like(x)
            _split_page(x, page, entry, offset)
            slots64 = h[:2 * t_all].view(np.int64)
            np.multiply(bt[entry], page, out=slots64, dtype=np.int64)     # int32 entries, int64 slots
            slots64 += offset
            if p_host:
                np.take(bt, (row - kv_ptr[:-1]).repeat(pages) + _iota(p_all, np.int64), out=h[2 * t_all:o])
        for ptr in (qo, kv_ptr):             # per phase, restarted at 0
            for _, r0, r1 in phases:
                np.subtract(ptr[r0:r1 + 1], ptr[r0], out=h[o:o + r1 - r0 + 1])
                o += r1 - r0 + 1
        h[o:o + b] = seq
        last = h[o + b:o + 2 * b]
        np.subtract(seq, 1, out=last)
        np.remainder(last, page, out=last)
        last += 1
        if kv_on_device:
            h[o + 2 * b:o + 3 * b] = row - kv_ptr[:-1]
            h[o + 3 * b:o + 4 * b] = pages
        maxes = []
        for r0, r1 in ((0, nd), (nd, b)):
            maxes += [int(q[r0:r1].max()), int(seq[r0:r1].max())] if r1 > r0 else [0, 0]
        return int(qo[nd]), int(kv_ptr[nd]), maxes


class _NativeFill:
    """host_step.c's ``ap_measure`` / ``ap_fill`` over the step's own host arrays (pointers, no copies
    where they are contiguous int32 / int64 already)."""

    _tls = threading.local()

    def __init__(self, lib: Any, q: Any, s: Any, page: int):
        import torch

        q = np.ascontiguousarray(q, dtype=np.int64)           # read through its pointer: int64, contiguous
        self.lib, self.q, self.page = lib, q, page
        if isinstance(s, torch.Tensor) and s.dtype in (torch.int32, torch.int64) and s.is_contiguous() \
                and s.device.type == "cpu":
            self._keep, self.seq_ptr, self.seq64 = s, s.data_ptr(), int(s.dtype == torch.int64)
        else:
            self._keep = a = np.ascontiguousarray(s.numpy() if isinstance(s, torch.Tensor) else s, dtype=np.int64)
            self.seq_ptr, self.seq64 = a.ctypes.data, 1
        self.q_ptr = q.ctypes.data
        info = getattr(self._tls, "info", None)
        if info is None:
            info = self._tls.info = np.zeros(16, dtype=np.int64)
        self.info, self.info_ptr = info, info.ctypes.data

    def measure(self) -> tuple[int, int, int, int]:
        bad = self.lib.ap_measure(self.q_ptr, self.seq_ptr, self.seq64, len(self.q), self.page, self.info_ptr)
        t, p, mx = self.info[:3].tolist()
        return t, p, mx, bad

    def fill(self, host: Any, nd: int, width: int, t_all: int, p_host: int, kv_on_device: bool, bt: Any,
             phases: list) -> tuple[int, int, list[int]]:
        self.lib.ap_fill(self.q_ptr, self.seq_ptr, self.seq64, len(self.q), nd, self.page, width, t_all, p_host,
                         int(kv_on_device), None if bt is None else bt.ctypes.data, host.data_ptr(), self.info_ptr)
        t_dec, p_dec, *maxes = self.info[3:9].tolist()
        return t_dec, p_dec, maxes


def from_host(plan: Any, inp: Any, needs: Any, kind: str, staging: Optional[HostStaging] = None,
              q: Any = None) -> Any:
    """``StepMetadata`` for a batch whose KV lengths the host knows (``inp.seq_lens_cpu``).
    ``q``: the query lengths as an int64 numpy array when the caller has one (``build_step``).

    Host cost (issue 41): every per-token and per-page array is written straight into the pinned
    staging buffer, by host_step.c's two calls where it compiled (host_native.py), by numpy ``out=``
    otherwise (the same bytes); the host and device views of each part come from one
    ``split_with_sizes`` each; the device runs the one copy, one gather (the new tokens' and the KV
    pages' block-table entries at once) and one add (the int64 slots from int32 operands) - 3 launches
    where the KV pages number at most ``HOST_KV_ENTRIES`` (before: 6, and 11 past 4096 pages). With the
    engine's host block table (``inp.block_table_cpu``) the host also gathers the slots and page
    indices, and the copy is the step's one device operation."""
    import torch

    page, nd, table = plan.kv_cache.page_size, inp.num_decodes, inp.block_table
    device = inp.seq_lens.device
    if q is None:
        q = np.asarray(inp.query_lens, dtype=np.int64)
    b, width = len(q), int(table.shape[1])
    npre = b - nd
    if len(inp.seq_lens_cpu) != b:
        raise AdapterCallError(f"seq_lens_cpu has {len(inp.seq_lens_cpu)} entries for {b} requests")
    lib = host_native.library()
    fill = _NumpyFill(q, inp.seq_lens_cpu, page) if lib is None else _NativeFill(lib, q, inp.seq_lens_cpu, page)
    t_all, p_all, longest, bad = fill.measure()
    if bad >= 0:
        raise AdapterCallError(f"{'decode' if bad < nd else 'prefill'}: a request's KV length is shorter than its "
                               "query length (append this step's tokens before attending)")
    if (longest + page - 1) // page > width:
        # every page index and slot below comes from the table's row: a longer request would read past it
        raise AdapterCallError(f"a request's KV length {longest} needs {(longest + page - 1) // page} pages of "
                               f"{page} tokens; the block table holds {width} a request (pass a wider block_table)")
    kv_on_host = needs.needs_paged_kv_indices and p_all <= HOST_KV_ENTRIES
    kv_on_device = needs.needs_paged_kv_indices and not kv_on_host
    # The engine's host copy of the block table: the host gathers too (no device op but the one copy).
    bt = None if kv_on_device or inp.block_table_cpu is None else _host_table(inp.block_table_cpu, table)
    phases = [(ph, r0, r1) for ph, r0, r1 in (("decode", 0, nd), ("prefill", nd, b)) if r1 > r0]
    m = len(phases)
    n_k = [r1 - r0 for _, r0, r1 in phases]
    p_host = p_all if kv_on_host else 0
    # Layout of the one copy (int32): block-table entry of each new token [T] and, kv_on_host, of each
    # KV page [P] (adjacent: one gather serves both) | each new token's offset in its page [T] | per
    # phase present: qo indptr [n+1] | per phase: kv page indptr [n+1] | seq lens [B] | last page
    # lens [B] | kv_on_device: each request's first entry minus kv_ptr [B] and its pages [B]. Seq and
    # last page lens of both phases are adjacent (written at once); one split_with_sizes views every
    # part apart, on the host and on the device. With the host's block table the first two parts are
    # the slots themselves (int64, as int32 pairs: the buffer's start is 8-byte aligned) [2T] and the
    # page indices [P]. host_step.c ap_fill writes the same.
    sizes = [t_all + p_host, t_all] if bt is None else [2 * t_all, p_host]
    sizes += [*[n + 1 for n in n_k], *[n + 1 for n in n_k], *n_k, *n_k]
    if kv_on_device:
        sizes += [b, b]
    total = sum(sizes)
    host, slot = (staging or HostStaging("cpu")).take(total)
    host = host[:total]
    t_dec, p_dec, maxes = fill.fill(host, nd, width, t_all, p_host, kv_on_device, bt, phases)
    # the one copy (pinned source on CUDA: asynchronous); on the CPU a copy all the same
    dev = host.clone() if device.type == "cpu" else host.to(device, non_blocking=True)
    hv, dv = host.split_with_sizes(sizes), dev.split_with_sizes(sizes)
    kv_indices = None
    if bt is not None:
        slots = dv[0].view(torch.int64)
        if kv_on_host:
            kv_indices = dv[1]
    else:
        # Gathers from the block table: index_select on its flat view where it is contiguous (int32
        # indices, no conversion), take (int64 indices, any strides) where it is not.
        flat = table.view(-1) if table.is_contiguous() else None
        entries = flat.index_select(0, dv[0]) if flat is not None else torch.take(table, dv[0].long())
        if kv_on_host:
            entries, kv_indices = entries.split_with_sizes([t_all, p_all])
            if kv_indices.dtype != torch.int32:
                kv_indices = kv_indices.to(torch.int32)
        elif kv_on_device:
            # Pages can number hundreds of thousands (256 requests x 32k tokens): the device expands them.
            entry = torch.arange(p_all, dtype=torch.int32, device=device) + torch.repeat_interleave(
                dv[2 + 4 * m], dv[3 + 4 * m], output_size=p_all)
            kv_indices = torch.take(table, entry.long()).to(torch.int32)
        # slot = table entry * page + offset in one add that writes int64 (torch computes it in the
        # operands' int32: exact while slots < 2**31, i.e. a cache under 2**31 tokens - over 256 GiB
        # at the smallest KV row any plan has, 1 head x 64 x fp8 x K and V).
        slots = torch.empty(t_all, dtype=torch.int64, device=device)
        torch.add(dv[1], entries, alpha=page, out=slots)
    step = StepMetadata(kind=kind, needs=needs, num_tokens=t_all, slots=slots)
    step.extra["staging_slot"] = slot
    qlens = tuple(q.tolist())
    if m == 2:                          # two phases: the device tensors split in one op each
        seq_dev, tables = inp.seq_lens.split_with_sizes([nd, npre]), table.split_with_sizes([nd, npre])
        kv_parts = (None, None) if kv_indices is None else kv_indices.split_with_sizes([p_dec, p_all - p_dec])
    else:                               # one phase: the step's own tensors
        seq_dev, tables, kv_parts = (inp.seq_lens,), (table,), (kv_indices,)
    bounds = {"decode": (0, t_dec, maxes[0], maxes[1]), "prefill": (t_dec, t_all, maxes[2], maxes[3])}
    for k, (phase, r0, r1) in enumerate(phases):
        t0, t1, max_q, max_kv = bounds[phase]
        batch = PhaseBatch(
            phase=phase, req=slice(r0, r1), tok=slice(t0, t1), num_reqs=r1 - r0,
            num_tokens=t1 - t0, max_q_len=max_q, max_kv_len=max_kv,
            qo_indptr=dv[2 + k], seq_lens=seq_dev[k], block_table=tables[k], kv_page_indptr=dv[2 + m + k],
            last_page_len=dv[2 + 3 * m + k], qo_indptr_cpu=hv[2 + k], seq_lens_cpu=hv[2 + 2 * m + k],
            kv_page_indptr_cpu=hv[2 + m + k], last_page_len_cpu=hv[2 + 3 * m + k], query_lens=qlens[r0:r1],
            kv_indices=kv_parts[k],
        )
        setattr(step, phase, batch)
    return step
