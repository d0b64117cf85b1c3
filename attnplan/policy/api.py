"""The embedded calls (docs/contract.md, The plan): ``plan_for`` and ``require_plan``."""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Union

from .answer import EngineName, Fix, Note, PlanAnswer, Verdict
from .backend_names import VLLM_TO_ATTNPLAN
from .config import AttentionConfig, make_config
from .engine import default_ruleset, evaluate
from .engines import EngineLike, EngineSpec, engine_alternatives, parse_engine
from .suggest import suggestion_flag, suggestions_for
from .verdict import OUTCOMES, engine_backend_names, verdict_for
from attnplan.errors import InvalidInputError, UnsupportedConfigurationError
from .facts import NodeFacts
from .rulepack import RuleSet

ConfigLike = Union[AttentionConfig, Mapping[str, Any]]


# ~22 KiB an answer (its trace included): 512 entries bound the memo near 11 MiB.
@functools.lru_cache(maxsize=512)
def _cached(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet, engine: EngineSpec) -> PlanAnswer:
    return _answer(config, node, ruleset, engine)


def _answer(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet, engine: EngineSpec) -> PlanAnswer:
    answer = evaluate(config, node, ruleset, engine=engine)
    if answer.status != "ok":
        answer = answer.model_copy(update={"suggestions": tuple(suggestions_for(config, node, ruleset, engine=engine))})
    v = verdict_for(answer, ruleset)
    if not v.runs:
        v = v.model_copy(update={"fixes": fixes_for(answer, v, ruleset, engine)})
    return answer.model_copy(update={"verdict": v})


def _verdict_only(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet, engine: EngineSpec) -> Verdict:
    """The verdict of a changed command (a fix candidate): evaluated, never suggested or fixed again."""
    return verdict_for(evaluate(config, node, ruleset, engine=engine, trace=False), ruleset)


def fixes_for(answer: PlanAnswer, v: Verdict, rs: RuleSet, engine: EngineSpec) -> tuple[Fix, ...]:
    """Changes the same command accepts, each re-evaluated to the outcome it gives (runs first): the engine's
    other backends (``--attention-backend``), then the answer's verified single-field suggestions as flags."""
    cfg, node = answer.config, answer.node
    out: list[Fix] = []
    seen: set[str] = set()

    def add(args: Optional[str], change: str, new: Verdict, says: Optional[Note] = None) -> None:
        key = args or change
        if key in seen:
            return
        seen.add(key)
        sel = new.selected.decode if new.selected.prefill == new.selected.decode else \
            f"{new.selected.prefill} / {new.selected.decode}"
        out.append(Fix(args=args, change=change, outcome=new.outcome, selected=sel, says=says))

    layer = rs.engines[answer.engine.name]
    # what the fix changes, as data (render/notes.py words it; the engine as backends.yaml engines.<name>.display)
    who = EngineName(name=answer.engine.name, display=layer.display, version=answer.engine.version,
                     adapter=bool(layer.adapter))
    if layer.own_backends_judged_by == "verdict":   # vLLM: its own backends, by name (backends.yaml engine_backend)
        for name in engine_backend_names(rs, answer.engine.name, cfg.is_mla, answer.engine.version):
            if name == v.selected.decode and v.selected.prefill == name:
                continue
            changed = cfg.replace(attention_backend=VLLM_TO_ATTNPLAN.get(name, name), engine_attention_backend=None) \
                if name in VLLM_TO_ATTNPLAN else cfg.replace(attention_backend="auto", engine_attention_backend=name)
            add(f"--attention-backend {name}", "", _verdict_only(changed, node, rs, engine),
                Note(kind="run-backend", engine=who, backend=name))
        if v.selected.runs_flashinfer and cfg.use_trtllm_attention is not False and not cfg.is_mla:
            # vLLM's FlashInfer on its native wrappers (rule vllm.use-trtllm-attention): e.g. the soft cap applied
            changed = cfg.replace(use_trtllm_attention=False)
            add("--attention-config '{\"use_trtllm_attention\": false}'", "", _verdict_only(changed, node, rs, engine),
                Note(kind="trtllm-off", engine=who))
    # an engine with its own backends (SGLang): its other backends as its own flag, from its resolver module
    # (policy/engines.py engine_alternatives), each re-resolved by the engine's rules
    for args, change, spec in engine_alternatives(rs, engine, cfg.is_mla, v.selected):
        add(args, change, _verdict_only(cfg, node, rs, spec))
    for s in answer.suggestions:
        flag = suggestion_flag(answer.engine.name, s.field, s.value, rs)
        if s.target == "node":
            if v.modelled or layer.adapter:
                # verified by re-evaluating every rule on the changed node (policy/suggest.py): the plan is valid
                out.append(Fix(args=None, change=s.message, outcome="runs", selected=s.decode or "", says=s.says))
            continue
        if flag is None:
            continue
        try:
            changed = cfg.replace(**{s.field: s.value})
        except Exception:  # noqa: BLE001 - a suggestion the config cannot take is no fix
            continue
        add(flag, s.message, _verdict_only(changed, node, rs, engine), s.says)
    # a fix makes the command do better than it does: what happens first comes later, or it runs
    better = [f for f in out if OUTCOMES.index(f.outcome) < OUTCOMES.index(v.outcome)]
    better.sort(key=lambda f: OUTCOMES.index(f.outcome))
    return tuple(better)


def plan_for(config: ConfigLike, node: NodeFacts, *, ruleset: RuleSet | None = None,
             engine: EngineLike = None) -> PlanAnswer:
    """The plan answer (ok or rejected, with verified suggestions) for ``config`` on ``node``'s facts, for the
    engine layer ``engine``: an ``EngineSpec`` (``parse_engine``), or None/"vllm", "vllm==0.33.0" or
    "flashinfer", parsed here once. The policy reads no machine: ``attnplan.plan_for`` (attnplan/embedded.py)
    is this call with this machine's probed facts as the default node.

    Answers are immutable and memoised: the rules are a pure function of (config, node, engine).
    Raises InvalidInputError for an unknown engine or a version the rules do not model.
    """
    cfg = config if isinstance(config, AttentionConfig) else make_config(config)
    if not isinstance(node, NodeFacts):
        raise InvalidInputError("node", "the policy plans a node's facts (NodeFacts: simulated_node, "
                                "attnplan.node.local_node); attnplan.plan_for probes this machine when none is given")
    n = node
    rs = ruleset or default_ruleset()
    spec = parse_engine(engine, rs)
    try:
        return _cached(cfg, n, rs, spec)
    except TypeError:  # an unhashable declared fact value: evaluate without the memo
        return _answer(cfg, n, rs, spec)


def require_plan(config: ConfigLike, node: NodeFacts, *, ruleset: RuleSet | None = None,
                 engine: EngineLike = None) -> PlanAnswer:
    """An ok plan, or ``UnsupportedConfigurationError`` with every violation and suggestion.

    Call it at engine init so that an unsupported setup fails at startup, not on the first request.
    """
    answer = plan_for(config, node, ruleset=ruleset, engine=engine)
    if answer.status != "ok":
        raise UnsupportedConfigurationError(answer)
    return answer


def clear_cache() -> None:
    _cached.cache_clear()
