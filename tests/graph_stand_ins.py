"""A ``DecodeGraph`` on the CPU over the real executor, backend and strategies, with FlashInfer's
wrappers replaced by a test's stand-in (FlashInfer's need a GPU to allocate), and the page
arithmetic the graph tests check against (tests/test_graph_plan_skip.py,
tests/test_graph_scheduler_replay.py)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from attnplan.policy import AttentionConfig, plan_for, simulated_node


def graph(monkeypatch: Any, make: Callable[[], Any], config: dict, backend: Optional[str] = None, batch: int = 2,
          width: int = 16) -> tuple[Any, Any, int]:
    """(graph, its wrapper, page size) for the rules' FlashInfer plan of ``config`` on a declared
    H100 (``backend``: asked for by name); every host-planned strategy constructs ``make()``."""
    from attnplan.adapter import AttentionExecutor
    from attnplan.adapter.calls import registry, strategy
    from attnplan.adapter.graphs import DecodeGraph

    cfg = dict(config, attention_backend=backend) if backend else config
    answer = plan_for(AttentionConfig(**cfg), simulated_node("H100"), engine="flashinfer")
    assert answer.ok, answer.violations
    if backend is not None:
        assert answer.plan.decode.flashinfer_backend == backend
    for name, call in registry().items():
        if strategy(name).host_planned:
            monkeypatch.setattr(call, "construct", lambda b, pp, **graph_buffers: make())
    ex = AttentionExecutor(answer, device="cpu", backend="flashinfer", check=False)
    cache = ex.allocate_kv_cache(batch * width)
    g = DecodeGraph(ex, batch, width, cache)
    return g, g.wrapper, answer.plan.kv_cache.page_size


def page_indptr(seq: list[int], page: int) -> list[int]:
    """The KV page indptr of requests holding ``seq`` tokens."""
    out = [0]
    for s in seq:
        out.append(out[-1] + (s + page - 1) // page)
    return out


def advancing(start: list[int], n: int) -> list[list[int]]:
    """n decode steps: every request one token longer each step."""
    return [[s + i for s in start] for i in range(n)]
