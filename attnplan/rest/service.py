"""What the routes share: the node, the metrics and the caches of rendered answers.

Answers are immutable functions of (config, node), so their JSON is rendered once and the bytes
kept: ``PlanAnswer.to_json`` plus ``json.dumps`` cost ~270 us, a cache hit ~5 us.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from fastapi import HTTPException

from attnplan.policy import ANSWER_SCHEMA_VERSION
from attnplan.policy import AttentionConfig, NodeFacts, RuleSet, catalog, plan_for, resolve_engine, simulated_node
from attnplan.policy import node_json

from .metrics import Metrics
from .models import NodeSpec
from .readiness import NodeService

ANSWER_CACHE_SIZE = 256  # ~10-20 KiB of JSON each
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
                  engine: Optional[str] = None) -> Rendered:
    # Every argument is part of the answer cache's key: the engine layer changes the answer.
    answer = plan_for(config, node, ruleset=ruleset, engine=engine)
    prefill, decode = answer.backends()
    body = {"schema_version": ANSWER_SCHEMA_VERSION, **answer.to_json(trace=trace)}
    return Rendered(dumps(body), answer.status, prefill or "none", decode or "none")


def declared_node(spec: NodeSpec) -> NodeFacts:
    return simulated_node(spec.device, capability=spec.capability, flashinfer_version=spec.flashinfer_version,
                          cubins=spec.cubins)


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
        self.answer = functools.lru_cache(maxsize=ANSWER_CACHE_SIZE)(render_answer)
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

    def plan(self, config: AttentionConfig, node: NodeFacts, trace: bool, engine: Optional[str] = None) -> Rendered:
        """Raises InvalidInputError (field ``engine``) for an engine the rules do not cover."""
        rs = self.rules()
        try:
            rendered = self.answer(config, node, trace, rs, engine)
        except TypeError:  # a fact value that cannot be hashed: render without the cache
            rendered = render_answer(config, node, trace, rs, engine)
        self.metrics.plans.labels(rendered.status, rendered.prefill, rendered.decode).inc()
        return rendered

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

    def matrix_engine(self, engine: Optional[str]) -> Optional[str]:
        """``engine`` in one canonical spelling (the matrix cache's key stays bounded however a
        caller spells it), or None for the default; InvalidInputError when the rules do not cover it."""
        if engine is None:
            return None
        ref = resolve_engine(engine, simulated_node("H100"), self.rules())
        return ref.name if ref.name == "flashinfer" else f"{ref.name}=={ref.version}"

    def rules_revision(self) -> str:
        return self.rules().revision
