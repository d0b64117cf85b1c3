"""The embedded calls (docs/contract.md, The plan) as a serving engine makes them at init: ``plan_for`` and
``require_plan`` plan on this machine's probed facts when no node is given (probed once, cached:
attnplan/node/probe.py ``local_node``). The policy below them reads no machine (attnplan/policy/api.py)."""

from __future__ import annotations

from typing import Optional

from .node.probe import local_node
from .policy.api import ConfigLike
from .policy.api import plan_for as _plan_for
from .policy.api import require_plan as _require_plan
from .policy.answer import PlanAnswer
from .policy.engines import EngineLike
from .policy.facts import NodeFacts
from .policy.rulepack import RuleSet


def plan_for(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None,
             engine: EngineLike = None) -> PlanAnswer:
    """``attnplan.policy.plan_for`` on ``node``, or on this machine (probed once) when it is None."""
    return _plan_for(config, node if node is not None else local_node(), ruleset=ruleset, engine=engine)


def require_plan(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None,
                 engine: EngineLike = None) -> PlanAnswer:
    """An ok plan or ``UnsupportedConfigurationError`` (at engine init: fail at startup, not on the first
    request), on ``node`` or this machine."""
    return _require_plan(config, node if node is not None else local_node(), ruleset=ruleset, engine=engine)


__all__ = ["plan_for", "require_plan"]
