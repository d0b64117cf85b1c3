"""Why a plan is what it is: every backend of the model's kind, per phase, against every rule."""

from __future__ import annotations

from dataclasses import dataclass

from .answer import PlanAnswer, TraceEntry
from .candidates import evaluate_candidate
from .config import AttentionConfig
from .engine import PHASES, default_ruleset, evaluate
from .engines import EngineLike, parse_engine
from .facts import NodeFacts
from .rulepack import RuleSet


@dataclass(frozen=True)
class Explanation:
    answer: PlanAnswer
    columns: tuple[tuple[str, str], ...]          # (phase, backend), plus ("both", "-") for pair rules
    rules: tuple[str, ...]
    cells: dict[tuple[str, str, str], TraceEntry]  # (rule, phase, backend) -> the decisive entry
    layers: dict[str, str] = None  # type: ignore[assignment]  # rule -> kernel | engine (both layers shown)


def backends_for(config: AttentionConfig, phase: str, rs: RuleSet) -> list[str]:
    kinds = ("mla", "any") if config.is_mla else ("standard", "any")
    out = [n for n, b in rs.backends.items() if b.kind in kinds and phase in b.phases]
    # MLA decode never runs a kind-"any" (ragged prefill) backend.
    if config.is_mla and phase == "decode":
        out = [n for n in out if rs.backends[n].kind == "mla"]
    return out


def explain(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet | None = None, *,
            engine: EngineLike = None) -> Explanation:
    """Every backend of the model's kind, per phase, against every rule of the engine layer (kernel and
    engine rules alike, each marked with its layer)."""
    rs = ruleset or default_ruleset()
    engine = parse_engine(engine, rs)
    answer = evaluate(config, node, rs, engine=engine)
    cells: dict[tuple[str, str, str], TraceEntry] = {}
    columns: list[tuple[str, str]] = [("both", "-")]
    for e in answer.trace:
        if e.phase == "both":
            _put(cells, (e.rule, "both", "-"), e)
    for phase in PHASES:
        for b in backends_for(config, phase, rs):
            columns.append((phase, b))
            for e in evaluate_candidate(config, node, phase, b, ruleset=rs, engine=engine, trace=True).trace:
                _put(cells, (e.rule, phase, b), e)
    order = [r.id for r in rs.rules]
    return Explanation(answer, tuple(columns), tuple(order), cells, {r.id: r.layer for r in rs.rules})


_RANK = {"fail": 2, "pass": 1, "skip": 0}


def _put(cells: dict, key: tuple, entry: TraceEntry) -> None:
    # A rule with several checks shows its worst verdict.
    old = cells.get(key)
    if old is None or _RANK[entry.verdict] > _RANK[old.verdict]:
        cells[key] = entry
