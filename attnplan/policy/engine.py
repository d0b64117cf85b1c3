"""Evaluate the rules over (config, node), select backends (SPEC §4), explain and suggest.

Pure functions: the node's facts come in as data, so every rule runs without a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional


from .answer import Fallback, PlanAnswer, Suggestion, TraceEntry, Violation
from .conditions import Failure, Leaf
from .config import KV_CACHE_DTYPES, AttentionConfig
from .facts import Fact, NodeFacts
from .facts_catalog import PAGE_SIZE, base_context, display
from .plan import build_plan
from .rulepack import Check, RuleSet, load_ruleset
from .version import SUPPORTED_FLASHINFER

PHASES = ("prefill", "decode")


def _packs_in(packs_dir: Path) -> list[Path]:
    """The packs of a directory; a missing or empty one is an error naming it (fail closed)."""
    from attnplan.rules import pack_files

    from .errors import RulePackError

    if not packs_dir.is_dir():
        raise RulePackError(str(packs_dir), "no such rule pack directory")
    found = pack_files(packs_dir)
    if not found:
        raise RulePackError(str(packs_dir), "no rule packs (*.yaml) in this directory: refusing to plan with no rules")
    return found


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


# -- one check -----------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[a-z_]+)?)\}")


def _message(check: Check, ctx: dict[str, Any], failures: list[Failure]) -> str:
    if check.message:
        return _PLACEHOLDER.sub(lambda m: display(m.group(1), ctx.get(m.group(1))), check.message)
    return "; ".join(f"{f.fact} is {display(f.fact, f.observed) if not isinstance(f.observed, dict) else f.observed}, "
                     f"needs {f.required}" for f in failures) or check.rule.title


def _violation(check: Check, ctx: dict[str, Any], phase: str, backend: Optional[str]) -> Violation:
    failures = check.require.failures(ctx)
    first = failures[0] if failures else None
    observed: Any = None
    if first is not None:
        observed = first.observed if isinstance(first.observed, dict) else display(first.fact, first.observed)
    return Violation(
        rule=check.rule.id, phase=phase, backend=backend,  # type: ignore[arg-type]
        fact=first.fact if first else None, observed=observed,
        required=" and ".join(dict.fromkeys(f.required for f in failures)) or check.require.describe(),
        message=_message(check, ctx, failures), fix=check.rule.fix,
    )


@functools.lru_cache(maxsize=None)
def _check_reads(check: Check) -> tuple[str, ...]:
    return tuple(sorted(set(check.require.reads) | (set(check.when.reads) if check.when else set())))


def _inputs(check: Check, ctx: dict[str, Any]) -> dict[str, Any]:
    # Interned display strings: memoised answers share them instead of holding copies.
    return {f: sys.intern(display(f, ctx.get(f))) for f in _check_reads(check)}


def _trace(check: Check, ctx: dict[str, Any], phase: str, backend: Optional[str], verdict: str) -> TraceEntry:
    return TraceEntry(rule=check.rule.id, check=check.index, phase=phase, backend=backend,  # type: ignore[arg-type]
                      verdict=verdict, inputs=_inputs(check, ctx), required=check.require.describe())


def _reads_page(check: Check) -> bool:
    return PAGE_SIZE in check.require.reads or (check.when is not None and PAGE_SIZE in check.when.reads)


def page_domain(ruleset: RuleSet) -> tuple[int, ...]:
    """Every page size a rule names, ascending: the plan picks the smallest valid one (derived, not listed)."""
    return _page_domain(ruleset)


@functools.lru_cache(maxsize=8)
def _page_domain(ruleset: RuleSet) -> tuple[int, ...]:
    values: set[int] = set()

    def walk(p: Any) -> None:
        if isinstance(p, Leaf):
            if p.fact == PAGE_SIZE and p.op in ("in", "eq"):
                values.update(v for v in (p.operand if isinstance(p.operand, tuple) else (p.operand,)) if isinstance(v, int))
        for child in getattr(p, "parts", ()):
            walk(child)
        if hasattr(p, "part"):
            walk(p.part)

    for c in ruleset.checks:
        walk(c.require)
    return tuple(sorted(values))


# -- candidates ----------------------------------------------------------------------------
@dataclass
class CandidateResult:
    phase: str
    backend: str
    violations: list[Violation] = field(default_factory=list)
    pages: tuple[int, ...] = ()
    trace: list[TraceEntry] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and bool(self.pages)


def _eval_candidate(ruleset: RuleSet, base: dict[str, Any], phase: str, backend: str,
                    pages: tuple[int, ...], with_trace: bool) -> CandidateResult:
    ctx = dict(base)
    ctx["phase"], ctx["backend"] = phase, backend
    res = CandidateResult(phase, backend)
    page_checks: list[Check] = []
    for check in ruleset.checks:
        if check.scope != "candidate" or not check.applies_to(backend, phase):
            continue
        if _reads_page(check):
            page_checks.append(check)
            continue
        if check.when is not None and not check.when.test(ctx):
            if with_trace:
                res.trace.append(_trace(check, ctx, phase, backend, "skip"))
            continue
        passed = check.require.test(ctx)
        if not passed:
            res.violations.append(_violation(check, ctx, phase, backend))
        if with_trace:
            res.trace.append(_trace(check, ctx, phase, backend, "pass" if passed else "fail"))
    # Page-reading checks run once per possible page size; the candidate keeps the sizes that pass.
    ok_pages = []
    for p in pages:
        ctx[PAGE_SIZE] = p
        if all(c.require.test(ctx) for c in page_checks if c.when is None or c.when.test(ctx)):
            ok_pages.append(p)
    res.pages = tuple(ok_pages)
    fixed = base[PAGE_SIZE]
    ctx[PAGE_SIZE] = fixed
    for check in page_checks:
        applicable = check.when is None or check.when.test(ctx)
        if not applicable:
            if with_trace:
                res.trace.append(_trace(check, ctx, phase, backend, "skip"))
            continue
        if fixed is None:
            passed = bool(ok_pages)
        else:
            passed = check.require.test(ctx)
        if not passed:
            res.violations.append(_violation(check, ctx, phase, backend))
        if with_trace:
            entry = _trace(check, ctx, phase, backend, "pass" if passed else "fail")
            if fixed is None:
                entry = dataclasses.replace(entry, inputs={**entry.inputs, PAGE_SIZE: f"unset (valid: {', '.join(map(str, ok_pages)) or 'none'})"})
            res.trace.append(entry)
    return res


def _candidates(ruleset: RuleSet, config: AttentionConfig, cap_major: Optional[int], phase: str) -> list[str]:
    kind = "mla" if config.is_mla else "standard"
    if config.attention_backend != "auto":
        return [ruleset.force[kind][config.attention_backend][phase]]
    for row in ruleset.selection[kind][phase]:
        if row.capability_major is None or row.capability_major == cap_major:
            return list(row.candidates)
    return []


# -- evaluation ----------------------------------------------------------------------------
def evaluate(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet | None = None, *,
             trace: bool = True, suggest: bool = True) -> PlanAnswer:
    """Every rule over (config, node): the plan, or a rejection with every violation."""
    rs = ruleset or default_ruleset()
    base = base_context(config, node)
    violations: list[Violation] = []
    entries: list[TraceEntry] = []
    notes: list[str] = []

    for check in rs.checks:
        if check.scope != "pair":
            continue
        if check.when is not None and not check.when.test(base):
            if trace:
                entries.append(_trace(check, base, "both", None, "skip"))
            continue
        passed = check.require.test(base)
        if not passed:
            violations.append(_violation(check, base, "both", None))
        if trace:
            entries.append(_trace(check, base, "both", None, "pass" if passed else "fail"))

    pages = (config.page_size,) if config.page_size is not None else page_domain(rs)
    results: dict[str, list[CandidateResult]] = {}
    for phase in PHASES:
        results[phase] = [_eval_candidate(rs, base, phase, b, pages, trace)
                          for b in _candidates(rs, config, base["node.capability_major"], phase)]
        for r in results[phase]:
            entries.extend(r.trace)

    chosen: Optional[tuple[CandidateResult, CandidateResult, tuple[int, ...]]] = None
    if not violations:
        for p in results["prefill"]:
            if not p.ok:
                continue
            for d in results["decode"]:
                if d.ok:
                    common = tuple(sorted(set(p.pages) & set(d.pages)))
                    if common:
                        chosen = (p, d, common)
                        break
            if chosen:
                break

    if chosen is None:
        for phase in PHASES:
            phase_ok = [r for r in results[phase] if r.ok]
            if not phase_ok:
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
        answer = PlanAnswer(status="rejected", node=node, config=config, plan=None,
                            violations=tuple(violations), notes=tuple(notes), trace=tuple(entries),
                            rules_revision=rs.revision)
        if suggest:
            answer = answer.model_copy(update={"suggestions": tuple(suggestions_for(config, node, rs))})
        return answer

    p, d, common = chosen
    page = config.page_size if config.page_size is not None else common[0]
    fallbacks: list[Fallback] = []
    for phase, pick in (("prefill", p), ("decode", d)):
        for r in results[phase]:
            if r is pick:
                break
            why = "; ".join(f"[{v.rule}] {v.message}" for v in r.violations) or "no page size shared with the other phase"
            notes.append(f"{phase}: {r.backend} skipped ({why}); using {pick.backend}")
            fallbacks.append(Fallback(phase=phase, skipped=r.backend, rules=tuple(dict.fromkeys(v.rule for v in r.violations))
                                      or ("page-size",), used=pick.backend))
    if config.page_size is None:
        notes.append(f"page_size {page} chosen: the smallest that prefill {p.backend} and decode {d.backend} both take")
    plan = build_plan(config, p.backend, d.backend, page, common, rs)
    return PlanAnswer(status="ok", node=node, config=config, plan=plan, notes=tuple(notes),
                      fallbacks=tuple(fallbacks), trace=tuple(entries), rules_revision=rs.revision)


# -- suggestions ---------------------------------------------------------------------------
def _config_candidates(config: AttentionConfig, node: NodeFacts, rs: RuleSet) -> Iterable[tuple[str, Any]]:
    seen_kv = {config.kv_dtype}
    for kv in KV_CACHE_DTYPES:
        trial = kv if kv != "auto" else "auto"
        norm = config.dtype if kv == "auto" else ("fp8_e4m3" if kv == "fp8" else kv)
        if norm in seen_kv or kv == config.kv_cache_dtype:
            continue
        seen_kv.add(norm)
        yield "kv_cache_dtype", trial
    for p in page_domain(rs):
        if p != config.page_size:
            yield "page_size", p
    effective_bi = config.batch_invariant if config.batch_invariant is not None else bool(node.batch_invariant_env.value)
    if effective_bi:
        yield "batch_invariant", False
    if config.attention_backend != "auto":
        yield "attention_backend", "auto"


def _node_candidates(node: NodeFacts, rs: RuleSet) -> Iterable[tuple[str, Any, NodeFacts]]:
    fi = node.flashinfer_version.value
    if fi is not None and node.flashinfer_cubin_version.value != fi:
        yield "flashinfer_cubin", fi, node.with_fact(flashinfer_cubin_version=Fact.declared(fi, "suggested install"))
    from packaging.version import Version

    versions = {SUPPORTED_FLASHINFER} | {r.fixed_in for r in rs.rules if r.fixed_in}
    for v in sorted(versions, key=Version):
        if v != fi:
            # A new flashinfer comes with its matching flashinfer-cubin when one was installed.
            update = {"flashinfer_version": Fact.declared(v, "suggested upgrade")}
            if node.flashinfer_cubin_version.value is not None and node.flashinfer_cubin_version.value == fi:
                update["flashinfer_cubin_version"] = Fact.declared(v, "suggested upgrade")
            yield "flashinfer_version", v, node.with_fact(**update)


_FIELD_WORDS = {
    "kv_cache_dtype": "kv_cache_dtype={value}",
    "page_size": "page_size={value}",
    "batch_invariant": "turn batch-invariant mode off",
    "attention_backend": "let attnplan choose the backend (attention_backend=auto)",
    "flashinfer_cubin": "pip install flashinfer-cubin=={value} (trtllm-gen cubins from the wheel)",
    "flashinfer_version": "install flashinfer-python=={value}",
}


def suggestions_for(config: AttentionConfig, node: NodeFacts, rs: RuleSet | None = None) -> list[Suggestion]:
    """Single-field changes that make the config valid on this node, each verified by re-evaluation."""
    rs = rs or default_ruleset()
    out: list[Suggestion] = []

    def keep(field_: str, value: Any, target: str, answer: PlanAnswer) -> None:
        if answer.status != "ok" or answer.plan is None:
            return
        pb, db = answer.plan.prefill.backend, answer.plan.decode.backend
        what = _FIELD_WORDS[field_].format(value=value)
        out.append(Suggestion(field=field_, value=value, target=target,  # type: ignore[arg-type]
                              message=f"{what}: then prefill runs {pb}, decode runs {db}", prefill=pb, decode=db))

    for field_, value in _config_candidates(config, node, rs):
        try:
            trial = config.replace(**{field_: value})
        except ValueError:
            continue
        keep(field_, value, "config", evaluate(trial, node, rs, trace=False, suggest=False))
    for field_, value, trial_node in _node_candidates(node, rs):
        keep(field_, value, "node", evaluate(config, trial_node, rs, trace=False, suggest=False))
    return out


def apply_suggestion(config: AttentionConfig, node: NodeFacts, s: Suggestion) -> tuple[AttentionConfig, NodeFacts]:
    """The (config, node) a suggestion describes - what tests and callers re-plan with."""
    if s.target == "config":
        return config.replace(**{s.field: s.value}), node
    for field_, value, trial in _node_candidates(node, default_ruleset()):
        if field_ == s.field and value == s.value:
            return config, trial
    raise ValueError(f"suggestion {s.field}={s.value} does not apply to this node")
