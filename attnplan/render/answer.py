"""An answer finished for a surface: its sentences written by ``render/`` from the data the planner leaves
(issue 36 item 6: answers carry data; every sentence is rendered here).

``plan_json`` is the JSON contract of a PlanAnswer or ModelPlanAnswer with every verdict's ``message``
written by render/verdict.py. Today the planner still fills the same text (policy/verdict.py
``_interim_message``, held equal by tests/test_verdict_render.py), so ``plan_json(a) == a.to_json()``; a
surface that calls this instead of ``to_json`` keeps its output when the planner stops writing sentences.
"""

from __future__ import annotations

from typing import Any

from .verdict import finish


def plan_json(answer: Any, *, trace: bool = True) -> dict[str, Any]:
    """The JSON contract (docs/contract.md "The plan", "Layer groups") of a finished answer."""
    return finish(answer).to_json(trace=trace)
