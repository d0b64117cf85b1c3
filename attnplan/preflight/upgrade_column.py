"""Preflight's upgrade column (issue 42 item 3): ``attnplan preflight ... --upgrade-to vllm==0.33.0``.

Each node answered for its own release (the engine layer its answer names, on its own facts). The same
config - an attention config, or a whole model request - is planned here, on those facts, under the
release upgraded to, and the two compared by attnplan/upgrade.py: the cell says the outcome after, whether
it is worse, how many things change and the rules behind them. Planned here, not on the node: a node
cannot plan a release its rules do not model, and the question is what changes if it is upgraded.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from attnplan.embedded import plan_for   # finished, as plan_request's model answers are
from attnplan.policy import EngineSpec, InvalidInputError, RuleSet
from attnplan.policy.engines import engine_names, parse_engine

from .model import NamedConfig, Outcome, UpgradeCell


def parse_upgrade_to(text: str, rs: RuleSet) -> tuple[str, Optional[str], Optional[str]]:
    """``--upgrade-to``: (engine name or 'flashinfer', engine version, flashinfer version), or InvalidInputError
    naming the modelled releases (exit 2 before any node is asked)."""
    from packaging.version import InvalidVersion, Version

    raw = str(text).strip().lower()
    if raw.partition("==")[0].strip() == "flashinfer":
        version = raw.partition("==")[2].strip()
        try:
            Version(version)
        except InvalidVersion:
            raise InvalidInputError("upgrade_to", "give flashinfer==X with X a release, e.g. flashinfer==0.7.2.post1") from None
        return "flashinfer", None, version
    try:
        spec = parse_engine(raw, rs)
    except InvalidInputError as exc:
        raise InvalidInputError("upgrade_to", exc.message, exc.allowed) from None
    if spec.version is None or spec.name == "flashinfer":
        raise InvalidInputError("upgrade_to", f"{text!r} names no release: give engine==X or flashinfer==X",
                                engine_names(rs))
    return spec.name, spec.version, None


def _sides(answer: Any, c: NamedConfig, to: tuple[str, Optional[str], Optional[str]]) -> tuple[Any, Any]:
    from attnplan.upgrade import Side

    ref = answer.engine
    request = c.engine.request if c.engine is not None else None
    before = Side(EngineSpec(ref.name, ref.version, request))
    name, version, fi = to
    if fi is not None:
        return before, Side(before.engine, fi)
    if name != ref.name:
        raise InvalidInputError("upgrade_to", f"the node plans under {ref.name}, not {name}")
    return before, Side(EngineSpec(name, version, request))


def _plan(c: NamedConfig, node: Any, side: Any, rs: RuleSet) -> Any:
    if c.request is not None:
        from attnplan.request import plan_request

        req = c.request.model_copy(update={"engine": str(side.engine)})
        return plan_request(req, node, rs)
    assert c.config is not None
    return plan_for(c.config, node, ruleset=rs, engine=side.engine)


def upgrade_cell(answer: Any, c: NamedConfig, to: tuple[str, Optional[str], Optional[str]], rs: RuleSet) -> UpgradeCell:
    """One node x config: its answer against the same config under ``to`` (parse_upgrade_to)."""
    from attnplan.upgrade import diff_deployment

    label = f"flashinfer=={to[2]}" if to[2] is not None else f"{to[0]}=={to[1]}"
    node = answer.node
    if node.capability.value is None:
        return UpgradeCell(to=label, error="no GPU on this node")
    try:
        a, b = _sides(answer, c, to)
        fa = str(node.flashinfer_version.value) if node.flashinfer_version.value is not None else None
        after = _plan(c, b.node(node), b, rs)
        d = diff_deployment(rs, a, b, answer, after, deployment=c.name, device=str(node.gpu_name.value),
                            fa=fa, fb=b.flashinfer_on(node, rs))
    except InvalidInputError as exc:
        return UpgradeCell(to=label, error=str(exc))
    changes = [*d.changes, *(x for g in d.groups for x in g.changes)]
    rules = list(dict.fromkeys(r.id for x in changes for r in x.rules))
    return UpgradeCell(to=label, before=d.before.outcome if d.before else None,
                       after=d.after.outcome if d.after else None, worse=d.worse, changes=len(changes), rules=rules)


def upgrade_cells(outcomes: Sequence[Outcome], configs: Sequence[NamedConfig], to: tuple[str, Optional[str], Optional[str]],
                  rs: RuleSet) -> dict[tuple[int, int], UpgradeCell]:
    """(node index, config index) -> its cell, for every node that answered."""
    out: dict[tuple[int, int], UpgradeCell] = {}
    for n, o in enumerate(outcomes):
        if o.kind != "answered" or not o.answers:
            continue
        for i, (a, c) in enumerate(zip(o.answers, configs)):
            out[(n, i)] = upgrade_cell(a, c, to, rs)
    return out


def cell_text(u: Optional[UpgradeCell]) -> str:
    """The column's text: the outcome after, WORSE when it ranks worse, and the rules behind the changes."""
    if u is None:
        return "-"
    if u.error:
        return "n/a: " + u.error
    if not u.changes:
        return f"{u.after} (same)"
    head = f"{u.before} -> {u.after.upper() if u.worse and u.after else u.after}" if u.before != u.after \
        else f"{u.after} ({u.changes} change{'s' if u.changes != 1 else ''})"
    return head + (" WORSE" if u.worse else "") + (f" [{', '.join(u.rules[:3])}]" if u.rules else "")
