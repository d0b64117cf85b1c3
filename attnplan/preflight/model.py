"""The preflight report (SPEC §9): schema_version, rules_revision, query, summary, nodes,
groups, warnings.

Verdicts are ``pass | fail | warn | error | skip``; a node that could not be probed is an
``error`` (or ``skip``), never a ``pass``. Per node a ``fingerprint`` (device + software facts,
``NodeFacts.fingerprint``) lets identical nodes collapse into one group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from attnplan.policy import AttentionConfig, PlanAnswer

if TYPE_CHECKING:  # the request module imports the vLLM vocabulary; preflight reads it lazily
    from attnplan.vllm.request import ModelRequest

    from .model_answers import ModelAnswer

SCHEMA_VERSION = "1"

Verdict = Literal["pass", "fail", "warn", "error", "skip"]
NodeStatus = Literal["ok", "rejected", "unreachable", "error", "no-gpu", "skipped"]
SourceKind = Literal["hosts", "ray", "simulate"]
OutcomeKind = Literal["answered", "unreachable", "error", "skipped"]

# Worst first: a node's verdict is the worst of its cells'.
VERDICT_ORDER: dict[str, int] = {"error": 0, "fail": 1, "skip": 2, "warn": 3, "pass": 4}


@dataclass
class NamedConfig:
    """One attention config of the query, or a whole model (``request``), and the name the report
    shows for it."""

    name: str
    config: Optional[AttentionConfig]
    # The engine layer to plan for (vllm, vllm==X, flashinfer); None: each node's default (its
    # installed vllm, else the newest modelled), and nothing is sent (an older node would 422).
    engine: Optional[str] = None
    # A whole model: every layer group planned per rank by each node (config is then None).
    request: Optional["ModelRequest"] = None

    def describe(self) -> str:
        """A short one-line description (the fields that differ from the defaults)."""
        if self.request is not None:
            r = self.request
            if isinstance(r.model, dict):
                text = r.model.get("text_config") if isinstance(r.model.get("text_config"), dict) else r.model
                n = text.get("num_hidden_layers", "?")
                parts = [f"model {r.model.get('model_type') or '?'}, {n} layers (config.json sha256:"
                         f"{r.model_label().rsplit(':', 1)[-1]})"]
            else:
                parts = [f"model {r.model_label()}"]
            parts += [f"{k}={v}" for k, v in r.echo().items() if k not in ("model", "engine")]
            return " ".join(parts)
        assert self.config is not None
        return " ".join(f"{k}={v}" for k, v in self.config.model_dump(exclude_defaults=True).items())


@dataclass
class Outcome:
    """What a source learned about one node: the node's answers (one per config, in query
    order) or why there are none. Sources produce these; ``report.build_report`` judges them."""

    name: str
    address: Optional[str] = None
    kind: OutcomeKind = "answered"
    reason: Optional[str] = None
    answers: Optional[list[Union[PlanAnswer, "ModelAnswer"]]] = None
    elapsed_ms: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryConfig(Model):
    name: str
    config: Optional[dict[str, Any]] = Field(None, description="the normalized attention config (null for a model)")
    request: Optional[dict[str, Any]] = Field(None, description="a whole model: the request each node planned "
                                                                "(an inline config.json by its sha256)")
    description: str = Field("", description="the fields that differ from the defaults, one line")
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


class LayerGroupCell(Model):
    """One layer group of a model on one node."""

    index: int = Field(description="index in the answer's layer_groups")
    kind: str
    layers: str = Field(description="the layers, compact (e.g. '5..59 every 6')")
    count: int
    status: Literal["ok", "rejected", "not_served"]
    prefill: Optional[str] = None
    decode: Optional[str] = None
    violations: list[str] = Field(default_factory=list)


class Cell(Model):
    """One node x one config (or model: every layer group in ``layer_groups``)."""

    config: int = Field(description="index into query.configs")
    verdict: Verdict
    status: Optional[Literal["ok", "rejected"]] = Field(None, description="the node's answer, if any")
    prefill: Optional[str] = None
    decode: Optional[str] = None
    kv_layout: Optional[str] = None
    page_size: Optional[int] = None
    kv_view_dtype: Optional[str] = None
    violations: list[str] = Field(default_factory=list, description="violated rule ids, each once")
    reason: Optional[str] = None
    layer_groups: list[LayerGroupCell] = Field(default_factory=list, description="a model: each layer group's verdict")
    first_failing: Optional[str] = Field(None, description="a rejected model: the first failing group's rule")


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
