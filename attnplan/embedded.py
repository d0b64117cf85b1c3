"""The embedded calls (docs/contract.md, The plan) as a serving engine makes them at init: ``plan_for``,
``require_plan`` and ``plan_model`` plan on this machine's probed facts when no node is given (probed once,
cached: attnplan/node/probe.py ``local_node``), and hand back finished answers: the verdict's sentence written
from its data by render/verdict.py (the policy below decides and reads no machine; it writes no sentence)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from .errors import UnsupportedConfigurationError
from .model.plan import ModelPlanAnswer
from .model.plan import plan_model as _plan_model
from .policy.api import ConfigLike
from .policy.api import plan_for as _plan_for
from .policy.answer import PlanAnswer
from .policy.engines import EngineLike
from .policy.facts import NodeFacts
from .policy.rulepack import RuleSet
from .render.verdict import finish


# The policy memoises its answers (policy/api.py): each is finished once too, not on every call (the sentence and
# the copy would double the cost of a repeated plan_for). Keyed by the memoised object itself, which the entry keeps.
_FINISHED: dict[int, tuple[PlanAnswer, PlanAnswer]] = {}


def _finished(answer: PlanAnswer) -> PlanAnswer:
    hit = _FINISHED.get(id(answer))
    if hit is not None and hit[0] is answer:
        return hit[1]
    if len(_FINISHED) >= 512:   # the policy's own memo holds 512
        _FINISHED.clear()
    done = finish(answer)
    _FINISHED[id(answer)] = (answer, done)
    return done


def plan_for(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None,
             engine: EngineLike = None) -> PlanAnswer:
    """``attnplan.policy.plan_for`` on ``node``, or on this machine (probed once) when it is None; finished."""
    if node is None:
        from .node.probe import local_node   # probing this machine: only when no node is given

        node = local_node()
    return _finished(_plan_for(config, node, ruleset=ruleset, engine=engine))


def require_plan(config: ConfigLike, node: Optional[NodeFacts] = None, *, ruleset: RuleSet | None = None,
                 engine: EngineLike = None) -> PlanAnswer:
    """An ok plan or ``UnsupportedConfigurationError`` (at engine init: fail at startup, not on the first
    request), on ``node`` or this machine; the error's text leads with the verdict's sentence."""
    answer = plan_for(config, node, ruleset=ruleset, engine=engine)
    if answer.status != "ok":
        raise UnsupportedConfigurationError(answer)
    return answer


def plan_model(hf: Mapping[str, Any] | str | Path, node: Optional[NodeFacts] = None, **kw: Any) -> ModelPlanAnswer:
    """``attnplan.model.plan_model`` (every attention layer group; this machine, probed, when ``node`` is
    None), finished."""
    if node is None:
        from .node.probe import local_node

        node = local_node()
    return finish(_plan_model(hf, node, **kw))


__all__ = ["plan_for", "require_plan", "plan_model"]
