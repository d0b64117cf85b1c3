"""The preflight report as text for a terminal: one row per group, then why groups reject or
fall back, warnings, optionally every node, and the summary line.

Every string a node supplied (GPU name, hostname, versions, rule ids and messages, reasons)
passes through ``clean`` before it reaches the terminal: an ANSI escape, a carriage return or a
newline in a node's answer could otherwise recolour the screen or forge rows.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Union

from .model import Cell, PreflightReport

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


def groups_text(c: Cell) -> str:
    """A model's layer groups in one cell: ``sliding x52 fa3/xqa; full x10 fa3/xqa``; where the engine runs
    its own backend, the FlashInfer groups are what it would run if forced, and the cell says so."""
    parts = []
    if c.modelled is False and c.outcome == "runs":
        return "; ".join(f"{g.kind} x{g.count} {c.engine_backend}" for g in c.layer_groups) or "-"
    for g in c.layer_groups:
        if g.status == "ok":
            parts.append(f"{g.kind} x{g.count} {g.prefill}/{g.decode}")
        elif g.status == "rejected":
            parts.append(f"{g.kind} x{g.count} REJECTED {','.join(g.violations)}")
        else:
            parts.append(f"{g.kind} x{g.count} not served")
    return "; ".join(parts) or "-"


def _cell_text(c: Cell, status: str) -> str:
    if c.verdict in ("pass", "warn"):
        text = f"{c.prefill}/{c.decode} {c.kv_layout}/{c.page_size}"
        if len(c.layer_groups) > 1:
            text += f" ({len(c.layer_groups)} groups)"
        return text + (" (differs)" if c.verdict == "warn" else "")
    if c.verdict == "fail":
        if c.outcome is not None:  # the command's verdict: its outcome and rule
            return f"{c.outcome.upper()} " + ",".join(c.violations)
        if c.layer_groups or c.first_failing:  # a model: the first failing group and its rule
            return "REJECTED " + (c.reason or ",".join(c.violations))
        return "REJECTED " + ",".join(c.violations)
    if status == "no-gpu":
        return "no GPU"
    return {"unreachable": "UNREACHABLE", "error": "ERROR", "skipped": "skipped"}.get(status, status)


# ANSI/VT escape sequences (CSI ... final byte, OSC ... BEL/ST, two-byte ESC x), then every
# remaining C0/C1 control and the bidirectional overrides that reorder what a terminal shows.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def clean(text: Any) -> str:
    """``text`` as one line of printable characters: escape sequences removed, other controls
    (CR, LF, TAB, ...) shown as ``?`` so a forged row cannot pass for a real one."""
    s = "" if text is None else str(text)
    if s.isprintable():
        return s
    return _CONTROLS.sub("?", _ESCAPES.sub("", s))


def _clip(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


_STATUS_WORD = {"ok": "ok", "rejected": "REJECTED", "unreachable": "UNREACHABLE", "error": "ERROR",
                "no-gpu": "no GPU", "skipped": "skipped"}


Line = Union[str, tuple[str, str]]  # text, or (text, ANSI colour code) painted after cleaning


def render_text(report: PreflightReport, *, per_node: bool = False, color: bool = False) -> str:
    from attnplan.render import table as _table

    def table(headers: list[Any], rows: list[list[Any]]) -> str:
        # Cells are cleaned before widths are measured: the table's own newlines stay the only ones.
        return _table([clean(h) for h in headers], [[clean(c) for c in r] for r in rows])

    from .upgrade_column import cell_text

    q = report.query
    configs = q.configs
    upgrade_to = next((c.upgrade.to for g in report.groups for c in g.results if c.upgrade is not None), None)
    single = len(configs) == 1
    model = single and configs[0].request is not None
    target = ", ".join(q.targets) if len(", ".join(q.targets)) <= 60 else f"{len(q.targets)} targets"
    out: list[Line] = [f"attnplan preflight: {report.summary.nodes} nodes via {q.source} ({target}), "
                       f"{len(configs)} config{'s' if len(configs) != 1 else ''}, rules {report.rules_revision}"]
    for c in configs:
        label = "config" if c.name == "config" else f"config {c.name}"
        engine = f" (engine {c.engine})" if c.engine else ""
        out.append(f"  {label}: {c.description}{engine}")
    out.append("")
    headers = ["#", "nodes", "members", "device", "cap", "flashinfer"]
    rows = []
    for g in report.groups:
        fi = (g.facts or {}).get("flashinfer_version", {}).get("value") if g.facts else None
        base = [g.id, g.count, compact_names([clean(m) for m in g.members], 40), g.device or "-", g.capability or "-",
                fi or "-"]
        if single:
            c = g.results[0]
            if c.verdict in ("pass", "warn", "fail"):
                word = {"pass": "ok", "warn": "ok (differs)", "fail": "REJECTED"}[c.verdict]
                if c.outcome is not None:  # the command's verdict: what the engine does
                    word = {"pass": c.outcome, "warn": f"{c.outcome} (differs)"}.get(c.verdict, c.outcome.upper())
                detail = ", ".join(c.violations) if c.verdict == "fail" else (c.reason or "-") if c.modelled is False else "-"
                if c.verdict == "fail" and (c.layer_groups or c.first_failing or c.outcome):
                    detail = c.reason or detail  # a model: the first failing layer group and its rule
                base += [word, c.prefill or "-", c.decode or "-",
                         f"{c.kv_layout}/{c.page_size}" if c.kv_layout else "-", _clip(clean(detail), 120)]
            else:
                base += [_STATUS_WORD[g.status], "-", "-", "-", _clip(clean(g.reason or "-"))]
            if model:
                base.append(groups_text(c) if c.layer_groups else "-")
        else:
            base += [_cell_text(c, g.status) for c in g.results]
            if g.status in ("unreachable", "error", "skipped", "no-gpu"):
                base.append(_clip(clean(g.reason or "-")))
            else:
                base.append("")
        if upgrade_to:  # --upgrade-to: one column per config (preflight/upgrade_column.py)
            base += [_clip(clean(cell_text(c.upgrade)), 60) for c in g.results]
        rows.append(base)
    if single:
        headers += ["status", "prefill", "decode", "kv/page", "violations / reason"]
        if model:
            headers.append("layer groups")
    else:
        headers += [c.name for c in configs] + ["reason"]
    if upgrade_to:
        headers += [f"upgrade to {upgrade_to}" if single else f"{c.name} @ {upgrade_to}" for c in configs]
    out += table(headers, rows).split("\n")

    # What each rejection was about, once per group and config.
    shown = 0
    for g in report.groups:
        for c in g.results:
            if c.verdict != "fail" or not c.details or shown >= 8:
                continue
            shown += 1
            name = configs[c.config].name
            out.append("")
            out.append((f"group {g.id} ({g.count} x {g.device or '?'}) rejects {name}:", "31"))
            seen: set[str] = set()
            for v in c.details:
                key = f"{v.get('rule')}:{v.get('message')}"
                if key in seen:
                    continue
                seen.add(key)
                where = f"{v.get('phase')}" + (f"/{v['backend']}" if v.get("backend") else "")
                lg = next((x for x in c.layer_groups if x.index == v.get("group")), None)
                if lg is not None:  # a model: which layer group
                    where = f"{lg.kind} layers {lg.layers} {where}"
                out.append(f"  [{v.get('rule')}] {where}: {v.get('message')}")
                if len(seen) >= 4:
                    break
            if c.suggestions:
                out.append("  suggestions: " + "; ".join(f"{s.get('field')}={s.get('value')}" for s in c.suggestions[:4]))
    # Why a node runs a lower-priority backend (e.g. trtllm-gen skipped for a known hang): the
    # answer's typed fallbacks (a node on an older attnplan sends none).
    shown = 0
    for g in report.groups:
        for c in g.results:
            falls = c.fallbacks if c.verdict in ("pass", "warn") else []
            if not falls or shown >= 8:
                continue
            shown += 1
            out.append("")
            out.append(f"group {g.id} ({g.count} x {g.device or '?'}) falls back on {configs[c.config].name}:")
            for f in falls:
                rules = " ".join(f"[{r}]" for r in f.get("rules", ()))
                lg = next((x for x in c.layer_groups if x.index == f.get("group")), None)
                where = f"{lg.kind} layers {lg.layers} " if lg is not None else ""  # a model: which group
                out.append(f"  {where}{f.get('phase')}: {f.get('skipped')} skipped {rules}; using {f.get('used')}")
    if report.warnings:
        out.append("")
        out.append(("warnings:", "33"))
        out += [f"  - {w.message}" for w in report.warnings]
    if per_node:
        out.append("")
        nrows = []
        for r in report.nodes:
            cells = [_cell_text(c, r.status) for c in r.results]
            nrows.append([r.name, r.address or "-", r.device or "-", r.capability or "-", _STATUS_WORD[r.status],
                          r.group, *cells, _clip(clean(r.reason or ""))])
        out += table(["node", "address", "device", "cap", "status", "group",
                      *(c.name for c in configs), "reason"], nrows).split("\n")
    out.append("")
    s = report.summary
    code = "32;1" if s.exit_code == 0 else ("31;1" if s.exit_code == 1 else "33;1")
    out.append((s.line, code))

    def emit(line: Line) -> str:
        if isinstance(line, tuple):
            text = clean(line[0])
            return f"\033[{line[1]}m{text}\033[0m" if color else text
        return clean(line)

    return "\n".join(emit(line) for line in out)
