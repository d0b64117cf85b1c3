"""A node's verdict: from its outcome (answers, or why there are none) to its row and cells.

A node that could not be probed, or whose answer does not count, is ``error`` (or ``skip``),
never ``pass`` and never ``fail``: "could not probe" must not read as "rejected".
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from attnplan.policy import PlanAnswer

from .model import VERDICT_ORDER, Cell, NodeRow, Outcome

STATUS_ORDER = {"ok": 0, "rejected": 1, "no-gpu": 2, "unreachable": 3, "error": 4, "skipped": 5}
EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def answer_cell(i: int, a: Any) -> Cell:
    """The cell of an answer: a ``PlanAnswer`` (one config) or a ``ModelAnswer`` (every layer group)."""
    if not isinstance(a, PlanAnswer):
        from .model_answers import model_cell

        return model_cell(i, a)
    rules = list(dict.fromkeys(v.rule for v in a.violations))
    if a.verdict is not None:
        from .model_answers import verdict_cell

        return verdict_cell(i, a.verdict, a.plan if a.verdict.flashinfer_plan == "command" else None, rules)
    if a.status == "ok" and a.plan is not None:
        kv = a.plan.kv_cache
        return Cell(config=i, verdict="pass", status="ok", prefill=a.plan.prefill.backend,
                    decode=a.plan.decode.backend, kv_layout=kv.layout, page_size=kv.page_size,
                    kv_view_dtype=kv.kv_view_dtype, violations=rules)
    return Cell(config=i, verdict="fail", status="rejected", violations=rules,
                reason=f"violates {', '.join(rules)}" if rules else "rejected")


def no_gpu_reason(a: PlanAnswer) -> Optional[str]:
    """Why the node has no usable GPU, or None when it has one (capability known)."""
    node = a.node
    if node.capability.value is not None:
        return None
    if node.gpu_count.value == 0:
        return "no GPU on this node"
    detail = node.capability.detail or node.gpu_count.detail
    return f"no GPU found ({detail})" if detail else "no GPU found (capability unknown)"


def node_row(o: Outcome, n_cfg: int) -> NodeRow:
    base = dict(name=o.name, address=o.address, elapsed_ms=None if o.elapsed_ms is None else round(o.elapsed_ms, 1),
                extra=o.extra)
    if o.kind != "answered" or not o.answers:
        verdict = "skip" if o.kind == "skipped" else "error"
        status = {"unreachable": "unreachable", "error": "error", "skipped": "skipped"}.get(o.kind, "error")
        reason = o.reason or ("no answer" if o.kind == "answered" else o.kind)
        cells = [Cell(config=i, verdict=verdict, reason=reason) for i in range(n_cfg)]
        return NodeRow(status=status, verdict=verdict, reason=reason, results=cells, **base)  # type: ignore[arg-type]
    first = o.answers[0]
    node = first.node
    facts = dict(device=node.gpu_name.value if isinstance(node.gpu_name.value, str) else None,
                 capability=node.capability_str,
                 gpu_count=node.gpu_count.value if isinstance(node.gpu_count.value, int) else None,
                 fingerprint=node.fingerprint(), rules_revision=first.rules_revision or None)
    why = no_gpu_reason(first)
    if why is not None:
        cells = [Cell(config=i, verdict="skip", status=a.status, violations=list(dict.fromkeys(v.rule for v in a.violations)),
                      reason=why) for i, a in enumerate(o.answers)]
        return NodeRow(status="no-gpu", verdict="skip", reason=why, results=cells, **facts, **base)
    cells = [answer_cell(i, a) for i, a in enumerate(o.answers)]
    status = "rejected" if any(c.verdict == "fail" for c in cells) else "ok"
    verdict = min((c.verdict for c in cells), key=VERDICT_ORDER.__getitem__)
    reason = None
    if status == "rejected":
        rules = list(dict.fromkeys(r for c in cells for r in c.violations if c.verdict == "fail"))
        reason = f"violates {', '.join(rules)}"
        firsts = [c.reason for c in cells if c.verdict == "fail" and (c.layer_groups or c.outcome) and c.reason]
        if firsts and len(cells) == 1:
            reason = firsts[0]  # a model: its first failing layer group and rule
    return NodeRow(status=status, verdict=verdict, reason=reason, results=cells, **facts, **base)  # type: ignore[arg-type]


def exit_code(rows: Sequence[NodeRow], interrupted: bool) -> int:
    if interrupted:
        return EXIT_INTERRUPTED
    if any(r.status in ("unreachable", "error", "skipped") for r in rows):
        return EXIT_UNREACHABLE
    if any(r.status == "rejected" for r in rows):
        return EXIT_REJECTED
    if not any(r.status == "ok" for r in rows):
        return EXIT_REJECTED  # nothing can run it (e.g. no node has a GPU): never a pass
    return EXIT_OK
