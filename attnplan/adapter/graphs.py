"""CUDA-graph decode for a fixed batch size, dispatched on the decode phase's ``call``.

A captured graph replays fixed addresses. Host-planned calls (``calls.py``: paged_decode,
paged_prefill for speculative decode, sink) build their wrapper over buffers that outlive every
step (indptr, page indices, last-page lengths, qo indptr); each step's ``plan`` rewrites them in
place outside the graph - FlashInfer's scheduler runs on the host - and ``replay`` launches the
captured kernels over the new metadata. Device-tensor calls (xqa_decode, trtllm_decode) need no
host planning at all: the graph captures the whole step - this step's slots from the lengths,
the K/V append and the attention - and the host only copies the lengths and the block table in
(``update``), which is the whole per-step host work.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import flashinfer
import torch

from . import kv_cache as kvc
from .calls import spec
from .flashinfer_backend import FlashInferBackend
from .metadata import StepMetadata


def _graph_buffers(call: str, indptr: Any, indices: Any, last: Any, qo_indptr: Any) -> dict[str, Any]:
    """The CUDA-graph buffer arguments of the wrapper that runs ``call`` (FlashInfer names them
    differently in its decode and prefill wrappers: decode.py / prefill.py ``__init__``)."""
    if call == "paged_decode":
        return dict(use_cuda_graph=True, paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices,
                    paged_kv_last_page_len_buffer=last)
    return dict(use_cuda_graph=True, qo_indptr_buf=qo_indptr, paged_kv_indptr_buf=indptr,
                paged_kv_indices_buf=indices, paged_kv_last_page_len_buf=last)


class DecodeGraph:
    def __init__(self, executor: Any, batch_size: int, max_pages: int, cache: Any, *,
                 max_pages_per_req: Optional[int] = None, sinks: Optional[Any] = None):
        plan = executor.plan
        if executor.backend.name != "flashinfer" or plan.kv_cache.mla:
            raise ValueError("DecodeGraph captures standard-attention decode on the FlashInfer backend")
        self.ex = executor
        self.cache = cache
        self.batch_size = batch_size
        self.sinks = sinks
        backend: FlashInferBackend = executor.backend
        dev = executor.device
        d = plan.decode
        p = executor.params
        self.host_planned = spec(d.call).wrapper
        tokens = batch_size * d.q_len_per_req
        self.q = torch.zeros(tokens, p.num_qo_heads, p.head_dim_qk, dtype=backend.q_dtype["decode"], device=dev)
        self.out = torch.empty(tokens, p.num_qo_heads, p.head_dim_vo, dtype=backend.o_dtype, device=dev)
        self.graph: Any = None
        if self.host_planned:
            self.indptr = torch.zeros(batch_size + 1, dtype=torch.int32, device=dev)
            self.indices = torch.zeros(max_pages, dtype=torch.int32, device=dev)
            self.last = torch.ones(batch_size, dtype=torch.int32, device=dev)
            self.qo_indptr = torch.arange(batch_size + 1, dtype=torch.int32, device=dev) * d.q_len_per_req
            self.wrapper = backend.make_wrapper(
                "decode", **_graph_buffers(d.call, self.indptr, self.indices, self.last, self.qo_indptr))
        else:
            if d.q_len_per_req != 1:
                raise ValueError("the captured device-tensor step appends one token per request (q_len_per_req 1)")
            width = max_pages_per_req or max_pages // batch_size
            page = plan.kv_cache.page_size
            self.seq_lens = torch.ones(batch_size, dtype=torch.int32, device=dev)
            self.table = torch.zeros(batch_size, width, dtype=torch.int32, device=dev)
            self.k_new = torch.zeros(batch_size, p.num_kv_heads, p.head_dim_qk, dtype=backend.q_dtype["decode"], device=dev)
            self.v_new = torch.zeros(batch_size, p.num_kv_heads, p.head_dim_vo, dtype=backend.q_dtype["decode"], device=dev)
            batch = SimpleNamespace(block_table=self.table, seq_lens=self.seq_lens, max_kv_len=width * page)
            self.step = SimpleNamespace(decode=batch, extra={})
            if d.call == "xqa_decode" and d.q_len_per_req > 1:
                self.step.extra["xqa_mask"] = backend.xqa_mask(batch_size)

    # -- host side, each step ------------------------------------------------------------------
    def plan(self, step: StepMetadata) -> None:
        """Host-planned calls, outside the graph: this step's metadata into the captured buffers."""
        if not self.host_planned:
            raise ValueError("a device-tensor decode graph takes update(seq_lens, block_table), not plan()")
        if step.decode is None or step.prefill is not None or step.decode.num_reqs != self.batch_size:
            raise ValueError(f"a captured decode graph runs decode-only batches of {self.batch_size} requests")
        self.ex.backend.plan_wrapper(self.wrapper, step.decode, "decode")

    def update(self, seq_lens: Any, block_table: Any) -> None:
        """Device-tensor calls: the only host work of a step - copy its lengths and block table."""
        self.seq_lens.copy_(seq_lens, non_blocking=True)
        self.table[:, : block_table.shape[1]].copy_(block_table, non_blocking=True)

    # -- captured work ---------------------------------------------------------------------------
    def _run(self) -> None:
        backend: FlashInferBackend = self.ex.backend
        if self.host_planned:
            backend.run_wrapper(self.wrapper, self.ex.plan.decode.call, self.q, self.cache, self.out,
                                k_scale=1.0, v_scale=1.0, sinks=self.sinks)
            return
        # The step's slots from the device lengths (the new token is the last one), then append, then attend.
        page = self.ex.plan.kv_cache.page_size
        pos = (self.seq_lens - 1).long()
        rows = torch.arange(self.batch_size, device=pos.device)
        slots = self.table[rows, pos // page].long() * page + pos % page
        kvc.append(self.cache, slots, self.k_new, self.v_new)
        flashinfer.decode.trtllm_batch_decode_with_kv_cache(
            **backend.device_decode_kwargs(self.step, self.q, self.cache, self.out, sinks=self.sinks))

    def capture(self) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._run()          # warm: lazy allocations happen outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._run()

    def replay(self, q: Any, k_new: Optional[Any] = None, v_new: Optional[Any] = None) -> Any:
        self.q.copy_(q)
        if not self.host_planned and k_new is not None:
            self.k_new.copy_(k_new)
            self.v_new.copy_(v_new)
        self.graph.replay()
        return self.out
