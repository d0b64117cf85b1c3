"""The preflight report (SPEC §9): schema_version, rules_revision, query, summary, nodes,
groups, warnings.

Verdicts are ``pass | fail | warn | error | skip``; a node that could not be probed is an
``error`` (or ``skip``), never a ``pass``. Per node a ``fingerprint`` (device + software facts,
``NodeFacts.fingerprint``) lets identical nodes collapse into one group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from attnplan.policy import AttentionConfig, PlanAnswer

SCHEMA_VERSION = "1"

Verdict = Literal["pass", "fail", "warn", "error", "skip"]
NodeStatus = Literal["ok", "rejected", "unreachable", "error", "no-gpu", "skipped"]
SourceKind = Literal["hosts", "ray", "simulate"]
OutcomeKind = Literal["answered", "unreachable", "error", "skipped"]

# Worst first: a node's verdict is the worst of its cells'.
VERDICT_ORDER: dict[str, int] = {"error": 0, "fail": 1, "skip": 2, "warn": 3, "pass": 4}


@dataclass
class NamedConfig:
    """One attention config of the query and the name the report shows for it."""

    name: str
    config: AttentionConfig
    # The engine layer to plan for (vllm, vllm==X, flashinfer); None: each node's default (its
    # installed vllm, else the newest modelled), and nothing is sent (an older node would 422).
    engine: Optional[str] = None


@dataclass
class Outcome:
    """What a source learned about one node: the node's answers (one per config, in query
    order) or why there are none. Sources produce these; ``report.build_report`` judges them."""

    name: str
    address: Optional[str] = None
    kind: OutcomeKind = "answered"
    reason: Optional[str] = None
    answers: Optional[list[PlanAnswer]] = None
    elapsed_ms: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryConfig(Model):
    name: str
    config: dict[str, Any] = Field(description="the normalized attention config")
    engine: Optional[str] = Field(None, description="the engine layer asked for; null: each node's default "
                                                    "(its installed vllm, else the newest modelled)")


class Query(Model):
    source: SourceKind
    targets: list[str] = Field(description="hosts, the Ray address, or the simulate spec")
    configs: list[QueryConfig]
    options: dict[str, Any] = Field(default_factory=dict, description="concurrency, timeout_s, retries, ...")


class Summary(Model):
    nodes: int
    ok: int
    rejected: int
    unreachable: int
    error: int
    no_gpu: int
    skipped: int
    heterogeneous: bool
    interrupted: bool = False
    exit_code: int
    elapsed_s: float
    line: str = Field(description="the one-line summary the text report ends with")


class Cell(Model):
    """One node x one config."""

    config: int = Field(description="index into query.configs")
    verdict: Verdict
    status: Optional[Literal["ok", "rejected"]] = Field(None, description="the node's answer, if any")
    prefill: Optional[str] = None
    decode: Optional[str] = None
    kv_layout: Optional[str] = None
    page_size: Optional[int] = None
    kv_dtype: Optional[str] = None
    violations: list[str] = Field(default_factory=list, description="violated rule ids, each once")
    reason: Optional[str] = None


class NodeRow(Model):
    name: str
    address: Optional[str] = None
    status: NodeStatus
    verdict: Verdict
    reason: Optional[str] = None
    device: Optional[str] = None
    capability: Optional[str] = None
    gpu_count: Optional[int] = None
    fingerprint: Optional[str] = None
    rules_revision: Optional[str] = Field(None, description="the revision the node planned with")
    group: int = 0
    elapsed_ms: Optional[float] = None
    extra: dict[str, Any] = Field(default_factory=dict)
    results: list[Cell] = Field(default_factory=list)


class GroupCell(Cell):
    """A group's result for one config, with the full violations and verified suggestions."""

    details: list[dict[str, Any]] = Field(default_factory=list, description="violation entries (SPEC §9)")
    suggestions: list[dict[str, Any]] = Field(default_factory=list)
    fallbacks: list[dict[str, Any]] = Field(default_factory=list,
                                            description="backends skipped for a lower-priority one: phase, skipped, rules, used")
    notes: list[str] = Field(default_factory=list)


class Group(Model):
    id: int
    count: int
    members: list[str]
    status: NodeStatus
    verdict: Verdict
    reason: Optional[str] = None
    device: Optional[str] = None
    capability: Optional[str] = None
    fingerprint: Optional[str] = None
    facts: Optional[dict[str, Any]] = Field(None, description="the group's node facts: value and source")
    results: list[GroupCell] = Field(default_factory=list)


class Warning(Model):  # noqa: A001 - the report's own word
    kind: Literal["heterogeneous", "mixed", "rules-revision", "interrupted"]
    config: Optional[int] = None
    field: Optional[str] = None
    values: dict[str, int] = Field(default_factory=dict, description="value -> number of nodes")
    message: str


class PreflightReport(Model):
    schema_version: str = SCHEMA_VERSION
    rules_revision: str
    query: Query
    summary: Summary
    nodes: list[NodeRow]
    groups: list[Group]
    warnings: list[Warning]
    generated_at: str

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
