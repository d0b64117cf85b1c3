"""Verdicts and the report: per probe, per rule, as JSON (data) and markdown (for people).

A probe's verdict for one rule depends on the side the rule takes on it:

| rule on the probe | FlashInfer ok | error / wrong result | hang |
|---|---|---|---|
| accepts (and every kernel rule does) | consistent | **dangerous** | hang |
| refuses | **stale** | consistent | consistent (refused, and it does not finish) |

A rule is *dangerous* if any of its probes is, else *hang* if a config it accepts hangs, else
*stale* if any config it refuses runs correctly, else *consistent* if any probe ran; a rule
with no probe run is *source-only* when every reason is that its kernels cannot run here
(trtllm-gen off 10.x), else *untested*.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterator

from .generate import TOLERANCE, Generated, Probe

SCHEMA = "attnplan-verify/1"
ORDER = ("dangerous", "hang", "stale", "consistent", "source-only", "untested")


def probe_verdict(side: str, outcome: str) -> str:
    if outcome in ("skipped", "build-timeout"):
        return "skipped"
    if outcome == "hang":
        return "hang" if side == "accept" else "consistent"
    if side == "accept":
        return "consistent" if outcome == "ok" else "dangerous"
    return "stale" if outcome == "ok" else "consistent"


def _rule_probes(rule: str, probes: list[Probe]) -> list[Probe]:
    return [p for p in probes if rule in p.refused_by or any(b.rule == rule for b in p.boundaries)]


def rule_verdict(rule: str, probes: list[Probe], results: dict[str, dict[str, Any]], reasons: list[str]) -> str:
    verdicts = {probe_verdict(p.side_for(rule), results.get(p.id, {}).get("outcome", "skipped"))
                for p in _rule_probes(rule, probes)}
    for v in ("dangerous", "hang", "stale", "consistent"):
        if v in verdicts:
            return v
    if reasons and all(r.startswith("read from source only") for r in reasons):
        return "source-only"
    return "untested"


def build_report(gen: Generated, results: dict[str, dict[str, Any]], *, device: str, capability: str | None,
                 flashinfer: str | None, torch: str | None = None, rules_revision: str = "", quick: bool = False,
                 date: str | None = None) -> dict[str, Any]:
    date = date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    probes_out = []
    for p in gen.probes:
        res = results.get(p.id, {"outcome": "skipped", "error": "not run"})
        rules = sorted({b.rule for b in p.boundaries} | set(p.refused_by))
        probes_out.append({
            "id": p.id, "backend": p.backend, "phase": p.phase, "call": p.call, "config": p.config,
            "refused_by": list(p.refused_by),
            "boundaries": [{"rule": b.rule, "check": b.check, "side": b.side, "changed": b.changed} for b in p.boundaries],
            "module": p.module, **{k: res.get(k) for k in ("outcome", "rel_err", "tolerance", "error", "seconds")},
            "verdicts": {r: probe_verdict(p.side_for(r), res["outcome"]) for r in rules},
        })
    rules_out = []
    for rid in gen.rules:
        mine = _rule_probes(rid, gen.probes)
        gaps = [g for g in gen.gaps if g.rule == rid]
        reasons = [g.reason for g in gaps] + [p.skip for p in mine if p.skip]
        rules_out.append({
            "id": rid, "verdict": rule_verdict(rid, gen.probes, results, reasons),
            "probes": [p.id for p in mine],
            "gaps": [{"check": g.check, "backend": g.backend, "phase": g.phase, "side": g.side, "reason": g.reason}
                     for g in gaps],
        })
    return {"schema": SCHEMA, "device": device, "capability": capability, "flashinfer": flashinfer, "torch": torch,
            "date": date, "rules_revision": rules_revision, "quick": quick, "tolerances": TOLERANCE,
            "rules": rules_out, "probes": probes_out}


def exit_code(report: dict[str, Any]) -> int:
    """1 when a rule is dangerous or a config it accepts hangs, else 0."""
    return 1 if any(r["verdict"] in ("dangerous", "hang") for r in report["rules"]) else 0


def provenance(report: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(rule id, record) for each rule of a report: what a pack's ``verified:`` field holds.

    record = {device, capability, flashinfer, date, verdict} with verdict one of consistent,
    stale, dangerous, hang, untested or source-only ("read from source only": its kernels
    cannot run on this device)."""
    for r in report["rules"]:
        yield r["id"], {"device": report["device"], "capability": report["capability"],
                        "flashinfer": report["flashinfer"], "date": report["date"], "verdict": r["verdict"]}


