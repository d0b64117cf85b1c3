"""CUDA-graph decode for a fixed batch size: the whole step's device work in one graph (issue 17).

The graph holds, in order: the step's metadata from its lengths and block table
(``DecodeLayout.compute``: KV page indptr, page indices, last-page lengths, each new token's
slot), the append of the new K/V (MLA: latent rows) at those slots - both one Triton launch for a
16-bit cache (``DecodeLayout.compute_append``, issue 41), the metadata launch then
``kv_cache.append``'s scatters otherwise - and the attention call the plan names (the strategy
of ``PhasePlan.call``, ``calls/``). Per step the host copies the lengths and the block table into
the graph's buffers (``update``) and replays.

Host-planned calls (FlashInfer wrappers: paged_decode, paged_prefill for speculative decode or fa3
decode, sink, mla_paged_decode) also need FlashInfer's scheduler, which runs on the host: their
wrapper is built in CUDA-graph mode over the layout's own buffers (``KernelCall.graph_buffers``), and ``update`` calls its
``plan`` with the host lengths and an empty page-index
tensor - the wrapper copies nothing into the indices buffer, which the graph fills on the device
(MLA's plan checks the count, so it gets the buffer itself: a copy onto itself). That ``plan`` is FlashInfer's own cost,
the same one its CUDA-graph wrapper pays, re-run as vLLM runs it every step - here on the steps whose
inputs to the scheduler changed (fa3's and MLA's schedule follows the token lengths; fa2's the page counts).
Device-tensor calls (xqa_decode, trtllm_decode, trtllm_mla_decode) plan nothing on the host.

Everything else is made once per graph (issue 41): the host arrays the plan reads
(``HostDecodeArrays``, refilled in place), the plan's arguments (recorded from the strategy's
first plan and replayed, where no per-step tensor is among them), so a step's host work is the
refill (six numpy ufuncs), FlashInfer's ``plan`` and one dispatch copying the lengths and the
table in (``_foreach_copy_``; none when the engine writes into the graph's buffers). FlashInfer's
fa2 schedulers read page counts only, so their ``plan`` runs only on steps whose page counts differ
from the last plan's (``KernelCall.graph_plan_pages_only``). And a step that plans calls FlashInfer's
scheduler alone where the wrapper names it (``KernelCall.graph_scheduler``) and the first update
showed, over two sets of lengths, that the recorded scheduler call leaves what the whole plan leaves
(plan_replay.py): FlashInfer's Python plan around it is 30-40 us (fa2) and 300-1,200 us (MLA) a step.
``ATTNPLAN_GRAPH_SCHEDULER_REPLAY=0`` keeps the whole plan (benchmarks compare the two in one process).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from .decode_layout import DecodeLayout, HostDecodeArrays, _copy2
from .flashinfer_backend import FlashInferBackend
from .host_plan import HostPlan
from .step import StepMetadata
from attnplan.errors import AdapterCallError


class DecodeGraph:
    """``DecodeGraph(executor, batch_size, max_pages_per_req, cache)``; then each step
    ``update(seq_lens, block_table, seq_lens_cpu)`` and ``replay(q, k_new, v_new)`` (MLA:
    ``replay_mla(q_nope, q_pe, latent)``). ``capture()`` once, after the first ``update``.

    ``decode``: which of the plan's decode calls the graph captures (a graph holds one kernel): the
    default, or where the plan carries a measured per-shape choice (``Plan.decode_choice``) the one
    ``executor.backend.decode_index_for(num_pages)`` names for the batch - the engine keys its
    graphs by (batch size, that index)."""

    def __init__(self, executor: Any, batch_size: int, max_pages_per_req: int, cache: Any, *,
                 sinks: Optional[Any] = None, decode: int = 0):
        plan = executor.plan
        if not isinstance(executor.backend, FlashInferBackend):
            raise AdapterCallError("DecodeGraph captures the FlashInfer backend's decode kernels")
        backend = executor.backend.decode_context(decode)
        self.backend = backend
        self.ex = executor
        self.cache = cache
        self.batch_size = batch_size
        self.sinks = sinks
        self.mla = plan.kv_cache.mla
        dev = executor.device
        d = backend.plan.decode
        p = executor.params
        self.q_len = d.q_len_per_req
        self.call = backend.calls["decode"]
        self.host_planned = self.call.host_planned
        # Wrappers read paged KV indices; XQA and TRTLLM-gen read the block table itself.
        self.layout = DecodeLayout(batch_size, d.q_len_per_req, plan.kv_cache.page_size, max_pages_per_req, dev,
                                   indices=self.host_planned)
        tokens = self.layout.num_tokens
        q_dtype = backend.q_dtype["decode"]
        if self.mla:
            self.q_nope = torch.zeros(tokens, p.num_qo_heads, p.kv_lora_rank, dtype=q_dtype, device=dev)
            self.q_pe = torch.zeros(tokens, p.num_qo_heads, p.qk_rope_head_dim, dtype=q_dtype, device=dev)
            self.latent = torch.zeros(tokens, p.kv_lora_rank + p.qk_rope_head_dim, dtype=q_dtype, device=dev)
            self.out = torch.empty(tokens, p.num_qo_heads, p.kv_lora_rank, dtype=backend.o_dtype, device=dev)
        else:
            self.q = torch.zeros(tokens, p.num_qo_heads, p.head_dim_qk, dtype=q_dtype, device=dev)
            self.k_new = torch.zeros(tokens, p.num_kv_heads, p.head_dim_qk, dtype=q_dtype, device=dev)
            self.v_new = torch.zeros(tokens, p.num_kv_heads, p.head_dim_vo, dtype=q_dtype, device=dev)
            self.out = torch.empty(tokens, p.num_qo_heads, p.head_dim_vo, dtype=backend.o_dtype, device=dev)
        self.graph: Any = None
        lay = self.layout
        # Metadata and append in one launch where the cache stores the rows as they come (a 16-bit
        # cache: decode_kernel.py, issue 41); else the metadata launch then ``kv_cache.append``.
        self.fused = lay.fused_append(cache, self.latent) if self.mla else lay.fused_append(cache, self.k_new,
                                                                                              self.v_new)
        # What the kernels read, as the eager path hands it to them: the layout's buffers.
        self.step = StepMetadata(
            kind="decode_only", needs=plan.metadata.decode_only, num_tokens=tokens, slots=lay.slots,
            decode=lay.phase_batch(lay.seq_lens, lay.table, max_pages_per_req * plan.kv_cache.page_size,
                                   lay.kv_indices[:-1]))
        self.wrapper: Any = None
        self._max_pages = max_pages_per_req
        if self.host_planned:
            # The wrapper in CUDA-graph mode over the layout's buffers, the host arrays its plan reads
            # (this batch size's, rewritten in place each step), its plan, page-count skip and
            # scheduler replay (host_plan.py).
            learn = os.environ.get("ATTNPLAN_GRAPH_SCHEDULER_REPLAY") != "0"
            self.planner = HostPlan(backend, lay, HostDecodeArrays(batch_size, self.q_len, lay.page_size, lay.width),
                                    learn=learn, refused="ATTNPLAN_GRAPH_SCHEDULER_REPLAY=0")
            self.wrapper = self.planner.wrapper
            self.host = self.planner.host
            self.scheduler = self.planner.scheduler
        else:
            self.step.extra.update(self.call.device_extras(backend, d, batch_size))

    # -- host side, each step ------------------------------------------------------------------
    def update(self, seq_lens: Any, block_table: Any, seq_lens_cpu: Optional[Any] = None) -> None:
        """The step's host work: a host-planned call's FlashInfer ``plan`` over this step's host
        lengths (``seq_lens_cpu``) written into the graph's host arrays (for fa2 only when a request's
        page count changed since the last plan: ``HostPlan.plan``), then one copy each of the
        lengths and the block table into the graph's buffers - nothing else (issue 41). An
        engine that writes straight into ``layout.seq_lens`` / ``layout.table`` passes them back:
        no copy."""
        lay = self.layout
        shape = block_table.shape
        if shape[0] != self.batch_size or shape[1] > self._max_pages:
            raise AdapterCallError(f"this graph runs {self.batch_size} requests over block tables of at most "
                                   f"{lay.width} pages; got a table of shape {tuple(shape)}")
        if self.host_planned:
            # First: FlashInfer's pageable copies wait for work already enqueued.
            if seq_lens_cpu is None:
                raise AdapterCallError(f"the decode call {self.backend.plan.decode.call!r} plans on the host: "
                                       "pass seq_lens_cpu")
            self.host.fill(seq_lens_cpu)
            self.planner.plan()
        copy_seq = seq_lens.data_ptr() != lay.seq_lens.data_ptr()
        copy_table = block_table.data_ptr() != lay.table.data_ptr()
        table = lay.table if shape[1] == lay.width else lay.table[:, :shape[1]]
        if copy_seq and copy_table:
            _copy2(lay.seq_lens, seq_lens, table, block_table)
        elif copy_seq:
            lay.seq_lens.copy_(seq_lens, non_blocking=True)
        elif copy_table:
            table.copy_(block_table, non_blocking=True)

    @property
    def plans_skipped(self) -> int:
        """Steps whose page counts repeated the last plan's (fa2): planned nothing."""
        return self.planner.plans_skipped if self.host_planned else 0

    # -- captured work ---------------------------------------------------------------------------
    def _run(self) -> None:
        backend: FlashInferBackend = self.backend
        if self.mla:
            self.layout.compute_append(self.cache, self.latent, None, self.fused)
            self.call.run_latent(backend, self.wrapper, self.step, self.q_nope, self.q_pe, self.cache, self.out)
            return
        self.layout.compute_append(self.cache, self.k_new, self.v_new, self.fused)
        self.call.run(backend, self.wrapper, self.step, "decode", self.q, self.cache, self.out, k_scale=1.0,
                      v_scale=1.0, sinks=self.sinks)

    def capture(self) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._run()          # warm: lazy allocations happen outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._run()

    def replay(self, q: Any, k_new: Any, v_new: Any) -> Any:
        """One step: this step's query and new K/V in, the graph replayed, the output buffer out."""
        self.q.copy_(q)
        self.k_new.copy_(k_new)
        self.v_new.copy_(v_new)
        self.graph.replay()
        return self.out

    def replay_mla(self, q_nope: Any, q_pe: Any, latent: Any) -> Any:
        self.q_nope.copy_(q_nope)
        self.q_pe.copy_(q_pe)
        self.latent.copy_(latent)
        self.graph.replay()
        return self.out
