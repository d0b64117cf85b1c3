"""From per-node outcomes to the report: verdicts, groups, heterogeneity, summary, text.

Identical nodes (same fingerprint, same result for every config) collapse into one group, so a
1,000-node cluster prints a handful of rows. A config that runs with different backends, KV
layouts or page sizes on different nodes is flagged: a tensor- or pipeline-parallel group
spanning those nodes would mix kernels.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterable, Optional, Sequence

from attnplan.policy import PlanAnswer, default_ruleset
from attnplan.policy.answer import node_json

from .configs import describe
from .model import (
    VERDICT_ORDER,
    Cell,
    Group,
    GroupCell,
    NamedConfig,
    NodeRow,
    Outcome,
    PreflightReport,
    Query,
    QueryConfig,
    Summary,
    Warning,
)

# The plan fields whose disagreement across nodes makes a cluster heterogeneous.
HETERO_FIELDS = ("prefill", "decode", "kv_layout", "page_size")
STATUS_ORDER = {"ok": 0, "rejected": 1, "no-gpu": 2, "unreachable": 3, "error": 4, "skipped": 5}
EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


# -- cells -------------------------------------------------------------------------------
def answer_cell(i: int, a: PlanAnswer) -> Cell:
    rules = list(dict.fromkeys(v.rule for v in a.violations))
    if a.status == "ok" and a.plan is not None:
        kv = a.plan.kv_cache
        return Cell(config=i, verdict="pass", status="ok", prefill=a.plan.prefill.backend,
                    decode=a.plan.decode.backend, kv_layout=kv.layout, page_size=kv.page_size,
                    kv_dtype=kv.view_dtype, violations=rules)
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


def plan_signature(c: Cell) -> tuple[Any, ...]:
    return tuple(getattr(c, f) for f in HETERO_FIELDS)


def cell_key(c: Cell) -> tuple[Any, ...]:
    return (c.verdict, c.status, c.prefill, c.decode, c.kv_layout, c.page_size, c.kv_dtype,
            tuple(c.violations), c.reason if c.verdict in ("error", "skip", "warn") else None)


def _plan_text(sig: tuple[Any, ...]) -> str:
    prefill, decode, layout, page = sig
    return f"{prefill}/{decode} {layout}/{page}"


# -- building the report ---------------------------------------------------------------
def build_report(*, source: str, targets: Sequence[str], configs: Sequence[NamedConfig],
                 outcomes: Sequence[Outcome], options: dict[str, Any] | None = None,
                 elapsed_s: float = 0.0, interrupted: bool = False) -> PreflightReport:
    revision = default_ruleset().revision
    n_cfg = len(configs)
    rows = [_row(o, n_cfg) for o in outcomes]

    warnings = _heterogeneity(rows, configs)
    warnings += _mixed(rows, configs)
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
                    configs=[QueryConfig(name=c.name, config=c.config.model_dump(mode="json")) for c in configs],
                    options=options or {}),
        summary=summary, nodes=rows, groups=groups, warnings=warnings,
    )


def _row(o: Outcome, n_cfg: int) -> NodeRow:
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
    return NodeRow(status=status, verdict=verdict, reason=reason, results=cells, **facts, **base)  # type: ignore[arg-type]


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _heterogeneity(rows: list[NodeRow], configs: Sequence[NamedConfig]) -> list[Warning]:
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
            values = Counter(str(getattr(r.results[i], f)) for r in ok)
            if len(values) < 2:
                continue
            vs = values.most_common()
            label = {"kv_layout": "KV layout", "page_size": "page size"}.get(f, f)
            parts = f"{label} {vs[0][0]} on {_nodes(vs[0][1])} vs " + ", ".join(f"{v} on {n}" for v, n in vs[1:])
            prefix = f"{nc.name}: " if len(configs) > 1 else ""
            out.append(Warning(kind="heterogeneous", config=i, field=f, values=dict(vs), message=(
                f"{prefix}{parts} - a tensor- or pipeline-parallel group across them would mix kernels")))
    return out


def _mixed(rows: list[NodeRow], configs: Sequence[NamedConfig]) -> list[Warning]:
    out = []
    for i, nc in enumerate(configs):
        ok = sum(1 for r in rows if r.status in ("ok", "rejected") and r.results[i].status == "ok")
        bad = [r for r in rows if r.status in ("ok", "rejected") and r.results[i].status == "rejected"]
        if ok and bad:
            rules = Counter(rule for r in bad for rule in r.results[i].violations)
            out.append(Warning(kind="mixed", config=i, values={"ok": ok, "rejected": len(bad)}, message=(
                f"{nc.name}: runs on {_nodes(ok)}, rejected on {len(bad)} ({', '.join(r for r, _ in rules.most_common(4))})")))
    return out


def _group_key(r: NodeRow) -> tuple[Any, ...]:
    if r.status in ("unreachable", "error", "skipped"):
        return (r.status, r.reason)
    return (r.status, r.fingerprint, r.rules_revision, tuple(cell_key(c) for c in r.results))


def _groups(rows: list[NodeRow], outcomes: Sequence[Outcome], configs: Sequence[NamedConfig]) -> list[Group]:
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
                gc.notes = list(a.notes)
            cells.append(gc)
        groups.append(Group(
            id=gid, count=len(ix), members=[rows[k].name for k in ix], status=first.status, verdict=first.verdict,
            reason=first.reason, device=first.device, capability=first.capability, fingerprint=first.fingerprint,
            facts=node_json(o.answers[0].node) if o.answers else None, results=cells))
    return groups


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


# -- text --------------------------------------------------------------------------------
_DIGITS = re.compile(r"(\d+)")


def compact_names(names: Iterable[str], max_chars: int = 60) -> str:
    """``b200-0 .. b200-7, h1:8000`` -> ``b200-[0-7], h1:8000``; ``10.0.0.1:8000, 10.0.0.2:8000``
    -> ``10.0.0.[1-2]:8000`` (the number that varies is the one ranged); truncated with
    ``(+N more)``."""
    names = list(dict.fromkeys(names))
    shapes: dict[tuple[Any, ...], list[list[str]]] = {}
    for n in names:
        toks = _DIGITS.split(n)
        shapes.setdefault((len(toks), tuple(toks[0::2])), []).append(toks)
    parts: list[tuple[str, int]] = []  # text, how many names it stands for
    for (ntok, _), group in shapes.items():
        if ntok == 1:
            parts += [(t[0], 1) for t in group]
            continue
        # Range over the numeric position whose removal leaves the fewest distinct rests.
        best_k, best_rests = None, None
        for k in range(1, ntok, 2):
            rests = len({tuple(t[:k] + t[k + 1:]) for t in group})
            if best_rests is None or rests <= best_rests:
                best_k, best_rests = k, rests
        k = best_k  # type: ignore[assignment]
        buckets: dict[tuple[str, ...], list[str]] = {}
        for t in group:
            buckets.setdefault(tuple(t[:k] + ["\0"] + t[k + 1:]), []).append(t[k])
        for rest, nums in buckets.items():
            pre, suf = "".join(rest[:k]), "".join(rest[k + 1:])
            parts.append((pre + _ranges(nums, max(12, max_chars - len(pre) - len(suf))) + suf, len(nums)))
    out = ""
    total = sum(n for _, n in parts)
    shown = 0
    for text, n in parts:
        candidate = text if not out else f"{out}, {text}"
        if out and len(candidate) > max_chars:
            return f"{out} (+{total - shown} more)"
        out = candidate
        shown += n
    return out


def _ranges(nums: list[str], max_chars: int = 1 << 30) -> str:
    """["1", "2", "3", "5"] -> "[1-3,5]"; zero-padded numbers keep their width apart; past
    ``max_chars`` the list ends with ``...+N`` (N more numbers)."""
    if len(nums) == 1:
        return nums[0]
    by_width: dict[int, list[int]] = {}
    for s in nums:
        width = len(s) if s.startswith("0") and len(s) > 1 else 0
        by_width.setdefault(width, []).append(int(s))
    ranges: list[str] = []
    for width, values in by_width.items():
        fmt = (lambda v: str(v).zfill(width)) if width else str
        vals = sorted(set(values))
        start = prev = vals[0]
        for v in vals[1:] + [None]:  # type: ignore[list-item]
            if v is not None and v == prev + 1:
                prev = v
                continue
            ranges.append(fmt(start) if start == prev else f"{fmt(start)}-{fmt(prev)}")
            if v is not None:
                start = prev = v
    text = ",".join(ranges)
    if len(text) + 2 > max_chars:
        shown, count = [], 0
        for r in ranges:
            if shown and len(",".join(shown + [r])) + 10 > max_chars:
                break
            shown.append(r)
            lo, _, hi = r.partition("-")
            count += int(hi) - int(lo) + 1 if hi else 1
        text = ",".join(shown) + f",...+{len(set(nums)) - count}"
    return "[" + text + "]"


def _cell_text(c: Cell, status: str) -> str:
    if c.verdict in ("pass", "warn"):
        text = f"{c.prefill}/{c.decode} {c.kv_layout}/{c.page_size}"
        return text + (" (differs)" if c.verdict == "warn" else "")
    if c.verdict == "fail":
        return "REJECTED " + ",".join(c.violations)
    if status == "no-gpu":
        return "no GPU"
    return {"unreachable": "UNREACHABLE", "error": "ERROR", "skipped": "skipped"}.get(status, status)


def _clip(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


_STATUS_WORD = {"ok": "ok", "rejected": "REJECTED", "unreachable": "UNREACHABLE", "error": "ERROR",
                "no-gpu": "no GPU", "skipped": "skipped"}


def render_text(report: PreflightReport, *, per_node: bool = False, color: bool = False) -> str:
    from attnplan.render import table

    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    q = report.query
    configs = q.configs
    single = len(configs) == 1
    target = ", ".join(q.targets) if len(", ".join(q.targets)) <= 60 else f"{len(q.targets)} targets"
    out = [f"attnplan preflight: {report.summary.nodes} nodes via {q.source} ({target}), "
           f"{len(configs)} config{'s' if len(configs) != 1 else ''}, rules {report.rules_revision}"]
    from attnplan.policy import AttentionConfig

    for c in configs:
        label = "config" if c.name == "config" else f"config {c.name}"
        out.append(f"  {label}: {describe(AttentionConfig.model_validate(c.config))}")
    out.append("")
    headers = ["#", "nodes", "members", "device", "cap", "flashinfer"]
    rows = []
    for g in report.groups:
        fi = (g.facts or {}).get("flashinfer_version", {}).get("value") if g.facts else None
        base = [g.id, g.count, compact_names(g.members, 40), g.device or "-", g.capability or "-", fi or "-"]
        if single:
            c = g.results[0]
            if c.verdict in ("pass", "warn", "fail"):
                word = {"pass": "ok", "warn": "ok (differs)", "fail": "REJECTED"}[c.verdict]
                detail = ", ".join(c.violations) if c.verdict == "fail" else "-"
                base += [word, c.prefill or "-", c.decode or "-",
                         f"{c.kv_layout}/{c.page_size}" if c.kv_layout else "-", detail]
            else:
                base += [_STATUS_WORD[g.status], "-", "-", "-", _clip(g.reason or "-")]
        else:
            base += [_cell_text(c, g.status) for c in g.results]
            if g.status in ("unreachable", "error", "skipped", "no-gpu"):
                base.append(_clip(g.reason or "-"))
            else:
                base.append("")
        rows.append(base)
    if single:
        headers += ["status", "prefill", "decode", "kv/page", "violations / reason"]
    else:
        headers += [c.name for c in configs] + ["reason"]
    out.append(table(headers, rows))

    # What each rejection was about, once per group and config.
    shown = 0
    for g in report.groups:
        for c in g.results:
            if c.verdict != "fail" or not c.details or shown >= 8:
                continue
            shown += 1
            name = configs[c.config].name
            out.append("")
            out.append(paint(f"group {g.id} ({g.count} x {g.device or '?'}) rejects {name}:", "31"))
            seen: set[str] = set()
            for v in c.details:
                key = f"{v['rule']}:{v.get('message')}"
                if key in seen:
                    continue
                seen.add(key)
                where = v["phase"] + (f"/{v['backend']}" if v.get("backend") else "")
                out.append(f"  [{v['rule']}] {where}: {v['message']}")
                if len(seen) >= 4:
                    break
            if c.suggestions:
                out.append("  suggestions: " + "; ".join(f"{s['field']}={s['value']}" for s in c.suggestions[:4]))
    # Why a node runs a lower-priority backend (e.g. trtllm-gen skipped for a known hang).
    shown = 0
    for g in report.groups:
        for c in g.results:
            falls = [n for n in c.notes if " skipped (" in n] if c.verdict in ("pass", "warn") else []
            if not falls or shown >= 8:
                continue
            shown += 1
            out.append("")
            out.append(f"group {g.id} ({g.count} x {g.device or '?'}) falls back on {configs[c.config].name}:")
            seen_why: set[str] = set()
            for n in falls:
                why = n.split(": ", 1)[-1]
                if why not in seen_why:
                    seen_why.add(why)
                    out.append(f"  {n}")
    if report.warnings:
        out.append("")
        out.append(paint("warnings:", "33"))
        out += [f"  - {w.message}" for w in report.warnings]
    if per_node:
        out.append("")
        nrows = []
        for r in report.nodes:
            cells = [_cell_text(c, r.status) for c in r.results]
            nrows.append([r.name, r.address or "-", r.device or "-", r.capability or "-", _STATUS_WORD[r.status],
                          r.group, *cells, _clip(r.reason or "")])
        out.append(table(["node", "address", "device", "cap", "status", "group",
                          *(c.name for c in configs), "reason"], nrows))
    out.append("")
    s = report.summary
    code = "32;1" if s.exit_code == 0 else ("31;1" if s.exit_code == 1 else "33;1")
    out.append(paint(s.line, code))
    return "\n".join(out)
