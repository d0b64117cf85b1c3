"""Per-step attention metadata, built from what the scheduler knows (seed 001).

The batch holds decode requests first, then prefill requests (vLLM's order). Query lengths are
host data (the scheduler chose them). KV lengths and block tables live on the device; a host
copy of the KV lengths is needed only when the plan's metadata says so
(``needs_host_seq_lens``: some phase runs a native kernel, which plans on the host).

Everything the kernels read is computed afresh each step from the step's own lengths, never a
buffer left over from a previous step, and no device value is ever read back to the host. With the
host copy of the KV lengths, the host works out everything per request and per new token (numpy,
``host_metadata.py``) and sends it in one copy, and the device only gathers slots and page
indices from the block table; without it the device derives the same (``_on_device``: the KV page
indptr is an on-device cumsum, TRTLLM-gen plans). Both give the same step; tests hold them to it.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

from attnplan.errors import AdapterCallError
from attnplan.policy import BatchMetadata, Plan

from .decode_layout import decode_step
from .host_metadata import check_query_lens, from_host
from .step import PhaseBatch, StepInput, StepMetadata

__all__ = ["PhaseBatch", "StepInput", "StepMetadata", "batch_kind", "build_step", "pinned_int32"]


def batch_kind(num_decodes: int, num_prefills: int) -> str:
    if num_decodes and num_prefills:
        return "mixed"
    return "decode_only" if num_decodes else "prefill_only"


def pinned_int32(values: Any, device: Any) -> Any:
    """A host int32 tensor; pinned when the device is CUDA so its H2D copy is asynchronous."""
    import torch

    t = values if isinstance(values, torch.Tensor) else torch.tensor(list(values), dtype=torch.int32)
    t = t.to(torch.int32)
    if getattr(device, "type", str(device)).startswith("cuda") and torch.cuda.is_available():
        t = t.pin_memory()
    return t


def _cumsum0(x: Any) -> Any:
    """[0, cumsum(x)] as int32 in a fresh tensor on x's device (every element written)."""
    import torch

    out = torch.empty(x.shape[0] + 1, dtype=torch.int32, device=x.device)
    out[:1] = 0
    torch.cumsum(x, 0, dtype=torch.int32, out=out[1:])
    return out


