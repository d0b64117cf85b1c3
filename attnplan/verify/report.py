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

from . import tolerance as tol
from .generate import Generated, Probe

SCHEMA = "attnplan-verify/1"
# Pseudo-rules of probes drawn over what the packs accept (no one rules boundary): the covering
# sweep, the uniform sample and the exhaustive XQA run.
COVERING = ("sweep", "sample", "exhaustive")
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
            "module": p.module, "kernel_key": p.spec.get("kernel_key"), "sweep_target": p.spec.get("sweep_target"),
            "shape": {"q_lens": p.spec.get("q_lens"), "kv_lens": p.spec.get("kv_lens")} if p.spec.get("kv_lens") else None,
            **{k: res.get(k) for k in ("outcome", "rel_err", "tolerance", "nonfinite", "error", "seconds")},
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
            "date": date, "rules_revision": rules_revision, "quick": quick, "tolerances": {"factor": tol.table()["factor"], "floor": tol.table()["floor"],
                                                                       "spreads": tol.table().get("spreads") or {}},
            "rules": rules_out, "probes": probes_out}


def exit_code(report: dict[str, Any]) -> int:
    """1 when a rule is dangerous or a config it accepts hangs (a sweep, sample or exhaustive probe
    included: their pseudo-rules ``COVERING``), else 0."""
    sweep_bad = any(p["verdicts"].get(c) in ("dangerous", "hang") for p in report["probes"] for c in COVERING)
    return 1 if sweep_bad or any(r["verdict"] in ("dangerous", "hang") for r in report["rules"]) else 0


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


def _tolerance_line(t: dict[str, Any]) -> str:
    if "factor" not in t:                 # reports before issue 22: one threshold per KV dtype class
        return ", ".join(f"{k} {v:g}" for k, v in t.items())
    return (f"{t['factor']:g} x each kernel's measured spread (attnplan/rules/verify_tolerances.yaml; "
            f"{len(t.get('spreads') or {})} kernels calibrated), at least {t['factor']:g} x half an ulp of the output")


