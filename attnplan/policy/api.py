"""The embedded calls (SPEC §8): ``plan_for`` and ``require_plan``."""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Union

from .answer import PlanAnswer
from .config import AttentionConfig
from .engine import default_ruleset, evaluate
from .errors import UnsupportedConfigurationError
from .facts import NodeFacts
from .hfconfig import make_config
from .probe import local_node
from .rulepack import RuleSet

ConfigLike = Union[AttentionConfig, Mapping[str, Any]]


# ~22 KiB an answer (its trace included): 512 entries bound the memo near 11 MiB.
@functools.lru_cache(maxsize=512)
def _cached(config: AttentionConfig, node: NodeFacts, ruleset: RuleSet) -> PlanAnswer:
    return evaluate(config, node, ruleset)


def plan_for(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None) -> PlanAnswer:
    """The plan answer (ok or rejected) for ``config`` on ``node`` (default: this machine, probed once).

    Answers are immutable and memoised: the rules are a pure function of (config, node).
    """
    cfg = config if isinstance(config, AttentionConfig) else make_config(config)
    n = node if node is not None else local_node()
    rs = ruleset or default_ruleset()
    try:
        return _cached(cfg, n, rs)
    except TypeError:  # an unhashable declared fact value: evaluate without the memo
        return evaluate(cfg, n, rs)


def require_plan(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None) -> PlanAnswer:
    """An ok plan, or ``UnsupportedConfigurationError`` with every violation and suggestion.

    Call it at engine init so that an unsupported setup fails at startup, not on the first request.
    """
    answer = plan_for(config, node, ruleset=ruleset)
    if answer.status != "ok":
        raise UnsupportedConfigurationError(answer)
    return answer


def clear_cache() -> None:
    _cached.cache_clear()