def _device_page_indptr(seq_lens: Any, nd: int, page: int) -> tuple[Any, Any]:
    """Each phase's KV page indptr by an on-device cumsum of this step's pages per request
    (seed 001), restarted at 0 for the prefill phase."""
    ptr = _cumsum0((seq_lens + (page - 1)) // page)
    return ptr[: nd + 1], (ptr[nd:] - ptr[nd]) if nd < seq_lens.shape[0] else None


class _OneCopy:
    """Host int32 arrays packed into one (pinned) buffer and sent to the device in one copy, so a
    step pays for one transfer, not one per array. Host and device views share the layout."""

    def __init__(self) -> None:
        self.parts: list[Any] = []

    def add(self, x: Any) -> int:
        self.parts.append(x)
        return len(self.parts) - 1

    def send(self, device: Any) -> tuple[list[Any], list[Any]]:
        import torch

        host = pinned_int32(torch.cat(self.parts), device)
        dev = host.to(device, non_blocking=True)
        sizes = [int(x.shape[0]) for x in self.parts]
        return list(host.split(sizes)), list(dev.split(sizes))


def _on_device(plan: Plan, inp: StepInput, needs: BatchMetadata, kind: str) -> StepMetadata:
    """Without host KV lengths (TRTLLM-gen plans take device tensors only): everything that
    depends on them is computed on the device, and nothing is read back."""
    import torch

    page, nd, device = plan.kv_cache.page_size, inp.num_decodes, inp.seq_lens.device
    if needs.needs_paged_kv_indices:
        raise AdapterCallError("the plan needs paged KV indices, which need host seq lens (seq_lens_cpu)")
    b = len(inp.query_lens)
    qlens_all = [int(x) for x in inp.query_lens]
    t_all = sum(qlens_all)
    pack = _OneCopy()
    # Query lengths are host data: their indptrs are host sums, sent with them in the one copy.
    i_q = pack.add(torch.tensor(qlens_all, dtype=torch.int32))
    i_qo_all = pack.add(torch.tensor(list(accumulate(qlens_all, initial=0)), dtype=torch.int32))
    bounds = [(0, nd), (nd, b)]
    i_qo = [pack.add(torch.tensor(list(accumulate(qlens_all[r0:r1], initial=0)), dtype=torch.int32)) for r0, r1 in bounds]
    host, dev = pack.send(device)
    q_dev, qo_all = dev[i_q], dev[i_qo_all]
    # The slot of every new token, on the device: request -> position -> page -> slot.
    owner = torch.repeat_interleave(torch.arange(b, device=device), q_dev, output_size=t_all)
    pos = (inp.seq_lens - q_dev)[owner] + (torch.arange(t_all, device=device, dtype=torch.int32) - qo_all[owner])
    slots = inp.block_table[owner, pos // page].long() * page + (pos % page).long()
    step = StepMetadata(kind=kind, needs=needs, num_tokens=t_all, slots=slots)
    dec_ptr, pre_ptr = _device_page_indptr(inp.seq_lens, nd, page)
    t0 = 0
    for phase, (r0, r1), i, ptr in zip(("decode", "prefill"), bounds, i_qo, (dec_ptr, pre_ptr)):
        if r0 == r1:
            continue
        qlens = tuple(qlens_all[r0:r1])
        seq = inp.seq_lens[r0:r1]
        table = inp.block_table[r0:r1]
        batch = PhaseBatch(
            phase=phase, req=slice(r0, r1), tok=slice(t0, t0 + sum(qlens)), num_reqs=r1 - r0,
            num_tokens=sum(qlens), max_q_len=max(qlens), max_kv_len=inp.max_seq_len or int(table.shape[1]) * page,
            qo_indptr=dev[i], seq_lens=seq, block_table=table, kv_page_indptr=ptr,
            last_page_len=(seq - 1) % page + 1, qo_indptr_cpu=host[i], query_lens=qlens,
        )
        setattr(step, phase, batch)
        t0 += sum(qlens)
    return step


def build_step(plan: Plan, inp: StepInput, staging: Any = None, layouts: Any = None, *,
               defer_launch: bool = False) -> StepMetadata:
    """Validate the step against the plan and build every tensor the planned kernels take.
    ``staging``: a ``host_metadata.HostStaging`` whose pinned buffers are reused across steps
    (the executor keeps one; without it each step allocates its host arrays). ``layouts``: a
    ``decode_layout.DecodeLayouts``; with it a decode-only step replays its shape's captured
    metadata instead of building it afresh (the executor keeps one); ``defer_launch``: that
    replay is left to ``step.extra["launch"]()`` (``decode_layout.decode_step``)."""
    b = len(inp.query_lens)
    nd = inp.num_decodes
    if not 0 <= nd <= b or b == 0:
        raise AdapterCallError(f"num_decodes {nd} for a batch of {b} requests")
    q_dec = plan.decode.q_len_per_req
    ql = inp.query_lens
    if layouts is not None and nd == b and isinstance(ql, (list, tuple)) and ql.count(q_dec) == b:
        # The steady state of serving: every request decodes (a C-level count, not a numpy pass).
        needs_dec: BatchMetadata = plan.metadata.decode_only
        if needs_dec.needs_host_seq_lens and inp.seq_lens_cpu is None:
            raise AdapterCallError("the plan's metadata for decode_only batches needs host seq lens (seed 001: some "
                             "phase runs a native kernel, which plans on the host); pass seq_lens_cpu")
        return decode_step(plan, inp, needs_dec, layouts, defer_launch=defer_launch)
    kind = batch_kind(nd, b - nd)
    needs: BatchMetadata = getattr(plan.metadata, kind)
    if inp.seq_lens_cpu is not None:
        return from_host(plan, inp, needs, kind, staging, q_dec=q_dec)      # checks the query lengths itself
    import numpy as np

    # numpy, not a Python loop over requests: ~100 us of host time per step at batch 256 (H100 host).
    check_query_lens(np.asarray(inp.query_lens, dtype=np.int64), nd, q_dec)
    if needs.needs_host_seq_lens:
        raise AdapterCallError(f"the plan's metadata for {kind} batches needs host seq lens (seed 001: some phase "
                         "runs a native kernel, which plans on the host); pass seq_lens_cpu")
    return _on_device(plan, inp, needs, kind)
