"""What one step's attention reads: the scheduler's input and the per-phase metadata built from it.

Plain dataclasses shared by the builders - ``metadata.build_step`` (the general path),
``host_metadata.from_host`` (host KV lengths) and ``decode_layout`` (decode-only steps through a
captured layout) - and by the backends that read them. They live apart from the builders so that
the builders import them at the top and none imports another (issue 25: no import circle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from attnplan.policy import BatchMetadata


@dataclass
class StepInput:
    query_lens: Sequence[int]            # tokens per request this step (host); decodes first
    seq_lens: Any                        # int32 [B] on the device: KV length after this step's tokens
    block_table: Any                     # int32 [B, max_pages] on the device
    num_decodes: int                     # the first num_decodes requests are decode requests
    seq_lens_cpu: Optional[Any] = None   # host copy of seq_lens, when the plan needs one
    max_seq_len: Optional[int] = None    # host upper bound of seq_lens (default: block table width)
    # Host copy of block_table, where the engine keeps one (vLLM: vllm/v1/worker/block_table.py
    # BlockTable's CPU tensor, of which block_table is the device copy); must equal it. With
    # seq_lens_cpu the host then works out the slots and page indices too and the device gathers
    # nothing (host_metadata.py).
    block_table_cpu: Optional[Any] = None


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


class _Slots:
    """``StepMetadata.slots``, made at its first read where the builder left it to the reader: the
    appends, once per layer, read the pages and offsets instead (``slot_pages`` / ``slot_offsets``), so a
    step from host lengths (host_metadata.from_host) launches no ``empty`` and no ``add`` for a
    tensor only an engine's own slot mapping would read (~14 us of host a step on the H100 machine,
    bench/logs/h100-2026-11-27u/call1/prof_from_host.log). A dataclass field whose default is a
    descriptor: the constructor's ``slots=`` goes through ``__set__``, its default is ``__get__(None)``."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return None                          # the field's default: made from the parts when read
        s = obj.__dict__.get("_slots")
        if s is None and obj.slot_pages is not None and obj.page_size:
            import torch

            # page * page_size + offset in one add that writes int64; torch computes it in the operands'
            # int32: exact while slots < 2**31, a cache under 2**31 tokens (over 256 GiB at the smallest
            # KV row any plan has, 1 head x 64 x fp8 x K and V).
            s = torch.empty(obj.slot_pages.shape, dtype=torch.int64, device=obj.slot_pages.device)
            torch.add(obj.slot_offsets, obj.slot_pages, alpha=obj.page_size, out=s)
            obj.__dict__["_slots"] = s
        return s

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_slots"] = value


@dataclass
class StepMetadata:
    kind: str                            # prefill_only | decode_only | mixed
    needs: BatchMetadata
    num_tokens: int
    # device int64 [T]: page * page_size + offset of each new token; None from the builder where
    # slot_pages, slot_offsets and page_size are given, made from them at its first read (_Slots)
    slots: Any = _Slots()
    decode: Optional[PhaseBatch] = None
    prefill: Optional[PhaseBatch] = None
    extra: dict[str, Any] = field(default_factory=dict)   # backend plan state (ragged plans, ...)
    # slots // page_size and slots % page_size, when the metadata already has them (decode layouts:
    # int64; prefill / mixed steps from host lengths, host_metadata.from_host: int32): appends, once
    # per layer, then launch no arithmetic of their own.
    slot_pages: Optional[Any] = None
    slot_offsets: Optional[Any] = None
    page_size: int = 0                   # what slots are made with where the builder left them to the reader


@dataclass
class RaggedPart:
    """One ragged part of an MLA prefill step: ``new`` (the new tokens over themselves, causal) or
    ``context`` (over the requests' cached context). The backend plans it from ``qo_indptr_cpu`` and
    ``kv_indptr_cpu``; the general replay's learning reads it by the names it reads a phase by
    (general_plans.py ``INTS`` / ``TENSORS``): the part's own KV indptr, where it is not the query's, as
    ``kv_page_indptr[_cpu]``, its KV lengths as ``seq_lens_cpu``; the rest None."""

    key: str
    causal: bool
    step: Any
    qo_indptr_cpu: Any
    kv_indptr_cpu: Any                   # what the plan takes (``new``: the query's)
    num_reqs: int
    num_tokens: int
    max_q_len: int
    max_kv_len: int
    qo_indptr: Any = None                # device
    kv_page_indptr_cpu: Any = None
    kv_page_indptr: Any = None           # device
    seq_lens_cpu: Any = None
    last_page_len_cpu: Any = None
    kv_indices: Any = None
    last_page_len: Any = None
    seq_lens: Any = None
