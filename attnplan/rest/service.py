"""What the routes share: the node, the metrics and the caches of rendered answers.

Answers are immutable functions of (config, node), so their JSON is rendered once and the bytes
kept: ``PlanAnswer.to_json`` plus ``json.dumps`` cost ~270 us, a cache hit ~5 us. A miss is
computed in a worker thread (``plan``, called through ``PLAN_THREADS``-bounded
``anyio.to_thread``): a cold rejection with suggestions took 230 ms, and on the event loop it
stalled every other request, ``/healthz`` included (issue 24). Few threads, because the work holds
the GIL: more would only take turns with the event loop.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from fastapi import HTTPException

from attnplan.policy import ANSWER_SCHEMA_VERSION
from attnplan.policy import (AttentionConfig, EngineSpec, NodeFacts, RuleSet, catalog, parse_engine, plan_for,
                             resolve_engine, simulated_node)
from attnplan.policy.answer import node_json
from attnplan.render import plan_json

from .metrics import Metrics
from .models import NodeSpec
from .readiness import NodeService

ANSWER_CACHE_SIZE = 256  # ~10-20 KiB of JSON each
PLAN_THREADS = 2  # worker threads computing uncached answers (the GIL makes more pointless)
# The version of the /v1/plan answer schema; preflight counts only answers that name the one
# it reads (attnplan.preflight.answers.ANSWER_SCHEMA_VERSION).


@dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    status: str
    prefill: str
    decode: str


def dumps(data: Any) -> bytes:
    # default=str as the CLI's --json does, so both print the same values.
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


def render_answer(config: AttentionConfig, node: NodeFacts, trace: bool, ruleset: RuleSet,
                  engine: Optional[EngineSpec] = None) -> Rendered:
    # Every argument is part of the answer cache's key: the engine layer changes the answer.
    answer = plan_for(config, node, ruleset=ruleset, engine=engine)
    prefill, decode = answer.backends()
    body = {"schema_version": ANSWER_SCHEMA_VERSION, **plan_json(answer, trace=trace)}
    return Rendered(dumps(body), answer.status, prefill or "none", decode or "none")


def declared_node(spec: NodeSpec) -> NodeFacts:
    return simulated_node(spec.device, capability=spec.capability, flashinfer_version=spec.flashinfer_version,
                          cubins=spec.cubins)


class AnswerCache:
    """A thread-safe LRU of rendered answers that can be *looked up* without computing (the
    event loop answers hits itself and sends only misses to a thread)."""

    def __init__(self, size: int):
        self.size = size
        self._data: "OrderedDict[Any, Rendered]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Optional[Rendered]:
        try:
            with self._lock:
                found = self._data.get(key)
                if found is not None:
                    self._data.move_to_end(key)
                return found
        except TypeError:  # a fact value that cannot be hashed: never cached
            return None

    def put(self, key: Any, value: Rendered) -> None:
        try:
            with self._lock:
                self._data[key] = value
                self._data.move_to_end(key)
                while len(self._data) > self.size:
                    self._data.popitem(last=False)
        except TypeError:
            pass


class Service:
    def __init__(self, *, metrics: Metrics, nodes: NodeService, examples_dir: Optional[Path],
                 ruleset: Optional[RuleSet], rules_error: Optional[str] = None):
        # A rule set that failed to load leaves the service up but not ready: every route that
        # would plan answers 503 with the reason (fail closed, never a 500 or an empty rule set).
        self.ruleset = ruleset
        self.rules_error = rules_error
        self.metrics = metrics
        self.nodes = nodes
        self.examples_dir = examples_dir
        self.presets: Any = None  # rest/presets.py Presets: the one registry every route resolves names in
        self.answers = AnswerCache(ANSWER_CACHE_SIZE)
        self._limiter: Any = None
        self.declared = functools.lru_cache(maxsize=128)(declared_node)
        self.node_body = functools.lru_cache(maxsize=8)(lambda node: dumps({"node": node_json(node),
                                                                             "fingerprint": node.fingerprint()}))
        self._once_lock = threading.Lock()
        self._once: dict[str, bytes] = {}

    def node_for(self, spec: Optional[NodeSpec]) -> NodeFacts:
        """The declared node of a request body, else this service's node (NotReady until probed)."""
        return self.declared(spec) if spec is not None else self.nodes.node()

    def rules(self) -> RuleSet:
        """The loaded rule set, or HTTP 503 naming the pack that failed."""
        if self.ruleset is None:
            raise HTTPException(503, detail=f"rule packs not loaded: {self.rules_error}", headers={"Retry-After": "30"})
        return self.ruleset

    def cached(self, config: AttentionConfig, node: NodeFacts, trace: bool, engine: Optional[EngineSpec] = None
               ) -> Optional[Rendered]:
        """The rendered answer when it is cached (counted as served), else None: cheap enough
        for the event loop."""
        rendered = self.answers.get((config, node, trace, self.rules(), engine))
        if rendered is not None:
            self.metrics.plans.labels(rendered.status, rendered.prefill, rendered.decode).inc()
        return rendered

    def plan(self, config: AttentionConfig, node: NodeFacts, trace: bool, engine: Optional[EngineSpec] = None) -> Rendered:
        """The answer, computed when not cached (call it off the event loop: ``plan_async``).
        Raises InvalidInputError (field ``engine``) for an engine the rules do not cover."""
        rs = self.rules()
        key = (config, node, trace, rs, engine)
        rendered = self.answers.get(key)
        if rendered is None:
            rendered = render_answer(config, node, trace, rs, engine)
            self.answers.put(key, rendered)
        self.metrics.plans.labels(rendered.status, rendered.prefill, rendered.decode).inc()
        return rendered

    async def plan_async(self, config: AttentionConfig, node: NodeFacts, trace: bool,
                         engine: Optional[EngineSpec] = None) -> Rendered:
        """A cache hit on the event loop; a miss in one of ``PLAN_THREADS`` worker threads."""
        rendered = self.cached(config, node, trace, engine)
        if rendered is not None:
            return rendered
        import anyio

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(PLAN_THREADS)
        return await anyio.to_thread.run_sync(self.plan, config, node, trace, engine, limiter=self._limiter)

    def once(self, key: str, build: Callable[[], bytes]) -> bytes:
        """Bytes that never change while the process runs (rules, matrix): built on first use."""
        body = self._once.get(key)
        if body is None:
            with self._once_lock:
                body = self._once.get(key)
                if body is None:
                    body = self._once[key] = build()
        return body

    @staticmethod
    def devices() -> list[dict[str, Any]]:
        return [{"name": d.name, "capability": d.capability, "memory_gib": d.memory_gib, "aliases": list(d.aliases)}
                for d in catalog().devices]

    def engine(self, engine: Optional[str]) -> EngineSpec:
        """A request's ``engine``, parsed once where it enters; InvalidInputError (field ``engine``)
        when the rules do not model it."""
        return parse_engine(engine, self.rules())

    def matrix_engine(self, engine: Optional[str]) -> Optional[EngineSpec]:
        """``engine`` pinned to its release (the matrix is not a node's: vllm alone is the newest
        modelled), so that the matrix cache's key stays bounded however a caller spells it; None for
        the default; InvalidInputError when the rules do not cover it."""
        if engine is None:
            return None
        rs = self.rules()
        return EngineSpec.of(resolve_engine(self.engine(engine), None, rs), rs)

    def rules_revision(self) -> str:
        return self.rules().revision
