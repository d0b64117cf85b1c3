"""The embedded calls (SPEC §8): ``plan_for`` and ``require_plan``."""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Union

from .answer import PlanAnswer
from .config import AttentionConfig
from .engine import default_ruleset, evaluate
from .engines import EngineLike, EngineSpec, parse_engine
from .suggest import suggestions_for
from .errors import UnsupportedConfigurationError
from .facts import NodeFacts
from .hfconfig import make_config
from .probe import local_node
from .rulepack import RuleSet

ConfigLike = Union[AttentionConfig, Mapping[str, Any]]


# ~22 KiB an answer (its trace included): 512 entries bound the memo near 11 MiB.
@functools.lru_cache(maxsize=512)
def _cached(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet, engine: EngineSpec) -> PlanAnswer:
    return _answer(config, node, ruleset, engine)


def _answer(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet, engine: EngineSpec) -> PlanAnswer:
    answer = evaluate(config, node, ruleset, engine=engine)
    if answer.status == "ok":
        return answer
    return answer.model_copy(update={"suggestions": tuple(suggestions_for(config, node, ruleset, engine=engine))})


def plan_for(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None,
             engine: EngineLike = None) -> PlanAnswer:
    """The plan answer (ok or rejected, with verified suggestions) for ``config`` on ``node`` (default: this
    machine, probed once), for the engine layer ``engine``: an ``EngineSpec`` (``parse_engine``), or
    None/"vllm", "vllm==0.33.0" or "flashinfer", parsed here once.

    Answers are immutable and memoised: the rules are a pure function of (config, node, engine).
    Raises InvalidInputError for an unknown engine or a version the rules do not model.
    """
    cfg = config if isinstance(config, AttentionConfig) else make_config(config)
    n = node if node is not None else local_node()
    rs = ruleset or default_ruleset()
    spec = parse_engine(engine, rs)
    try:
        return _cached(cfg, n, rs, spec)
    except TypeError:  # an unhashable declared fact value: evaluate without the memo
        return _answer(cfg, n, rs, spec)


def require_plan(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None,
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
