"""Grouping identical nodes and flagging a cluster whose nodes would run different kernels.

Identical nodes (same fingerprint, same result for every config) collapse into one group, so a
1,000-node cluster prints a handful of rows. A config that runs with different backends, KV
layouts or page sizes on different nodes is flagged: a tensor- or pipeline-parallel group
spanning those nodes would mix kernels.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from attnplan.policy.answer import node_json

from .labels import trtllm_cubins_state
from .model import VERDICT_ORDER, Cell, Group, GroupCell, NamedConfig, NodeRow, Outcome, Warning
from .verdicts import STATUS_ORDER

# The plan fields whose disagreement across nodes makes a cluster heterogeneous.
HETERO_FIELDS = ("prefill", "decode", "kv_layout", "page_size")


def plan_signature(c: Cell) -> tuple[Any, ...]:
    return tuple(getattr(c, f) for f in HETERO_FIELDS)


def cell_key(c: Cell) -> tuple[Any, ...]:
    return (c.verdict, c.status, c.prefill, c.decode, c.kv_layout, c.page_size, c.kv_view_dtype,
            tuple(c.violations), c.reason if c.verdict in ("error", "skip", "warn") else None)


def _plan_text(sig: tuple[Any, ...]) -> str:
    prefill, decode, layout, page = sig
    return f"{prefill}/{decode}" + (f" {layout}/{page}" if layout is not None else "")


def nodes_text(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def heterogeneity(rows: list[NodeRow], configs: Sequence[NamedConfig]) -> list[Warning]:
    out: list[Warning] = []
    for i, nc in enumerate(configs):
        ok = [r for r in rows if r.status in ("ok", "rejected") and r.results[i].status == "ok"]
        if len(ok) < 2:
            continue
        sigs = Counter(plan_signature(r.results[i]) for r in ok)
        if len(sigs) < 2:
            continue
        majority, majority_n = sigs.most_common(1)[0]
        for r in ok:
            c = r.results[i]
            if plan_signature(c) != majority:
                c.verdict = "warn"
                c.reason = (f"runs {_plan_text(plan_signature(c))} unlike {majority_n} of {len(ok)} nodes "
                            f"({_plan_text(majority)})")
                if r.verdict == "pass":
                    r.verdict = "warn"
        for f in HETERO_FIELDS:
            # a node running the engine's own backend has no FlashInfer layout or page to compare
            values = Counter(str(getattr(r.results[i], f)) for r in ok if getattr(r.results[i], f) is not None)
            if len(values) < 2:
                continue
            vs = values.most_common()
            label = {"kv_layout": "KV layout", "page_size": "page size"}.get(f, f)
            parts = f"{label} {vs[0][0]} on {nodes_text(vs[0][1])} vs " + ", ".join(f"{v} on {n}" for v, n in vs[1:])
            prefix = f"{nc.name}: " if len(configs) > 1 else ""
            out.append(Warning(kind="heterogeneous", config=i, field=f, values=dict(vs), message=(
                f"{prefix}{parts} - a tensor- or pipeline-parallel group across them would mix kernels")))
    return out


def mixed(rows: list[NodeRow], configs: Sequence[NamedConfig]) -> list[Warning]:
    out = []
    for i, nc in enumerate(configs):
        ok = sum(1 for r in rows if r.status in ("ok", "rejected") and r.results[i].status == "ok")
        bad = [r for r in rows if r.status in ("ok", "rejected") and r.results[i].status == "rejected"]
        if ok and bad:
            rules = Counter(rule for r in bad for rule in r.results[i].violations)
            out.append(Warning(kind="mixed", config=i, values={"ok": ok, "rejected": len(bad)}, message=(
                f"{nc.name}: runs on {nodes_text(ok)}, rejected on {len(bad)} ({', '.join(r for r, _ in rules.most_common(4))})")))
    return out


def _group_key(r: NodeRow) -> tuple[Any, ...]:
    if r.status in ("unreachable", "error", "skipped"):
        return (r.status, r.reason)
    return (r.status, r.fingerprint, r.rules_revision, tuple(cell_key(c) for c in r.results))


def groups(rows: list[NodeRow], outcomes: Sequence[Outcome], configs: Sequence[NamedConfig]) -> list[Group]:
    buckets: dict[tuple[Any, ...], list[int]] = {}
    for idx, r in enumerate(rows):
        buckets.setdefault(_group_key(r), []).append(idx)
    ordered = sorted(buckets.values(), key=lambda ix: (STATUS_ORDER[rows[ix[0]].status],
                                                       VERDICT_ORDER[rows[ix[0]].verdict] * -1, -len(ix),
                                                       rows[ix[0]].device or "", ix[0]))
    groups = []
    for gid, ix in enumerate(ordered, start=1):
        first = rows[ix[0]]
        o = outcomes[ix[0]]
        for k in ix:
            rows[k].group = gid
        cells = []
        for i, c in enumerate(first.results):
            gc = GroupCell(**c.model_dump())
            if o.answers:
                a = o.answers[i]
                gc.details = [v.model_dump(mode="json", exclude_none=True) for v in a.violations]
                gc.suggestions = [s.model_dump(mode="json", exclude_none=True) for s in a.suggestions]
                gc.fallbacks = [f.model_dump(mode="json") for f in a.fallbacks]
                gc.notes = list(a.notes)
            cells.append(gc)
        node = o.answers[0].node if o.answers else None
        groups.append(Group(
            id=gid, count=len(ix), members=[rows[k].name for k in ix], status=first.status, verdict=first.verdict,
            reason=first.reason, device=first.device, capability=first.capability, fingerprint=first.fingerprint,
            facts=node_json(node) if node is not None else None,
            trtllm_cubins=trtllm_cubins_state(node) if node is not None else None,
            results=cells))
    return groups
