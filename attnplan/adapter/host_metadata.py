"""Step metadata from host KV lengths (every native plan has them), at a host cost per step that
does not grow with torch's per-op overhead (issue 17).

The host works out everything per request and per new token with numpy (a numpy op on a few
hundred ints costs ~1 us; a torch op ~5-10 us of dispatch on the H100's host), writes it into a
pinned staging buffer that is reused across steps, and sends it in one copy; the device only
gathers slots and page indices from the block table (``take``). On the H100 the previous torch
version took 0.45-1.6 ms per step (bench/RESULTS.md).

Staging reuse without a device->host sync: a ring of pinned buffers, each handed out again only
once a CUDA event recorded after the step's last reader (the copy, and FlashInfer's ``plan``,
which copies from the same host arrays) has completed - ``Event.query()``, which never waits; a
busy ring grows by one buffer instead. A step's host arrays (``*_cpu``) therefore stay valid until
its buffer is handed out again, at the earliest after ``release`` and the ring's other buffers.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .step import PhaseBatch, StepMetadata
from attnplan.errors import AdapterCallError

# Up to this many KV pages in a step, the host also works out which block-table entry each page
# index comes from (numpy: ~10 us for 4k on the H100's host) and sends it with the rest, so the
# device does one gather; beyond it (256 requests x 32k tokens is 524k pages) the device expands.
HOST_KV_ENTRIES = 4096


class HostStaging:
    """A ring of pinned int32 host buffers reused across steps (CUDA); fresh tensors elsewhere.
    The ring holds at most ``MAX_RING`` buffers: a caller that never releases (``build_step``
    called without ``plan_step``) gets fresh pinned buffers, not a ring that grows without end."""

    MAX_RING = 8

    def __init__(self, device: Any):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._ring: list[list[Any]] = []      # [host buffer, event or None, busy]
        self._next = 0

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
        ev.record(torch.cuda.current_stream(self.device))
        self._ring[slot][1] = ev
        self._ring[slot][2] = False


def from_host(plan: Any, inp: Any, needs: Any, kind: str, staging: Optional[HostStaging] = None) -> Any:
    """``StepMetadata`` for a batch whose KV lengths the host knows (``inp.seq_lens_cpu``)."""
    import torch

    page, nd, table = plan.kv_cache.page_size, inp.num_decodes, inp.block_table
    device = inp.seq_lens.device
    q = np.asarray(inp.query_lens, dtype=np.int64)
    s = inp.seq_lens_cpu
    seq = (s.numpy() if isinstance(s, torch.Tensor) else np.asarray(s)).astype(np.int64)
    b, width = len(q), int(table.shape[1])
    short = np.flatnonzero(seq < q)
    if short.size:
        raise AdapterCallError(f"{'decode' if short[0] < nd else 'prefill'}: a request's KV length is shorter than its "
                         "query length (append this step's tokens before attending)")
    qo = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(q, out=qo[1:])
    pages = (seq + page - 1) // page
    kv_ptr = np.zeros(b + 1, dtype=np.int64)
    np.cumsum(pages, out=kv_ptr[1:])
    last = (seq - 1) % page + 1
    t_all, p_all = int(qo[-1]), int(kv_ptr[-1])
    # Per new token: its position in its request's KV, then the row-major block-table entry of its
    # page and its offset in the page.
    owner = np.repeat(np.arange(b), q)
    pos = np.arange(t_all) + (seq - q - qo[:-1])[owner]
    # Layout of the one copy: entry [T] | offset [T] | page start [B] | pages [B] | per phase:
    # qo indptr [n+1] | kv page indptr [n+1] | seq lens [n] | last page lens [n].
    bounds = ((0, nd), (nd, b))
    kv_on_host = needs.needs_paged_kv_indices and p_all <= HOST_KV_ENTRIES
    total = 2 * t_all + 2 * b + sum(4 * (r1 - r0) + 2 for r0, r1 in bounds) + (p_all if kv_on_host else 0)
    host, slot = (staging or HostStaging("cpu")).take(total)
    h = host.numpy()
    h[:t_all] = owner * width + pos // page
    h[t_all:2 * t_all] = pos % page
    o = 2 * t_all
    h[o:o + b] = np.arange(b) * width - kv_ptr[:-1]          # page j of request r: this + kv_ptr[r] + j
    h[o + b:o + 2 * b] = pages
    o += 2 * b
    phase_off = []
    for r0, r1 in bounds:
        n = r1 - r0
        phase_off.append(o)
        h[o:o + n + 1] = qo[r0:r1 + 1] - qo[r0]
        h[o + n + 1:o + 2 * n + 2] = kv_ptr[r0:r1 + 1] - kv_ptr[r0]
        h[o + 2 * n + 2:o + 3 * n + 2] = seq[r0:r1]
        h[o + 3 * n + 2:o + 4 * n + 2] = last[r0:r1]
        o += 4 * n + 2
    if kv_on_host:                       # page j of request r: entry start[r] + kv_ptr[r] + j
        h[o:o + p_all] = np.arange(p_all) + np.repeat(h[2 * t_all:2 * t_all + b], pages)
    if device.type == "cpu":
        dev = host[:total].clone()
    else:
        dev = torch.empty(total, dtype=torch.int32, device=device)
        dev.copy_(host[:total], non_blocking=True)
    # Gathers from the block table: index_select on its flat view where it is contiguous (int32
    # indices, no conversion), take (int64 indices, any strides) where it is not.
    flat = table.view(-1) if table.is_contiguous() else None

    def gather(idx: Any) -> Any:
        return flat.index_select(0, idx) if flat is not None else torch.take(table, idx.long())

    slots = gather(dev[:t_all]).long()
    slots.mul_(page).add_(dev[t_all:2 * t_all])
    kv_indices = None
    if kv_on_host:
        kv_indices = gather(dev[total - p_all:total]).to(torch.int32)
    elif needs.needs_paged_kv_indices:
        # Pages can number hundreds of thousands (256 requests x 32k tokens): the device expands them.
        entry = torch.arange(p_all, dtype=torch.int32, device=device) + torch.repeat_interleave(
            dev[2 * t_all:2 * t_all + b], dev[2 * t_all + b:2 * t_all + 2 * b], output_size=p_all)
        kv_indices = torch.take(table, entry.long()).to(torch.int32)
    step = StepMetadata(kind=kind, needs=needs, num_tokens=t_all, slots=slots)
    step.extra["staging_slot"] = slot
    qlens = [int(x) for x in q]
    for phase, (r0, r1), off in zip(("decode", "prefill"), bounds, phase_off):
        n = r1 - r0
        if n == 0:
            continue
        hv = [host[off:off + n + 1], host[off + n + 1:off + 2 * n + 2], host[off + 2 * n + 2:off + 3 * n + 2],
              host[off + 3 * n + 2:off + 4 * n + 2]]
        dv = [dev[off:off + n + 1], dev[off + n + 1:off + 2 * n + 2], dev[off + 2 * n + 2:off + 3 * n + 2],
              dev[off + 3 * n + 2:off + 4 * n + 2]]
        batch = PhaseBatch(
            phase=phase, req=slice(r0, r1), tok=slice(int(qo[r0]), int(qo[r1])), num_reqs=n,
            num_tokens=int(qo[r1] - qo[r0]), max_q_len=int(q[r0:r1].max()), max_kv_len=int(seq[r0:r1].max()),
            qo_indptr=dv[0], seq_lens=inp.seq_lens[r0:r1], block_table=table[r0:r1], kv_page_indptr=dv[1],
            last_page_len=dv[3], qo_indptr_cpu=hv[0], seq_lens_cpu=hv[2], kv_page_indptr_cpu=hv[1],
            last_page_len_cpu=hv[3], query_lens=tuple(qlens[r0:r1]),
            kv_indices=None if kv_indices is None else kv_indices[int(kv_ptr[r0]):int(kv_ptr[r1])],
        )
        setattr(step, phase, batch)
    return step
