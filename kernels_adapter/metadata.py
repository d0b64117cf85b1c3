"""Per-step attention metadata, built from what the scheduler knows (seed 001).

The batch holds decode requests first, then prefill requests (vLLM's order). Query lengths are
host data (the scheduler chose them). KV lengths and block tables live on the device; a host
copy of the KV lengths is needed only when the plan's metadata says so
(``needs_host_seq_lens``: some phase runs a native kernel, which plans on the host).

Everything derived here on the device is computed afresh each step from the step's own tensors:
the KV page indptr is an on-device cumsum of pages per request, never a buffer left over from a
previous step, and no device value is ever read back to the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from policy import BatchMetadata, Plan


@dataclass
class StepInput:
    query_lens: Sequence[int]            # tokens per request this step (host); decodes first
    seq_lens: Any                        # int32 [B] on the device: KV length after this step's tokens
    block_table: Any                     # int32 [B, max_pages] on the device
    num_decodes: int                     # the first num_decodes requests are decode requests
    seq_lens_cpu: Optional[Any] = None   # host copy of seq_lens, when the plan needs one
    max_seq_len: Optional[int] = None    # host upper bound of seq_lens (default: block table width)


@dataclass
class PhaseBatch:
    """One phase's slice of the batch; indptrs restart at 0 (each kernel sees its own batch)."""

    phase: str
    req: slice
    tok: slice
    num_reqs: int
    num_tokens: int
    max_q_len: int
    max_kv_len: int                      # host: exact with host seq lens, else the bound
    qo_indptr: Any                       # device int32 [n + 1]
    seq_lens: Any                        # device int32 [n]
    block_table: Any                     # device int32 [n, W]
    kv_page_indptr: Any                  # device int32 [n + 1], on-device cumsum of pages
    last_page_len: Any                   # device int32 [n]
    kv_indices: Optional[Any] = None     # device int32 [total pages], when the plan needs it
    qo_indptr_cpu: Optional[Any] = None
    seq_lens_cpu: Optional[Any] = None
    kv_page_indptr_cpu: Optional[Any] = None
    last_page_len_cpu: Optional[Any] = None
    query_lens: tuple[int, ...] = ()

    @property
    def context_lens_cpu(self) -> Optional[Any]:
        if self.seq_lens_cpu is None:
            return None
        import torch

        return self.seq_lens_cpu - torch.tensor(self.query_lens, dtype=self.seq_lens_cpu.dtype)


@dataclass
class StepMetadata:
    kind: str                            # prefill_only | decode_only | mixed
    needs: BatchMetadata
    num_tokens: int
    slots: Any                           # device int64 [T]: page * page_size + offset of each new token
    decode: Optional[PhaseBatch] = None
    prefill: Optional[PhaseBatch] = None
    extra: dict[str, Any] = field(default_factory=dict)   # backend plan state (ragged plans, ...)


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


