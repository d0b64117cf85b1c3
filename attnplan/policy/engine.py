"""Evaluate the rules over (config, node) for one engine layer and select backends (SPEC §4, §10).

Pure functions: the node's facts come in as data, so every rule runs without a GPU. ``evaluate``
never suggests; ``plan_for`` (api.py) composes it with ``suggestions_for`` (suggest.py).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Optional

from .answer import Fallback, PlanAnswer, TraceEntry, Violation
from .candidates import CandidateResult, page_domain, run_candidate, trace_entry, violation
from .config import AttentionConfig
from .engines import active_checks, engine_resolution, resolve_engine, selection_for
from .facts import NodeFacts
from .facts_catalog import PAGE_SIZE, base_context, display
from .plan import build_plan
from .rulepack import RuleSet, load_ruleset

PHASES = ("prefill", "decode")


def _packs_in(packs_dir: Path) -> list[Path]:
    """The packs of a directory; a missing, empty or oversized one is an error naming it (fail closed)."""
    from .rulepack import pack_paths_in

    return pack_paths_in(packs_dir)


@functools.lru_cache(maxsize=8)
def _load(packs_dir: str, backends_file: str) -> RuleSet:
    return load_ruleset(_packs_in(Path(packs_dir)), Path(backends_file))


def default_ruleset() -> RuleSet:
    """The rules shipped in ``rules/`` (loaded once)."""
    from attnplan.rules import BACKENDS_FILE, PACKS_DIR

    return _load(str(PACKS_DIR), str(BACKENDS_FILE))


def load_rules(packs_dir: str | Path, backends_file: str | Path | None = None) -> RuleSet:
    """Load rule packs from another directory (all or nothing; read afresh on every call)."""
    from attnplan.rules import BACKENDS_FILE

    return load_ruleset(_packs_in(Path(packs_dir)), Path(backends_file or BACKENDS_FILE))


def candidates_for(ruleset: RuleSet, config: AttentionConfig, cap_major: Optional[int], phase: str,
                   selection: dict | None = None) -> list[str]:
    """The backends tried for a phase, in order (a forced backend alone)."""
    kind = "mla" if config.is_mla else "standard"
    if config.attention_backend != "auto":
        return [ruleset.force[kind][config.attention_backend][phase]]
    for row in (selection or ruleset.selection)[kind][phase]:
        if row.capability_major is None or row.capability_major == cap_major:
            return list(row.candidates)
    return []


def evaluate(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet | None = None, *,
             trace: bool = True, suggest: bool = False, engine: Optional[str] = None) -> PlanAnswer:
    """Every applicable rule over (config, node): the plan, or a rejection with every violation.

    ``engine``: None/"vllm" (the node's vllm, else the newest modelled), "vllm==X" or "flashinfer".
    Never suggests (``suggest`` is accepted for old callers and ignored): ``plan_for`` adds suggestions.
    """
    del suggest
    rs = ruleset or default_ruleset()
    ref = resolve_engine(engine, node, rs)
    checks = active_checks(rs, ref, node.flashinfer_version.value)
    # An engine with its own backends (SGLang) resolves its flags first: the config it runs, its pick.
    res = engine_resolution(rs, ref, config, node, engine)
    config = res.config if res is not None else config
    extra = res.answer_fields() if res is not None else {}
    base = base_context(config, node)
    violations: list[Violation] = list(res.violations) if res is not None else []
    entries: list[TraceEntry] = []
    notes: list[str] = list(res.notes) if res is not None else []

    for check in checks:
        if check.scope != "pair":
            continue
        if check.when is not None and not check.when.test(base):
            if trace:
                entries.append(trace_entry(check, base, "both", None, "skip"))
            continue
        passed = check.require.test(base)
        if not passed:
            violations.append(violation(check, base, "both", None))
        if trace:
            entries.append(trace_entry(check, base, "both", None, "pass" if passed else "fail"))

    pages = (config.page_size,) if config.page_size is not None else page_domain(rs)
    selection = res.selection if res is not None else selection_for(rs, ref)
    results: dict[str, list[CandidateResult]] = {}
    for phase in PHASES:
        results[phase] = [run_candidate(checks, base, phase, b, pages, trace)
                          for b in candidates_for(rs, config, base["node.capability_major"], phase, selection)]
        for r in results[phase]:
            entries.extend(r.trace)

    chosen = None if violations else _choose(results)
    if chosen is None:
        for phase in PHASES:
            if not any(r.ok for r in results[phase]):
                for r in results[phase]:
                    violations.extend(r.violations)
                if not results[phase]:
                    notes.append(f"{phase}: no backend candidate for this device")
        if not violations:
            # Each phase has a backend, but no page size suits both of them.
            p0, d0 = next(r for r in results["prefill"] if r.ok), next(r for r in results["decode"] if r.ok)
            violations.append(Violation(
                rule="page-size", phase="both", backend=None, fact=PAGE_SIZE, observed=display(PAGE_SIZE, config.page_size),
                required=f"a size both {p0.backend} {p0.pages} and {d0.backend} {d0.pages} take",
                message=f"no page size suits both prefill {p0.backend} and decode {d0.backend} (one KV cache)"))
        return PlanAnswer(status="rejected", node=node, config=config, plan=None, engine=ref,
                          violations=tuple(violations), notes=tuple(notes), trace=tuple(entries),
                          rules_revision=rs.revision, **extra)

    p, d, common = chosen
    page = config.page_size if config.page_size is not None else common[0]
    fallbacks: list[Fallback] = []
    for phase, pick in (("prefill", p), ("decode", d)):
        for r in results[phase]:
            if r is pick:
                break
            why = "; ".join(f"[{v.rule}] {v.message}" for v in r.violations) or "no page size shared with the other phase"
            notes.append(f"{phase}: {r.backend} skipped ({why}); using {pick.backend}")
            fallbacks.append(Fallback(phase=phase, skipped=r.backend,  # type: ignore[arg-type]
                                      rules=tuple(dict.fromkeys(v.rule for v in r.violations)) or ("page-size",),
                                      used=pick.backend))
    if config.page_size is None:
        notes.append(f"page_size {page} chosen: the smallest that prefill {p.backend} and decode {d.backend} both take")
    plan = build_plan(config, p.backend, d.backend, page, common, rs, capability=base["node.capability"],
                      batch_invariant=bool(base["config.batch_invariant"]))
    return PlanAnswer(status="ok", node=node, config=config, plan=plan, notes=tuple(notes), engine=ref,
                      fallbacks=tuple(fallbacks), trace=tuple(entries), rules_revision=rs.revision, **extra)


def _choose(results: dict[str, list[CandidateResult]]) -> Any:
    for p in results["prefill"]:
        if not p.ok:
            continue
        for d in results["decode"]:
            if d.ok:
                common = tuple(sorted(set(p.pages) & set(d.pages)))
                if common:
                    return p, d, common
    return None
