"""CUDA-graph decode for a fixed batch size: the whole step's device work in one graph (issue 17).

The graph holds, in order: the step's metadata from its lengths and block table
(``DecodeLayout.compute``: KV page indptr, page indices, last-page lengths, each new token's
slot), the append of the new K/V (MLA: latent rows) at those slots, and the attention call the
plan names (the strategy of ``PhasePlan.call``, ``calls/``). Per step the host copies the lengths
and the block table into the graph's buffers (``update``) and replays.

Host-planned calls (FlashInfer wrappers: paged_decode, paged_prefill for speculative decode or fa3
decode, sink, mla_paged_decode) also need FlashInfer's scheduler, which runs on the host: their
wrapper is built in CUDA-graph mode over the layout's own buffers (``KernelCall.graph_buffers``), and ``update`` calls its
``plan`` with the host lengths and an empty page-index
tensor - the wrapper copies nothing into the indices buffer, which the graph fills on the device
(MLA's plan checks the count, so it gets the buffer itself: a copy onto itself). That ``plan`` is FlashInfer's own cost,
the same one its CUDA-graph wrapper pays; everything else the adapter adds is two copies.
Device-tensor calls (xqa_decode, trtllm_decode, trtllm_mla_decode) plan nothing on the host.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from . import kv_cache as kvc
from .decode_layout import DecodeLayout, HostDecodeArrays
from .flashinfer_backend import FlashInferBackend
from .step import StepMetadata
from attnplan.errors import AdapterCallError


class DecodeGraph:
    """``DecodeGraph(executor, batch_size, max_pages_per_req, cache)``; then each step
    ``update(seq_lens, block_table, seq_lens_cpu)`` and ``replay(q, k_new, v_new)`` (MLA:
    ``replay_mla(q_nope, q_pe, latent)``). ``capture()`` once, after the first ``update``."""

    def __init__(self, executor: Any, batch_size: int, max_pages_per_req: int, cache: Any, *,
                 sinks: Optional[Any] = None):
        plan = executor.plan
        backend = executor.backend
        if not isinstance(backend, FlashInferBackend):
            raise AdapterCallError("DecodeGraph captures the FlashInfer backend's decode kernels")
        self.ex = executor
        self.cache = cache
        self.batch_size = batch_size
        self.sinks = sinks
        self.mla = plan.kv_cache.mla
        dev = executor.device
        d = plan.decode
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
        self._parts = (self.layout.slot_pages, self.layout.slot_offsets)
        lay = self.layout
        # What the kernels read, as the eager path hands it to them: the layout's buffers.
        self.step = StepMetadata(
            kind="decode_only", needs=plan.metadata.decode_only, num_tokens=tokens, slots=lay.slots,
            decode=lay.phase_batch(lay.seq_lens, lay.table, max_pages_per_req * plan.kv_cache.page_size,
                                   lay.kv_indices[:-1]))
        self.wrapper: Any = None
        if self.host_planned:
            self.wrapper = backend.make_wrapper("decode", **self.call.graph_buffers(lay))
            self._no_indices = torch.empty(0, dtype=torch.int32, device=dev)
        else:
            self.step.extra.update(self.call.device_extras(backend, d, batch_size))

    # -- host side, each step ------------------------------------------------------------------
    def update(self, seq_lens: Any, block_table: Any, seq_lens_cpu: Optional[Any] = None) -> None:
        """The step's host work: copy its lengths and block table in; a host-planned call also
        runs FlashInfer's ``plan`` on the host lengths (``seq_lens_cpu``)."""
        lay = self.layout
        if int(block_table.shape[0]) != self.batch_size or int(block_table.shape[1]) > lay.width:
            raise AdapterCallError(f"this graph runs {self.batch_size} requests over block tables of at most {lay.width} "
                             f"pages; got a table of shape {tuple(block_table.shape)}")
        if self.host_planned:
            self._plan(seq_lens_cpu)     # first: FlashInfer's pageable copies wait for work already enqueued
        # An engine that writes straight into ``layout.seq_lens`` / ``layout.table`` passes them back: no copy.
        if seq_lens.data_ptr() != lay.seq_lens.data_ptr():
            lay.seq_lens.copy_(seq_lens, non_blocking=True)
        if block_table.data_ptr() != lay.table.data_ptr():
            w = int(block_table.shape[1])
            (lay.table if w == lay.width else lay.table[:, :w]).copy_(block_table, non_blocking=True)

    def _plan(self, seq_lens_cpu: Optional[Any]) -> None:
        lay = self.layout
        if seq_lens_cpu is None:
            raise AdapterCallError(f"the decode call {self.ex.plan.decode.call!r} plans on the host: pass seq_lens_cpu")
        host = HostDecodeArrays(seq_lens_cpu, self.q_len, lay.page_size, lay.width)
        # The graph writes the page indices; the wrapper's plan copies none of them in - except
        # where it checks their count (``KernelCall.graph_plan_counts_indices``): that one gets the
        # graph's own buffer (a copy onto itself).
        indices = lay.kv_indices[: host.num_pages] if self.call.graph_plan_counts_indices else self._no_indices
        batch = lay.phase_batch(lay.seq_lens, lay.table, host.max_kv_len, indices, host)
        self.ex.backend.plan_wrapper(self.wrapper, batch, "decode")

    # -- captured work ---------------------------------------------------------------------------
    def _run(self) -> None:
        backend: FlashInferBackend = self.ex.backend
        self.layout.compute()
        if self.mla:
            kvc.append(self.cache, self.layout.slots, self.latent, pages_offsets=self._parts)
            self.call.run_latent(backend, self.wrapper, self.step, self.q_nope, self.q_pe, self.cache, self.out)
            return
        kvc.append(self.cache, self.layout.slots, self.k_new, self.v_new, pages_offsets=self._parts)
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
