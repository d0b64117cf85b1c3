"""An answer finished for a surface: its sentences written by ``render/`` from the data the planner leaves
(issue 36 item 6: answers carry data; every sentence is rendered here).

``plan_json`` is the JSON contract of a PlanAnswer or ModelPlanAnswer with every text field (the verdict's
``message``, the notes, suggestions, the engine's note, violations built in code) written by render/verdict.py
``finish`` from the data beside it (``says``, ``notes_says``): the planner leaves those fields empty, so a surface
calls this (or ``finish``) rather than ``to_json`` on the planner's answer.
"""

from __future__ import annotations

from typing import Any

from .verdict import finish


def plan_json(answer: Any, *, trace: bool = True) -> dict[str, Any]:
    """The JSON contract (docs/contract.md "The plan", "Layer groups") of a finished answer."""
    return finish(answer).to_json(trace=trace)
