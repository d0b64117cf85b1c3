"""CUDA-graph decode for a fixed batch size (native decode kernels).

A captured graph replays fixed addresses, so the wrapper is built over buffers that outlive
every step (indptr, page indices, last-page lengths); each step's ``plan`` rewrites them in place
outside the graph, and ``replay`` launches the captured kernel over the new metadata. Speculative
decode (``runs_on_prefill_kernel``) captures the causal prefill wrapper the plan names instead.
trtllm-gen decode takes only device tensors and needs no wrapper: capture its call directly.
"""

from __future__ import annotations

from typing import Any

import flashinfer
import torch

from .flashinfer_backend import FlashInferBackend, is_trtllm
from .metadata import StepMetadata


class DecodeGraph:
    def __init__(self, executor: Any, batch_size: int, max_pages: int, cache: Any):
        plan = executor.plan
        if executor.backend.name != "flashinfer" or is_trtllm(plan.decode.backend) or plan.kv_cache.mla:
            raise ValueError("DecodeGraph captures the native (fa2/fa3) decode wrappers")
        self.ex = executor
        self.cache = cache
        self.batch_size = batch_size
        backend: FlashInferBackend = executor.backend
        dev = executor.device
        d = plan.decode
        p = executor.params
        self.indptr = torch.zeros(batch_size + 1, dtype=torch.int32, device=dev)
        self.indices = torch.zeros(max_pages, dtype=torch.int32, device=dev)
        self.last = torch.ones(batch_size, dtype=torch.int32, device=dev)
        layout = plan.kv_cache.layout
        if d.runs_on_prefill_kernel:
            self.qo_indptr = torch.arange(batch_size + 1, dtype=torch.int32, device=dev) * d.q_len_per_req
            self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                backend.workspace, layout, use_cuda_graph=True, qo_indptr_buf=self.qo_indptr,
                paged_kv_indptr_buf=self.indptr, paged_kv_indices_buf=self.indices,
                paged_kv_last_page_len_buf=self.last, backend=d.backend)
        else:
            self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                backend.workspace, layout, use_cuda_graph=True, use_tensor_cores=bool(d.use_tensor_cores),
                paged_kv_indptr_buffer=self.indptr, paged_kv_indices_buffer=self.indices,
                paged_kv_last_page_len_buffer=self.last, backend=d.backend)
        tokens = batch_size * d.q_len_per_req
        self.q = torch.zeros(tokens, p.num_qo_heads, p.head_dim_qk, dtype=backend.q_dtype["decode"], device=dev)
        self.out = torch.empty(tokens, p.num_qo_heads, p.head_dim_vo, dtype=backend.o_dtype, device=dev)
        self.graph: Any = None

    def plan(self, step: StepMetadata) -> None:
        """Outside the graph: this step's metadata into the captured buffers."""
        if step.decode is None or step.prefill is not None or step.decode.num_reqs != self.batch_size:
            raise ValueError(f"a captured decode graph runs decode-only batches of {self.batch_size} requests")
        b = step.decode
        backend: FlashInferBackend = self.ex.backend
        backend._plan_paged(self.wrapper, b, "decode", decode_kernel=not self.ex.plan.decode.runs_on_prefill_kernel)

    def _run(self) -> None:
        self.wrapper.run(self.q, self.cache.kernel_view(), out=self.out)

    def capture(self) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._run()          # warm: lazy allocations happen outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._run()

    def replay(self, q: Any) -> Any:
        self.q.copy_(q)
        self.graph.replay()
        return self.out