def _fmt_changed(changed: dict[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('config.')}={v}" for k, v in changed.items()) or "base config"


def _fmt_result(p: dict[str, Any]) -> str:
    if p["outcome"] == "ok":
        return f"ok (rel err {p['rel_err']:.2g} <= {p['tolerance']:g})"
    return f"{p['outcome']}: {p.get('error') or ''}"[:240]


def summary_table(report: dict[str, Any]) -> str:
    rows = ["| rule | verdict | probes run | gaps |", "|---|---|---|---|"]
    probes = {p["id"]: p for p in report["probes"]}
    for r in sorted(report["rules"], key=lambda r: (ORDER.index(r["verdict"]), r["id"])):
        ran = sum(1 for pid in r["probes"] if probes[pid]["outcome"] not in ("skipped", None))
        rows.append(f"| `{r['id']}` | {r['verdict']} | {ran}/{len(r['probes'])} | {len(r['gaps'])} |")
    return "\n".join(rows)


def markdown(report: dict[str, Any]) -> str:
    probes = {p["id"]: p for p in report["probes"]}
    lines = [
        f"# attnplan verify: {report['device']} (capability {report['capability']}), FlashInfer {report['flashinfer']}",
        "",
        f"Generated by `attnplan verify` on {report['date']} (rules revision `{report['rules_revision']}`"
        f"{', --quick' if report['quick'] else ''}; torch {report.get('torch')}). Each probe ran directly through "
        "FlashInfer in its own process, against a float32 reference, with fresh random inputs and a NaN-poisoned "
        "output; tolerances (max |out - ref| / max |ref|): "
        + ", ".join(f"{k} {v:g}" for k, v in report["tolerances"].items()) + ". The machine-readable report is the "
        "JSON file beside this one.",
        "",
        summary_table(report),
        "",
    ]
    for r in sorted(report["rules"], key=lambda r: (ORDER.index(r["verdict"]), r["id"])):
        lines += [f"## `{r['id']}`: {r['verdict']}", ""]
        if r["probes"]:
            lines += ["| probe | backend/phase | call | change | rule side | result | verdict |", "|---|---|---|---|---|---|---|"]
            for pid in r["probes"]:
                p = probes[pid]
                side = "refuses" if r["id"] in p["refused_by"] else "accepts"
                changed = "; ".join(dict.fromkeys(_fmt_changed(b["changed"]) for b in p["boundaries"]))
                lines.append(f"| {pid} | {p['backend']}/{p['phase']} | {p['call']} | {changed} | {side} | "
                             f"{_fmt_result(p)} | {p['verdicts'].get(r['id'])} |")
            lines.append("")
        reasons = list(dict.fromkeys(g["reason"] for g in r["gaps"]))
        for reason in reasons:
            where = sorted({f"{g['backend']}/{g['phase']} {g['side']}" for g in r["gaps"] if g["reason"] == reason})
            lines.append(f"- not probed ({', '.join(where)}): {reason}")
        if reasons:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_report(report: dict[str, Any], md_path: str) -> str:
    """Write ``md_path`` and its JSON twin (same name, .json); returns the JSON path."""
    from pathlib import Path

    md = Path(md_path)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(markdown(report), encoding="utf-8")
    js = md.with_suffix(".json")
    js.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    return str(js)
