"""Why a plan is what it is: every backend of the model's kind, per phase, against every rule."""

from __future__ import annotations

from dataclasses import dataclass

from .answer import PlanAnswer, TraceEntry
from .config import AttentionConfig
from .engine import PHASES, _eval_candidate, default_ruleset, evaluate, page_domain
from .facts import NodeFacts
from .facts_catalog import base_context
from .rulepack import RuleSet


@dataclass(frozen=True)
class Explanation:
    answer: PlanAnswer
    columns: tuple[tuple[str, str], ...]          # (phase, backend), plus ("both", "-") for pair rules
    rules: tuple[str, ...]
    cells: dict[tuple[str, str, str], TraceEntry]  # (rule, phase, backend) -> the decisive entry


def backends_for(config: AttentionConfig, phase: str, rs: RuleSet) -> list[str]:
    kinds = ("mla", "any") if config.is_mla else ("standard", "any")
    out = [n for n, b in rs.backends.items() if b.kind in kinds and phase in b.phases]
    # MLA decode never runs a kind-"any" (ragged prefill) backend.
    if config.is_mla and phase == "decode":
        out = [n for n in out if rs.backends[n].kind == "mla"]
    return out


def explain(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet | None = None) -> Explanation:
    rs = ruleset or default_ruleset()
    answer = evaluate(config, node, rs)
    base = base_context(config, node)
    pages = (config.page_size,) if config.page_size is not None else page_domain(rs)
    cells: dict[tuple[str, str, str], TraceEntry] = {}
    columns: list[tuple[str, str]] = [("both", "-")]
    for e in answer.trace:
        if e.phase == "both":
            _put(cells, (e.rule, "both", "-"), e)
    for phase in PHASES:
        for b in backends_for(config, phase, rs):
            columns.append((phase, b))
            for e in _eval_candidate(rs, base, phase, b, pages, True).trace:
                _put(cells, (e.rule, phase, b), e)
    order = [r.id for r in rs.rules]
    return Explanation(answer, tuple(columns), tuple(order), cells)


_RANK = {"fail": 2, "pass": 1, "skip": 0}


def _put(cells: dict, key: tuple, entry: TraceEntry) -> None:
    # A rule with several checks shows its worst verdict.
    old = cells.get(key)
    if old is None or _RANK[entry.verdict] > _RANK[old.verdict]:
        cells[key] = entry