def _phase(phase: str, inp: StepInput, r0: int, r1: int, t0: int, page: int, needs: BatchMetadata,
           device: Any) -> PhaseBatch:
    import torch

    qlens = tuple(int(x) for x in inp.query_lens[r0:r1])
    n = r1 - r0
    seq = inp.seq_lens[r0:r1]
    table = inp.block_table[r0:r1]
    qo_cpu = pinned_int32([0, *_accumulate(qlens)], device)
    pages = (seq + (page - 1)) // page
    kv_page_indptr = _cumsum0(pages)
    batch = PhaseBatch(
        phase=phase, req=slice(r0, r1), tok=slice(t0, t0 + sum(qlens)), num_reqs=n, num_tokens=sum(qlens),
        max_q_len=max(qlens), max_kv_len=inp.max_seq_len or int(table.shape[1]) * page,
        qo_indptr=qo_cpu.to(device, non_blocking=True), seq_lens=seq, block_table=table,
        kv_page_indptr=kv_page_indptr, last_page_len=(seq - 1) % page + 1, qo_indptr_cpu=qo_cpu,
        query_lens=qlens,
    )
    if inp.seq_lens_cpu is not None:
        seq_cpu = inp.seq_lens_cpu[r0:r1].to(torch.int32)
        pages_cpu = (seq_cpu + (page - 1)) // page
        batch.seq_lens_cpu = pinned_int32(seq_cpu, device)
        batch.kv_page_indptr_cpu = pinned_int32(torch.cat([torch.zeros(1, dtype=torch.int32), pages_cpu.cumsum(0).to(torch.int32)]), device)
        batch.last_page_len_cpu = pinned_int32((seq_cpu - 1) % page + 1, device)
        batch.max_kv_len = int(seq_cpu.max())
        if any(s < q for s, q in zip(seq_cpu.tolist(), qlens)):
            raise ValueError(f"{phase}: a request's KV length is shorter than its query length "
                             "(append this step's tokens before attending)")
    if needs.needs_paged_kv_indices:
        if batch.kv_page_indptr_cpu is None:
            raise ValueError("the plan needs paged KV indices, which need host seq lens (seq_lens_cpu)")
        total = int(batch.kv_page_indptr_cpu[-1])
        # Which request each page belongs to, with the total known on the host: no sync.
        owner = torch.repeat_interleave(torch.arange(n, device=device), pages, output_size=total)
        local = torch.arange(total, device=device, dtype=torch.int32) - kv_page_indptr[owner]
        batch.kv_indices = table[owner, local].to(torch.int32)
    return batch


def _accumulate(xs: Sequence[int]) -> list[int]:
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return out


def build_step(plan: Plan, inp: StepInput) -> StepMetadata:
    """Validate the step against the plan and build every tensor the planned kernels take."""
    import torch

    device = inp.seq_lens.device
    b = len(inp.query_lens)
    nd = inp.num_decodes
    if not 0 <= nd <= b or b == 0:
        raise ValueError(f"num_decodes {nd} for a batch of {b} requests")
    q_dec = plan.decode.q_len_per_req
    bad = [i for i in range(nd) if int(inp.query_lens[i]) != q_dec]
    if bad:
        raise ValueError(f"decode requests take {q_dec} query tokens each (1 + speculative tokens, "
                         f"the plan's q_len_per_req); requests {bad} have {[int(inp.query_lens[i]) for i in bad]}")
    if any(int(x) < 1 for x in inp.query_lens):
        raise ValueError("every request has at least one query token")
    kind = batch_kind(nd, b - nd)
    needs: BatchMetadata = getattr(plan.metadata, kind)
    if needs.needs_host_seq_lens and inp.seq_lens_cpu is None:
        raise ValueError(f"the plan's metadata for {kind} batches needs host seq lens (seed 001: some phase "
                         "runs a native kernel, which plans on the host); pass seq_lens_cpu")
    page = plan.kv_cache.page_size
    t_all = sum(int(x) for x in inp.query_lens)
    q_dev = pinned_int32(inp.query_lens, device).to(device, non_blocking=True)
    qo_all = _cumsum0(q_dev)
    # The slot of every new token, on the device: request -> position -> page -> slot.
    owner = torch.repeat_interleave(torch.arange(b, device=device), q_dev, output_size=t_all)
    pos = (inp.seq_lens - q_dev)[owner] + (torch.arange(t_all, device=device, dtype=torch.int32) - qo_all[owner])
    slots = inp.block_table[owner, pos // page].long() * page + (pos % page).long()
    step = StepMetadata(kind=kind, needs=needs, num_tokens=t_all, slots=slots)
    t_dec = nd * q_dec
    if nd:
        step.decode = _phase("decode", inp, 0, nd, 0, page, needs, device)
    if b - nd:
        step.prefill = _phase("prefill", inp, nd, b, t_dec, page, needs, device)
    return step
