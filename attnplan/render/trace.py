"""A trace entry's inputs as people and the JSON contract read them (issue 36 item 6: the planner leaves data,
``render/`` words it).

A check that reads the page size is judged over pages where no one page is given (the block unset, or a block
the kernels read through the largest kernel page dividing it: backends.yaml ``kernel_page: largest_divisor``);
the planner leaves that input as data (policy/candidates.py ``PagesJudged``: the block and the pages that pass)
and this module writes it: ``unset (valid: 16, 32, ...)``, ``block 32 (kernel pages dividing it that pass: 16,
32)``. ``finish`` (render/verdict.py) writes an answer's trace with it, ``render_explain`` and ``explain --json``
the grid's cells.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from attnplan.policy.answer import TraceEntry
from attnplan.policy.candidates import PagesJudged
from attnplan.policy.facts_catalog import PAGE_SIZE


@functools.lru_cache(maxsize=1024)
def _pages_text(value: PagesJudged) -> str:
    # a handful of distinct values (the block, the pages that pass) recur in every answer's trace
    pages = ", ".join(map(str, value.passing)) or "none"
    if value.block is None:
        return f"unset (valid: {pages})"
    return f"block {value.block} (kernel pages dividing it that pass: {pages})"


def _judged(entry: TraceEntry) -> bool:
    # only the page size is judged over pages (policy/candidates.py run_candidate): one look per entry
    return type(entry.inputs.get(PAGE_SIZE)) is PagesJudged


def entry_inputs(entry: TraceEntry) -> dict[str, Any]:
    """The entry's inputs, each as the trace shows it (the same dict when nothing needs words)."""
    if not _judged(entry):
        return entry.inputs
    return {**entry.inputs, PAGE_SIZE: _pages_text(entry.inputs[PAGE_SIZE])}


def finish_trace(trace: tuple[TraceEntry, ...]) -> tuple[TraceEntry, ...]:
    """The trace with every input worded; the same tuple when none needs it (answers are frozen and memoised)."""
    if not any(map(_judged, trace)):
        return trace
    return tuple(dataclasses.replace(e, inputs=entry_inputs(e)) if _judged(e) else e for e in trace)


__all__ = ["entry_inputs", "finish_trace"]
