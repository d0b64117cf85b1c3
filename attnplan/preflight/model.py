"""The preflight report (docs/contract.md, Errors and exit codes): schema_version, rules_revision, query, summary, nodes,
groups, warnings.

Verdicts are ``pass | fail | warn | error | skip``; a node that could not be probed is an
``error`` (or ``skip``), never a ``pass``. Per node a ``fingerprint`` (device + software facts,
``NodeFacts.fingerprint``) lets identical nodes collapse into one group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from attnplan.policy import (AttentionConfig, EngineRef, EngineSpec, Fallback, NodeFacts, PlanAnswer, Suggestion, Violation)
from attnplan.model import KVCacheGroupsPlan
from attnplan.policy.answer import Verdict as CommandVerdict

if TYPE_CHECKING:  # the request module imports the vLLM vocabulary; preflight reads it lazily
    from attnplan.request import ModelRequest


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
    # The engine layer to plan for (vllm, vllm==X, flashinfer), parsed where the query entered
    # (``parse_engine``); None: each node's default (its installed vllm, else the newest modelled),
    # and nothing is sent (an older node would 422).
    engine: Optional[EngineSpec] = None
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


# vLLM's own refusal at startup (config/model.py ModelConfig.verify_with_parallel_config: heads
# vs tensor parallelism, DCP limits): not a rule of the packs, named so a label can carry it.
STARTUP = "vllm.startup"


@dataclass(frozen=True)
class GroupAnswer:
    """One layer group of a node's answer: its verdict, and its rule answer when it is attention."""

    index: int
    kind: str
    layers: tuple[int, ...]
    label: str  # compact_layers, e.g. "5..59 every 6"
    status: Literal["ok", "rejected", "not_served"]
    answer: Optional[PlanAnswer]


@dataclass(frozen=True)
class ModelAnswer:
    """A node's answer for a model request, with the attributes the report reads off a ``PlanAnswer``
    (status, node, violations, suggestions, fallbacks, notes, rules_revision)."""

    status: Literal["ok", "rejected"]
    node: NodeFacts
    engine: EngineRef
    rules_revision: str
    model_type: str
    num_layers: int
    groups: tuple[GroupAnswer, ...]
    violations: tuple[Violation, ...] = ()  # every group's (tagged with its group) and the model's own
    suggestions: tuple[Suggestion, ...] = ()
    fallbacks: tuple[Fallback, ...] = ()
    notes: tuple[str, ...] = ()
    startup_error: Optional[str] = None
    kv_cache_groups: Optional[KVCacheGroupsPlan] = None
    plan: None = None  # no one plan serves every layer
    verdict: Optional[CommandVerdict] = None  # the command's verdict as the node gave it (policy/answer.py Verdict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def attention_groups(self) -> tuple[GroupAnswer, ...]:
        return tuple(g for g in self.groups if g.status != "not_served")

    def first_failure(self) -> Optional[tuple[str, str]]:
        """(where, rule) of the first failing group in layer order, else the model's own, else None."""
        if self.startup_error is not None:
            return "startup", STARTUP
        for g in self.groups:
            if g.status == "rejected" and g.answer is not None and g.answer.violations:
                return f"{g.kind} layers {g.label}", g.answer.violations[0].rule
        model_level = [v for v in self.violations if v.group is None]
        if self.status == "rejected" and model_level:
            return "model", model_level[0].rule
        return None


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
    outcome: Optional[str] = Field(None, description="the command's outcome (verdict.outcome): runs, fails-at-..., "
                                                     "wrong-output; pass exactly when it runs")
    engine_backend: Optional[str] = Field(None, description="the backend the engine itself selects (verdict.selected)")
    modelled: Optional[bool] = Field(None, description="the engine runs FlashInfer kernels attnplan plans")
    upgrade: Optional["UpgradeCell"] = Field(None, description="--upgrade-to: the same config on this node under that "
                                                               "release (preflight/upgrade_column.py)")


class UpgradeCell(Model):
    """What ``--upgrade-to RELEASE`` changes for one node x config: the node's own answer (its release) against
    the same config planned here on the node's facts under RELEASE (attnplan/upgrade.py)."""

    to: str = Field(description="the release upgraded to")
    before: Optional[str] = Field(None, description="the outcome today (the node's answer)")
    after: Optional[str] = Field(None, description="the outcome under the release")
    worse: bool = False
    changes: int = Field(0, description="how many changes (verdict, backends, kernels, page, query dtype, ...)")
    rules: list[str] = Field(default_factory=list, description="the rules behind the changes, each once")
    error: Optional[str] = Field(None, description="why the node cannot be compared (another engine, bad input)")


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

    details: list[dict[str, Any]] = Field(default_factory=list, description="violation entries (docs/contract.md, Errors and exit codes)")
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
    # "cubins ready" (issue 37), on 10.x nodes: on-disk, download (the artifactory answers) or missing
    # (preflight/labels.py trtllm_cubins_state, from the node's facts)
    trtllm_cubins: Optional[Literal["on-disk", "download", "missing"]] = None
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