def rejudge(report: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """The report with every ok/wrong outcome judged again against a tolerance table (no GPU:
    the relative errors are in the report). Errors, hangs and non-finite outputs stay as they are."""
    out = dict(report, tolerances={"factor": data["factor"], "floor": data["floor"], "spreads": data.get("spreads") or {}})
    probes = []
    for p in report["probes"]:
        p = dict(p)
        if p.get("outcome") in ("ok", "wrong") and p.get("rel_err") is not None and not p.get("nonfinite") \
                and p.get("kernel_key") and not str(p.get("error") or "").startswith("output shape"):
            out_dtype = "float16" if ":q=float16:" in p["kernel_key"] else "bfloat16"
            t = tol.tolerance(p["kernel_key"], out_dtype, data)
            ok = p["rel_err"] <= t
            p.update(tolerance=t, outcome="ok" if ok else "wrong",
                     error=None if ok else f"relative error {p['rel_err']:.3g} > {t:.3g}")
            p["verdicts"] = {r: probe_verdict("refuse" if r in p["refused_by"] else "accept", p["outcome"])
                             for r in p["verdicts"]}
        probes.append(p)
    out["probes"] = probes
    return out


def _torch(report: dict[str, Any]) -> str:
    # An --offline rebuild has no torch to ask and the result lines do not carry its version.
    return f"torch {report['torch']}" if report.get("torch") else "torch version not recorded"


def markdown(report: dict[str, Any]) -> str:
    probes = {p["id"]: p for p in report["probes"]}
    lines = [
        f"# attnplan verify: {report['device']} (capability {report['capability']}), FlashInfer {report['flashinfer']}",
        "",
        f"Generated by `attnplan verify` on {report['date']} (rules revision `{report['rules_revision']}`"
        f"{', --quick' if report['quick'] else ''}; {_torch(report)}). Each probe ran directly through "
        "FlashInfer in its own process, against a float32 reference, with fresh random inputs and a NaN-poisoned "
        "output; tolerances (max |out - ref| / max |ref|): "
        + _tolerance_line(report["tolerances"]) + ". The machine-readable report is the "
        "JSON file beside this one.",
        "",
        summary_table(report),
        "",
    ]
    lines += sweep_markdown(report)
    lines += sample_markdown(report)
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


def sweep_markdown(report: dict[str, Any]) -> list[str]:
    sw = report.get("sweep")
    if not sw:
        return []
    probes = {p["id"]: p for p in report["probes"]}
    ran = [p for p in probes.values() if p["verdicts"].get("sweep") and p["outcome"] not in ("skipped", None)]
    lines = ["## Covering sweep over what the packs accept", "",
             f"Seed {sw['seed']}: {len([p for p in probes.values() if 'sweep' in p['verdicts']])} probes, {len(ran)} run; "
             f"{len(sw['dangerous'])} dangerous. Every pair of factor values that some accepted config holds is held by "
             "an accepted probe; pairs no accepted config holds are refused by the packs and not run.", "",
             "| backend/phase | call | probes | pairs covered / all | refused pairs | not run here |", "|---|---|---|---|---|---|"]
    run = sw.get("pairs_run") or {}
    lines[-2] = "| backend/phase | call | probes | pairs covered / all | pairs held by probes that ran | refused pairs | not run here |"
    lines[-1] = "|---|---|---|---|---|---|---|"
    for c in sw["coverage"]:
        lines.append(f"| {c['target']} | {c['call']} | {c['rows']} | {c['pairs_covered']}/{c['pairs_total']} | "
                     f"{run.get(c['target'], 0)} | {c['pairs_refused']} | {c['skip'] or ''} |")
    lines.append("")
    if sw["dangerous"]:
        lines += ["### Dangerous sweep probes", "", "| probe | backend/phase | call | config | shape | result |", "|---|---|---|---|---|---|"]
        for pid in sw["dangerous"]:
            p = probes[pid]
            lines.append(f"| {pid} | {p['backend']}/{p['phase']} | {p['call']} | {_fmt_changed(p['boundaries'][0]['changed'])} "
                         f"| {p.get('shape')} | {_fmt_result(p)} |")
        lines.append("")
        lines += ["### Rules that must change", ""]
        for r in sw["rules_to_change"]:
            lines.append(f"- `{r['rule']}`: " + "; ".join(r["because"]))
        for s in sw["suspects"]:
            vals = ", ".join(f"{v['factor']}={v['value']} ({v['failing']})" for v in s["values_only_in_failures"][:8])
            lines.append(f"- {s['backend']}/{s['phase']} {s['call']}: {s['failing']} failing, {s['passing']} passing; "
                         f"values only failures hold: {vals or 'none (a pair or the shape)'}")
        lines.append("")
    return lines


def sample_markdown(report: dict[str, Any]) -> list[str]:
    sm = report.get("sample")
    if not sm:
        return []
    mine = [p for p in report["probes"] if "sample" in p["verdicts"]]
    ran = [p for p in mine if p["outcome"] not in ("skipped", None)]
    bad = [p for p in mine if p["verdicts"]["sample"] in ("dangerous", "hang")]
    lines = ["## Uniform sample over what the packs accept", "",
             f"Seed {sm['seed']}: {sm['drawn']} configurations drawn uniformly over every target's space, "
             f"{len(mine)} accepted (probes), {len(ran)} run, {len(bad)} dangerous.", "",
             "| target | probes | space (configurations) |", "|---|---|---|"]
    for t, n in sm["per_target"].items():
        lines.append(f"| {t} | {n} | {sm['space'].get(t, '')} |")
    lines.append("")
    if bad:
        lines += ["| probe | backend/phase | call | config | result |", "|---|---|---|---|---|"]
        for p in bad:
            lines.append(f"| {p['id']} | {p['backend']}/{p['phase']} | {p['call']} | "
                         f"{_fmt_changed(p['boundaries'][0]['changed'])} | {_fmt_result(p)} |")
        lines.append("")
    return lines


def write_report(report: dict[str, Any], md_path: str) -> str:
    """Write ``md_path`` and its JSON twin (same name, .json); returns the JSON path."""
    from pathlib import Path

    md = Path(md_path)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(markdown(report), encoding="utf-8")
    js = md.with_suffix(".json")
    js.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    return str(js)
