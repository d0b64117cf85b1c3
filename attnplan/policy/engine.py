"""Evaluate the rules over (config, node) for one engine layer and select backends (docs/contract.md, Selection, §10).

Pure functions: the node's facts come in as data, so every rule runs without a GPU. ``evaluate``
never suggests; ``plan_for`` (api.py) composes it with ``suggestions_for`` (suggest.py).
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from . import engine_rows
from .answer import EngineBackend, EngineName, Fallback, Note, PlanAnswer, TraceEntry, Violation
from .candidates import CandidateResult, decode_choice_for, reads_page, page_domain, run_candidate, trace_entry, violation
from .config import AttentionConfig
from .engines import EngineLike, active_checks, engine_resolution, parse_engine, release_node, resolve_engine, selection_for
from .facts import NodeFacts
from .facts_catalog import PAGE_SIZE, base_context, display
from .plan import build_plan
from .rulepack import RuleSet
from .shipped import default_ruleset, load_rules  # noqa: F401  (re-exported: the engine's rules)

PHASES = ("prefill", "decode")


def candidates_for(ruleset: RuleSet, config: AttentionConfig, cap_major: Optional[int], phase: str,
                   selection: dict | None = None, auto_names: tuple[str, ...] = ()) -> list[str]:
    """The backends tried for a phase, in order (a forced backend alone). ``auto_names``: backend names
    that select with the engine's own order (vLLM's FLASHINFER: backends.yaml engines.vllm.auto_names)."""
    kind = "mla" if config.is_mla else "standard"
    if config.attention_backend != "auto" and config.attention_backend not in auto_names:
        forced = ruleset.force[kind].get(config.attention_backend)
        # A name this engine does not force (FlashInfer's own-order names under an engine whose backends are its
        # own, SGLang): no candidate - the engine layer's rule says why (sglang.backend-names), never a KeyError.
        return [forced[phase]] if forced is not None else []
    row = selection_row(ruleset, config, cap_major, phase, selection)
    return list(row.candidates) if row is not None else []


def selection_row(ruleset: RuleSet, config: AttentionConfig, cap_major: Optional[int], phase: str,
                  selection: dict | None = None) -> Any:
    """The selection row that orders this phase's candidates on this capability (None: no candidate)."""
    kind = "mla" if config.is_mla else "standard"
    for row in (selection or ruleset.selection)[kind][phase]:
        if row.capability_major is None or row.capability_major == cap_major:
            return row
    return None


def _engine_choice(results: list[CandidateResult], gates: frozenset[str]) -> list[CandidateResult]:
    """Where the engine picks the kernel itself, the candidates up to the first one none of its own gates
    (``gates``) refuses: the engine runs that one whatever the kernel rules say of it (its kernel
    violations reject the config)."""
    for i, r in enumerate(results):
        if not any(v.rule in gates for v in r.violations):
            return results[: i + 1]
    return results


