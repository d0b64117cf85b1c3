"""From per-node outcomes to the report (docs/contract.md, Errors and exit codes): verdicts, groups, warnings, summary.

The jobs live apart: ``verdicts`` judges one node, ``grouping`` groups identical nodes and flags
heterogeneity, ``text`` renders the report for a terminal; this module puts them together.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from attnplan.policy import RuleSet, default_ruleset

from .grouping import groups as _groups, heterogeneity, mixed, nodes_text as _nodes
from .model import NamedConfig, NodeRow, Outcome, PreflightReport, Query, QueryConfig, Summary, Warning
from .text import compact_names, render_text
from .verdicts import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, EXIT_UNREACHABLE, answer_cell,
                       exit_code, no_gpu_reason, node_row)

__all__ = ["build_report", "render_text", "compact_names", "answer_cell", "no_gpu_reason", "exit_code",
           "EXIT_OK", "EXIT_REJECTED", "EXIT_BAD_INPUT", "EXIT_UNREACHABLE", "EXIT_INTERRUPTED"]


def build_report(*, source: str, targets: Sequence[str], configs: Sequence[NamedConfig],
                 outcomes: Sequence[Outcome], options: dict[str, Any] | None = None,
                 elapsed_s: float = 0.0, interrupted: bool = False,
                 ruleset: Optional[RuleSet] = None, upgrades: Optional[dict[tuple[int, int], Any]] = None
                 ) -> PreflightReport:
    """``upgrades``: (node index, config index) -> its ``--upgrade-to`` cell (preflight/upgrade_column.py)."""
    revision = (ruleset if ruleset is not None else default_ruleset()).revision
    n_cfg = len(configs)
    rows = [node_row(o, n_cfg) for o in outcomes]
    for (n, i), u in (upgrades or {}).items():
        rows[n].results[i].upgrade = u

    warnings = heterogeneity(rows, configs)
    warnings += mixed(rows, configs)
    revs = Counter(r.rules_revision for r in rows if r.rules_revision and r.rules_revision != revision)
    if revs:
        n = sum(revs.values())
        warnings.append(Warning(kind="rules-revision", values=dict(revs), message=(
            f"{_nodes(n)} planned with other rules revisions ({', '.join(f'{k} on {v}' for k, v in revs.most_common())}) "
            f"than this preflight ({revision}): upgrade attnplan on them so every node applies the same rules")))
    if interrupted:
        k = sum(1 for r in rows if r.status == "skipped")
        warnings.append(Warning(kind="interrupted", message=f"interrupted: {_nodes(k)} had not answered yet"))

    groups = _groups(rows, outcomes, configs)
    summary = _summary(rows, warnings, elapsed_s, interrupted)
    return PreflightReport(
        rules_revision=revision,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        query=Query(source=source, targets=list(targets),  # type: ignore[arg-type]
                    configs=[QueryConfig(name=c.name, engine=str(c.engine) if c.engine is not None else None, description=c.describe(),
                                         config=c.config.model_dump(mode="json") if c.config is not None else None,
                                         request=c.request.echo() if c.request is not None else None)
                             for c in configs],
                    options=options or {}),
        summary=summary, nodes=rows, groups=groups, warnings=warnings,
    )


def _summary(rows: list[NodeRow], warnings: list[Warning], elapsed_s: float, interrupted: bool) -> Summary:
    c = Counter(r.status for r in rows)
    het = [w for w in warnings if w.kind == "heterogeneous"]
    line = (f"{len(rows)} node{'s' if len(rows) != 1 else ''}: {c['ok']} ok, {c['rejected']} rejected, "
            f"{c['unreachable']} unreachable")
    if c["error"]:
        line += f", {c['error']} error{'s' if c['error'] != 1 else ''}"
    if c["no-gpu"]:
        line += f", {c['no-gpu']} without GPU"
    if c["skipped"]:
        line += f", {c['skipped']} skipped (interrupted)"
    if het:
        first = het[0].message.split(" - a tensor")[0]
        line += f"; heterogeneous: {first}" + (f" (+{len(het) - 1} more)" if len(het) > 1 else "")
    elif c["ok"] > 1:
        line += "; homogeneous" if c["ok"] == len(rows) else f"; the {c['ok']} ok nodes agree"
    return Summary(nodes=len(rows), ok=c["ok"], rejected=c["rejected"], unreachable=c["unreachable"], error=c["error"],
                   no_gpu=c["no-gpu"], skipped=c["skipped"], heterogeneous=bool(het), interrupted=interrupted,
                   exit_code=exit_code(rows, interrupted), elapsed_s=round(elapsed_s, 3), line=line)
