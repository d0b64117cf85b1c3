"""Suggestions (docs/contract.md, Selection): single-field changes that make a config valid on this node, each verified
by re-evaluating every rule of the same engine layer - never a guess."""

from __future__ import annotations

from typing import Any, Iterable

from .answer import Note, PlanAnswer, Suggestion
from .candidates import page_domain
from .config import KV_CACHE_DTYPES, AttentionConfig
from .dtypes import kv_element_dtype
from .engine import default_ruleset, evaluate
from .engines import EngineLike, parse_engine
from attnplan.errors import InvalidInputError
from .facts import Fact, NodeFacts
from .rulepack import RuleSet
from .version import SUPPORTED_FLASHINFER


def _config_candidates(config: AttentionConfig, node: NodeFacts, rs: RuleSet) -> Iterable[tuple[str, Any]]:
    seen_kv = {config.kv_dtype}
    for kv in KV_CACHE_DTYPES:
        norm = kv_element_dtype(kv, config.dtype)
        if norm in seen_kv or kv == config.kv_cache_dtype:
            continue
        seen_kv.add(norm)
        yield "kv_cache_dtype", kv
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


def _cubin_source(value: Any, rs: RuleSet) -> dict[str, Any]:
    """Where flashinfer-cubin ``value`` can really come from (the package index stops at cubins.pypi_max), as the
    suggestion's data (render/notes.py words it)."""
    from packaging.version import InvalidVersion, Version

    idx = rs.cubins
    try:
        on_pypi = idx is None or Version(str(value)) <= Version(idx.pypi_max)
    except InvalidVersion:
        on_pypi = False
    if on_pypi:
        return {"on_pypi": True}
    return {"on_pypi": False, "wheel_index": idx.wheel_index, "pypi_max": idx.pypi_max}


def suggestions_for(config: AttentionConfig, node: NodeFacts, rs: RuleSet | None = None, *,
                    engine: EngineLike = None) -> list[Suggestion]:
    """Single-field changes that make the config valid on this node, each verified by re-evaluation."""
    rs = rs or default_ruleset()
    engine = parse_engine(engine, rs)
    out: list[Suggestion] = []

    def keep(field_: str, value: Any, target: str, answer: PlanAnswer) -> None:
        if answer.status != "ok" or answer.plan is None:
            return
        pb, db = answer.plan.prefill.backend, answer.plan.decode.backend
        where = _cubin_source(value, rs) if field_ == "flashinfer_cubin" else {}
        says = Note(kind="suggestion", field=field_, value=value, prefill=pb, decode=db, **where)
        out.append(Suggestion(field=field_, value=value, target=target,  # type: ignore[arg-type]
                              message="", says=says, prefill=pb, decode=db))

    for field_, value in _config_candidates(config, node, rs):
        try:
            trial = config.replace(**{field_: value})
        except ValueError:
            continue
        keep(field_, value, "config", evaluate(trial, node, rs, trace=False, engine=engine))
    for field_, value, trial_node in _node_candidates(node, rs):
        keep(field_, value, "node", evaluate(config, trial_node, rs, trace=False, engine=engine))
    return out


def apply_suggestion(config: AttentionConfig, node: NodeFacts, s: Suggestion,
                     ruleset: RuleSet | None = None) -> tuple[AttentionConfig, NodeFacts]:
    """The (config, node) a suggestion describes - what tests and callers re-plan with (the caller's rules)."""
    if s.target == "config":
        return config.replace(**{s.field: s.value}), node
    for field_, value, trial in _node_candidates(node, ruleset or default_ruleset()):
        if field_ == s.field and value == s.value:
            return config, trial
    raise InvalidInputError("suggestion", f"{s.field}={s.value} does not apply to this node: apply a suggestion "
                            "to the (config, node) whose answer gave it")


# A suggestion's field as the flag the same command takes (the verdict's fixes: policy/api.py fixes_for): each
# engine's own spelling is data (backends.yaml engines.<name>.flags and kv_dtype_spelling), never a branch on its name.
def suggestion_flag(engine: str, field: str, value: Any, ruleset: RuleSet | None = None) -> str | None:
    """The flags that make suggestion (``field``, ``value``) under ``engine``'s command line (``ruleset``'s
    ``engines.<engine>``); None where that command has no such flag (vLLM has no fp16 spelling distinct from
    float16's, SGLang no fp16 KV cache). Raises InvalidInputError for an engine the rules do not name."""
    rs = ruleset or default_ruleset()
    layer = rs.engines.get(engine)
    if layer is None:
        raise InvalidInputError("engine", f"unknown engine {engine!r}", sorted(rs.engines))
    if field == "kv_cache_dtype":
        table = layer.kv_dtype_spelling
        spelled = str(value) if table is None else table.get(str(value))
        return None if spelled is None else f"--kv-cache-dtype {spelled}"
    if field == "page_size":
        return f"{layer.flags.page_size} {value}"
    if field == "attention_backend":
        # vLLM's and SGLang's own backends are tried by name (fixes_for); attnplan's plan takes its own
        flag = layer.flags.attention_backend
        return f"{flag} {value}" if flag is not None else None
    if field == "batch_invariant" and value is False:
        return layer.flags.batch_invariant_off
    return None