def evaluate(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet | None = None, *,
             trace: bool = True, suggest: bool = False, engine: EngineLike = None) -> PlanAnswer:
    """Every applicable rule over (config, node): the plan, or a rejection with every violation.

    ``engine``: an ``EngineSpec`` (``parse_engine``), or None/"vllm" (the node's vllm, else the newest
    modelled), "vllm==X" or "flashinfer", parsed here.
    Never suggests (``suggest`` is accepted for old callers and ignored): ``plan_for`` adds suggestions.
    """
    del suggest
    rs = ruleset or default_ruleset()
    spec = parse_engine(engine, rs)
    ref = resolve_engine(spec, node, rs)
    node, pin_notes = release_node(rs, ref, node)
    checks = active_checks(rs, ref, node.flashinfer_version.value)
    # An engine with its own backends (SGLang) resolves its flags first: the config it runs, its pick.
    res = engine_resolution(rs, ref, config, node, spec.request)
    config = res.config if res is not None else config
    extra = res.answer_fields() if res is not None else {}
    base = base_context(config, node)
    violations: list[Violation] = list(res.violations) if res is not None else []
    entries: list[TraceEntry] = []
    # Every note as data, in order (render/notes.py words them): the release pin's (policy/engines.py release_node),
    # then the engine resolver's lines, written by the resolver (attnplan/sglang/resolve.py), which travel as text.
    notes: list[Note] = [*pin_notes, *(Note(kind="text", text=n) for n in (res.notes if res is not None else ()))]

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

    spec = rs.layer(ref.name, ref.version)
    block = config.page_size
    divides = block is not None and engine_rows.kernel_page_mode(spec) == "largest_divisor"
    if divides:
        # vLLM's --block-size is the KV manager's block: the kernels read pages of the largest kernel
        # size dividing it (v1/worker/utils.py select_common_block_size), so every divisor is a candidate.
        pages = tuple(p for p in sorted(set(page_domain(rs)) | {block}) if block % p == 0)
    else:
        pages = (block,) if block is not None else page_domain(rs)
    selection = res.selection if res is not None else selection_for(rs, ref)
    auto = tuple(spec.auto_names)
    results: dict[str, list[CandidateResult]] = {}
    for phase in PHASES:
        results[phase] = [run_candidate(checks, base, phase, b, pages, trace, spec, divides)
                          for b in candidates_for(rs, config, base["node.capability_major"], phase, selection, auto)]
        row = selection_row(rs, config, base["node.capability_major"], phase, selection)
        if row is not None and row.engine_decides and config.attention_backend in ("auto", *auto):
            results[phase] = _engine_choice(results[phase], _engine_gates(rs))
        for r in results[phase]:
            entries.extend(r.trace)

    chosen = None if violations else _choose(results)
    if chosen is None:
        for phase in PHASES:
            if not any(r.ok for r in results[phase]):
                for r in results[phase]:
                    violations.extend(r.violations)
                if not results[phase]:
                    notes.append(Note(kind="no-candidate", phase=phase))
        if not violations:
            # Each phase has a backend, but no page size suits both of them.
            p0, d0 = next(r for r in results["prefill"] if r.ok), next(r for r in results["decode"] if r.ok)
            violations.append(Violation(
                rule="page-size", phase="both", backend=None, fact=PAGE_SIZE, observed=display(PAGE_SIZE, config.page_size),
                message="", says=Note(kind="page-size-clash", prefill=p0.backend, decode=d0.backend,
                                      prefill_pages=tuple(p0.pages), decode_pages=tuple(d0.pages))))
        return PlanAnswer(status="rejected", node=node, config=config, plan=None, engine=ref,
                          violations=tuple(violations), notes_says=tuple(notes), trace=tuple(entries),
                          rules_revision=rs.revision,
                          **(extra or _engine_fields(spec, config, base, ref, ok=False)))

    p, d, common = chosen
    if divides:
        page = common[-1]
        if page != block:
            notes.append(Note(kind="block-size", block=block, page=page,
                              source="vLLM v1/worker/utils.py select_common_block_size"))
    else:
        page = config.page_size if config.page_size is not None else common[0]
    fallbacks: list[Fallback] = []
    for phase, pick in (("prefill", p), ("decode", d)):
        for r in results[phase]:
            if r is pick:
                break
            notes.append(Note(kind="fallback", phase=phase, backend=r.backend, used=pick.backend,
                              why=tuple((v.rule, v.message) for v in r.violations)))
            fallbacks.append(Fallback(phase=phase, skipped=r.backend,  # type: ignore[arg-type]
                                      rules=tuple(dict.fromkeys(v.rule for v in r.violations)) or ("page-size",),
                                      used=pick.backend))
    if config.page_size is None:
        notes.append(Note(kind="page-size-chosen", page=page, prefill=p.backend, decode=d.backend))
    plan = build_plan(config, p.backend, d.backend, page, common, rs, capability=base["node.capability"],
                      batch_invariant=bool(base["config.batch_invariant"]),
                      query_dtypes=(p.query_dtype, d.query_dtype), block_size=block if divides else None,
                      kernels=(p.kernels.get(page), d.kernels.get(page)),
                      decode_tensor_cores=d.tensor_cores,
                      decode_choice=decode_choice_for(rs, ref, node, base, results["decode"], d, page))
    return PlanAnswer(status="ok", node=node, config=config, plan=plan, notes_says=tuple(notes), engine=ref,
                      fallbacks=tuple(fallbacks), trace=tuple(entries), rules_revision=rs.revision,
                      **(extra or _engine_fields(spec, config, base, ref)))


