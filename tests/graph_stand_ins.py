"""A ``DecodeGraph`` on the CPU over the real executor, backend and strategies, with FlashInfer's
wrappers replaced by a test's stand-in (FlashInfer's need a GPU to allocate), and the page
arithmetic the graph tests check against (tests/test_graph_plan_skip.py,
tests/test_graph_scheduler_replay.py, tests/test_eager_scheduler_replay.py), and stand-in wrappers shaped as
FlashInfer's whose scheduler writes a schedule computed from the host arrays it is handed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch

from attnplan.policy import AttentionConfig, plan_for, simulated_node


def executor(monkeypatch: Any, make: Callable[[], Any], config: dict, backend: Optional[str] = None,
             make_graph: Optional[Callable[[], Any]] = None) -> tuple[Any, int]:
    """(a CPU executor, page size) for the rules' FlashInfer plan of ``config`` on a declared H100
    (``backend``: asked for by name); every host-planned strategy constructs ``make()`` (in CUDA-graph
    mode, over a layout's buffers: ``make_graph()`` where given)."""
    from attnplan.adapter import AttentionExecutor
    from attnplan.adapter.calls import registry, strategy

    cfg = dict(config, attention_backend=backend) if backend else config
    answer = plan_for(AttentionConfig(**cfg), simulated_node("H100"), engine="flashinfer")
    assert answer.ok, answer.violations
    if backend is not None:
        assert answer.plan.decode.flashinfer_backend == backend
    for name, call in registry().items():
        if strategy(name).host_planned and call.runs != "ragged":     # MLA's ragged parts make their own per part
            monkeypatch.setattr(call, "construct", lambda b, pp, **graph_buffers: (make_graph or make)() if graph_buffers
                                else make())
    return AttentionExecutor(answer, device="cpu", backend="flashinfer", check=False), answer.plan.kv_cache.page_size


def graph(monkeypatch: Any, make: Callable[[], Any], config: dict, backend: Optional[str] = None, batch: int = 2,
          width: int = 16) -> tuple[Any, Any, int]:
    """(graph, its wrapper, page size): ``executor``'s, a ``DecodeGraph`` of ``batch`` requests over
    tables ``width`` pages wide."""
    from attnplan.adapter.graphs import DecodeGraph

    ex, page = executor(monkeypatch, make, config, backend)
    cache = ex.allocate_kv_cache(batch * width)
    g = DecodeGraph(ex, batch, width, cache)
    return g, g.wrapper, page


def page_indptr(seq: list[int], page: int) -> list[int]:
    """The KV page indptr of requests holding ``seq`` tokens."""
    out = [0]
    for s in seq:
        out.append(out[-1] + (s + page - 1) // page)
    return out


def advancing(start: list[int], n: int) -> list[list[int]]:
    """n decode steps: every request one token longer each step."""
    return [[s + i for s in start] for i in range(n)]


# -- stand-in wrappers whose scheduler leaves a schedule of its inputs ------------------------------------

def schedule_of(indptr, lens):
    """What the stand-in scheduler writes: a function of the page indptr and the KV lengths."""
    ptr = [int(x) for x in indptr]
    return [v * 3 + 1 for v in ptr] + [int(x) % 7 for x in lens]


def _scheduler(info):
    def plan(float_ws, int_ws, pinned, qo_indptr_host, indptr_host, kv_lens_host, *rest):
        sched = schedule_of(indptr_host, kv_lens_host)
        pw, iw = pinned.view(torch.int32), int_ws.view(torch.int32)    # int32 here, bytes where shared
        pw[:len(sched)] = torch.tensor(sched, dtype=torch.int32)
        iw[:len(sched)].copy_(pw[:len(sched)])     # FlashInfer: cudaMemcpyAsync from the pinned buffer
        return info(indptr_host)
    return plan


class PagedWrapper:
    """flashinfer.BatchDecodeWithPagedKVCacheWrapper's plan in CUDA-graph mode, reduced to what
    matters here: Python work, then the module's scheduler over the host arrays."""

    def __init__(self, *, stale=False, info=lambda ptr: [7, 8, 9], module=True, refuse_above=None):
        self._float_workspace_buffer = torch.zeros(64, dtype=torch.uint8)
        self._int_workspace_buffer = torch.zeros(256, dtype=torch.int32)
        self._pin_memory_int_workspace_buffer = torch.zeros(256, dtype=torch.int32)
        self._module = SimpleNamespace(plan=_scheduler(info)) if module else None
        self._stale = stale
        self._refuse_above = refuse_above
        self.whole_plans = 0

    def plan(self, indptr, indices, last_page_len, *args, seq_lens=None, **kwargs):
        if self._refuse_above is not None and int(seq_lens.max()) > self._refuse_above:
            raise ValueError("a length this wrapper refuses")       # e.g. one of FlashInfer's own checks
        self.whole_plans += 1
        indptr_host = indptr.to("cpu")                      # the caller's host tensor itself
        if self._stale:                                     # a wrapper that hands its scheduler a copy
            indptr_host = indptr_host.clone()
        qo_indptr_host = torch.arange(len(last_page_len) + 1, dtype=torch.int32)   # new each plan, constant
        if self._module is None:
            sched = schedule_of(indptr_host, seq_lens)
            self._int_workspace_buffer.view(torch.int32)[:len(sched)] = torch.tensor(sched, dtype=torch.int32)
            self._plan_info = None
            return
        self._cached_module = self._module
        self._plan_info = self._cached_module.plan(self._float_workspace_buffer, self._int_workspace_buffer,
                                                   self._pin_memory_int_workspace_buffer, qo_indptr_host,
                                                   indptr_host, seq_lens.to("cpu"), len(last_page_len))

    def run(self, *args, **kwargs):
        self.runs = getattr(self, "runs", 0) + 1


class _MlaProxy:
    """flashinfer/jit/attention/modules.py _BatchMLAModuleProxy: the scheduler is a method."""

    def plan_with_staged_workspace_bytes(self, float_ws, int_ws, pinned, qo, kv_indptr, kv_len, *rest):
        sched = schedule_of(kv_indptr, kv_len)
        pw, iw = pinned.view(torch.int32), int_ws.view(torch.int32)
        pw[:len(sched)] = torch.tensor(sched, dtype=torch.int32)
        iw[:len(sched)].copy_(pw[:len(sched)])
        return [1, 2, 3], 4 * len(sched) + int(kv_len[0])    # bytes staged: not plan info


class MlaWrapper:
    """mla/_batch_mla/_wrapper.py plan in CUDA-graph mode: a new backend object per plan, the
    previous one's int workspace reused, a new pinned scratch each time."""

    proxy = _MlaProxy()

    def __init__(self):
        self._float_workspace_buffer = torch.zeros(64, dtype=torch.uint8)
        self._planned_backend = None
        self.whole_plans = 0

    def plan(self, *, metadata, **kwargs):
        self.whole_plans += 1
        prev = self._planned_backend
        be = SimpleNamespace(_cached_module=self.proxy,
                             _int_workspace_buffer=torch.zeros(256, dtype=torch.int32) if prev is None
                             else prev._int_workspace_buffer,
                             _pin_memory_int_workspace_buffer=torch.zeros(256, dtype=torch.int32))
        be._plan_info = be._cached_module.plan_with_staged_workspace_bytes(
            self._float_workspace_buffer, be._int_workspace_buffer, be._pin_memory_int_workspace_buffer,
            metadata.qo_indptr.to("cpu"), metadata.kv_indptr.to("cpu"), metadata.kv_len_arr.to("cpu"), 16, 512, False)
        self._planned_backend = be

    def run(self, *args, **kwargs):
        self.runs = getattr(self, "runs", 0) + 1


def workspace(w, n=64):
    """The first ``n`` int32 of the workspace the wrapper's scheduler writes."""
    ws = w._planned_backend._int_workspace_buffer if isinstance(w, MlaWrapper) else w._int_workspace_buffer
    return ws.view(torch.int32)[:n].tolist()