def _engine_fields(spec: Any, config: AttentionConfig, base: dict[str, Any], ref: Any, ok: bool = True) -> dict[str, Any]:
    """``engine_backend`` - and, for an MLA model of an engine that picks its MLA prefill apart (vLLM 0.33:
    get_mla_prefill_backend_cls), ``engine_phases``: the prefill backend it runs by default, which is not
    FlashInfer's where it is FLASH_ATTN (the FlashInfer prefill of the plan then runs with the engine's
    ``flags.mla_prefill_flashinfer``, backends.yaml)."""
    eb = engine_backend_for(spec, config, base, ref, ok=ok)
    out: dict[str, Any] = {"engine_backend": eb}
    pre = engine_rows.mla_prefill_choice(spec, base) if config.is_mla and eb is not None else None
    if pre is None:
        return out
    # the flags that run FlashInfer's ragged prefill where the engine's own MLA prefill is not FlashInfer's
    # (backends.yaml engines.<name>.flags.mla_prefill_flashinfer; vLLM 0.33: --attention-config)
    force = spec.flags.mla_prefill_flashinfer
    says = Note(kind="mla-prefill", engine=engine_name(spec, ref), backend=pre["name"],
                runs_flashinfer=pre["runs_flashinfer"], flashinfer_backend=pre.get("flashinfer_backend"),
                source="get_mla_prefill_backend_cls", args=None if pre["runs_flashinfer"] else force)
    src = "vllm/platforms/interface.py Platform.get_mla_prefill_backend_cls"
    out["engine_phases"] = {
        "prefill": EngineBackend(name=pre["name"], runs_flashinfer=pre["runs_flashinfer"], source=src, says=says),
        "decode": eb}
    return out


def engine_backend_for(spec: Any, config: AttentionConfig, base: dict[str, Any], ref: Any,
                       ok: bool = True) -> Optional[EngineBackend]:
    """The engine's own backend choice when none is asked for (engines.<name>.engine_backend), in the
    engine's vocabulary; None for an engine layer without one (``flashinfer``: the kernels alone).
    An engine with a resolver (SGLang) names its pick there instead (``extra`` above)."""
    choice = engine_rows.engine_choice(spec, base, config.is_mla)
    if choice is None:
        return None
    fi_name = choice.pop("flashinfer_name", None)
    # ``ok``: the plan was made (a rejection's note claims nothing about a plan); render/notes.py words it
    says = Note(kind="engine-selects", engine=engine_name(spec, ref), backend=choice["name"],
                runs_flashinfer=choice["runs_flashinfer"], ok=ok, flashinfer_backend=fi_name)
    return EngineBackend(**choice, says=says, flashinfer_backend_name=fi_name)


def engine_name(spec: Any, ref: Any) -> EngineName:
    """The engine as a sentence names it: its display name in the rule set (backends.yaml engines.<name>.display)."""
    return EngineName(name=ref.name, display=spec.display, version=ref.version, adapter=bool(spec.adapter))


@functools.lru_cache(maxsize=8)
def _engine_gates(rs: RuleSet) -> frozenset[str]:
    """The engine-layer rules that steer its kernel choice: not the page-size ones, which judge the one
    KV cache both phases share (a page the engine refuses rejects the config, whichever kernel runs)."""
    return frozenset(r.id for r in rs.rules if r.layer == "engine" and not any(reads_page(c) for c in r.checks))


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
