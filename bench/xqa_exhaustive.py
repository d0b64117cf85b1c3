"""Every XQA JIT module attnplan accepts on 9.x, run on the GPU against the float32 reference (issue 38).

    python3 bench/xqa_exhaustive.py --count                       # modules per tier (no GPU)
    python3 bench/xqa_exhaustive.py --out DIR [--tiers 0,1,2] [--jobs 16] [--build-jobs 2]
        [--deadline S] [--resume DIR/results.jsonl]
    python3 bench/xqa_exhaustive.py --out DIR --offline "H100 ..." --resume A.jsonl [--resume B.jsonl]
                                                                  # report from results only (no GPU)

The modules and probes are attnplan/verify/exhaustive.py's (every compile parameter of
gen_xqa_module over its whole domain, kept where every kernel rule accepts; tiers: 0 refused
modules that confirm a measured limit, 1 fp8 KV bf16 query, 2 fp8 KV fp16 query, 3 fp8
speculative, 4 16-bit KV, 5 16-bit speculative). They run through the sweep's machinery
(attnplan/verify/runner.py run_modules, batch_subprocess_runner, child.py): one process per JIT
module, which builds it and runs its probes; a probe that errors (an illegal memory access
poisons the CUDA context) ends its process and the module's next probe runs in a fresh one.
Writes DIR/results.jsonl (one line per probe as it finishes; --resume takes it), DIR/report.md
and .json (attnplan verify's report, pseudo-rule ``exhaustive``) and DIR/summary.md (per tier and
dtype: modules run, ok, failed; every failure). Exit 1 when an accepted module fails.

On a lease, start it under bench/sweep_lease.sh (setsid, survives the 10-minute call limit):

    bash bench/sweep_lease.sh 560 -- python3 bench/xqa_exhaustive.py --out /tmp/lease --tiers 0,1,2 --jobs 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _node(declared: bool):
    from attnplan.policy import simulated_node
    from attnplan.node import local_node

    return simulated_node("H100") if declared else local_node()


def summary(report: dict[str, Any], tiers_run: list[int], generated: dict[str, Any]) -> str:
    """Per (tier, kv, query dtype, q_len): modules and probes run, ok, failed; then every failure."""
    rows: dict[tuple, dict[str, Any]] = {}
    fails = []
    for p in report["probes"]:
        ch = p["boundaries"][0]["changed"]
        side = p["boundaries"][0]["side"]
        key = (p.get("tier"), ch["kv"], ch["dtype"], 1 + ch["spec"], side)
        r = rows.setdefault(key, {"probes": 0, "ran": 0, "ok": 0, "bad": 0, "modules": set(), "modules_ran": set(),
                                  "heads": set(), "groups": set(), "pages": set()})
        r["probes"] += 1
        r["modules"].add(p["module"])
        out = p.get("outcome")
        if out in ("ok", "wrong", "error", "hang"):
            r["ran"] += 1
            r["modules_ran"].add(p["module"])
            r["heads"].add(ch["head"][0])
            r["groups"].add(ch["group"])
            r["pages"].add(ch["page"])
            r["ok" if out == "ok" else "bad"] += 1
            if out != "ok":
                fails.append(p)
    lines = [f"# XQA exhaustive on {report['device']} (capability {report['capability']}), FlashInfer {report['flashinfer']}",
             "", f"{report['date']}; tiers run: {tiers_run}; generated: {json.dumps(generated)}", "",
             "| tier | kv | query | q_len | rules | modules run / generated | probes run | ok | failed | heads | groups | pages |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (tier, kv, q, ql, side), r in sorted(rows.items(), key=lambda x: tuple(str(v) for v in x[0])):
        span = lambda s: f"{min(s)}-{max(s)} ({len(s)})" if s else "-"  # noqa: E731
        lines.append(f"| {tier} | {kv} | {q} | {ql} | {'accept' if side == 'accept' else 'refuse'} | "
                     f"{len(r['modules_ran'])}/{len(r['modules'])} | {r['ran']}/{r['probes']} | {r['ok']} | {r['bad']} | "
                     f"{span(r['heads'])} | {span(r['groups'])} | {','.join(map(str, sorted(r['pages'])))} |")
    lines += ["", f"## Failures ({len(fails)})", ""]
    if fails:
        lines += ["| probe | rules | kv | query | head | group | page | window | q_len | sinks | outcome |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in fails:
            ch = p["boundaries"][0]["changed"]
            lines.append(f"| {p['id']} | {'refused by ' + ','.join(p['refused_by']) if p['refused_by'] else 'accepted'} | "
                         f"{ch['kv']} | {ch['dtype']} | {ch['head'][0]} | {ch['group']} | {ch['page']} | {ch['window']} | "
                         f"{1 + ch['spec']} | {ch['sinks']} | {p['outcome']}: {str(p.get('error') or '')[:160]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="results.jsonl, report.md/.json and summary.md here")
    ap.add_argument("--tiers", default="0,1,2,3,4,5", help="comma-separated tiers to run, in order (default all)")
    ap.add_argument("--count", action="store_true", help="print the modules per tier and exit (no GPU: H100 declared)")
    ap.add_argument("--declared", action="store_true",
                    help="judge on a declared H100 instead of this machine's probed facts (a dry run without a GPU)")
    ap.add_argument("--limit", type=int, default=None, help="run only the first N modules of the chosen tiers")
    ap.add_argument("--no-variants", action="store_true", help="one probe per module (no sinks + wide window probe)")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--build-jobs", type=int, default=2)
    ap.add_argument("--build-timeout", type=float, default=600.0)
    ap.add_argument("--probe-timeout", type=float, default=90.0)
    ap.add_argument("--deadline", type=float, default=None, help="start no module after this many seconds")
    ap.add_argument("--resume", action="append", default=[], help="results.jsonl of an earlier run (repeatable)")
    ap.add_argument("--offline", metavar="DEVICE",
                    help="no GPU: the report and summary from --resume results only (probes without one are "
                         "'not run'), judged on a declared H100, the device named DEVICE in the report")
    a = ap.parse_args(argv)

    from attnplan.policy import default_ruleset
    from attnplan.verify import Generated, build_report, write_report
    from attnplan.verify.exhaustive import counts, limit_tiers, xqa_modules, xqa_probes
    from attnplan.verify.select import is_kernel_rule

    t0 = time.monotonic()
    log = lambda s: print(f"xqa-exhaustive {time.monotonic() - t0:7.1f}s {s}", file=sys.stderr, flush=True)  # noqa: E731
    rs = default_ruleset()
    node = _node(a.count or a.declared or bool(a.offline))
    log("enumerating XQA modules over the accepted space...")
    mods = xqa_modules(rs, node)
    generated = counts(mods)
    log(json.dumps(generated))
    if a.count:
        print(json.dumps(generated, indent=1))
        return 0
    if not a.out:
        ap.error("--out is needed to run")
    tiers = [int(t) for t in a.tiers.split(",") if t.strip()]
    chosen = sorted(limit_tiers(mods, tiers), key=lambda m: tiers.index(m.tier))[:a.limit]
    probes = xqa_probes(rs, node, chosen, variants=not a.no_variants)
    for p in probes:
        p.spec.setdefault("tier", None)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "results.jsonl"

    from attnplan.cli.verify import _children_die_with_us, _results_log, _resumed
    from attnplan.verify.runner import batch_subprocess_runner, cpu_summary, run_modules

    done = {k: v for k, v in _resumed(a.resume or None, probes).items() if not infra_error(v)}
    todo = [] if a.offline else [p for p in probes if p.id not in done]
    log(f"tiers {tiers}: {len(chosen)} modules, {len(probes)} probes; {len(done)} resumed, {len(todo)} to run")
    env = dict(os.environ, MAX_JOBS=str(a.build_jobs))
    with _children_die_with_us():
        results = {} if not todo else run_modules(todo, batch_subprocess_runner(env=env), jobs=a.jobs, build_timeout=a.build_timeout,
                              probe_timeout=a.probe_timeout, deadline=a.deadline, progress=log,
                              on_result=_results_log(str(log_path)))
    cost = cpu_summary(results, os.cpu_count())
    if cost:
        log(cost)
    results.update(done)
    rules = [r.id for r in rs.rules if is_kernel_rule(r) and "xqa" in (r.id.split(".")[0],)]
    report = build_report(Generated(probes, [], rules), results, device=a.offline or _label(),
                          capability=node.capability_str, flashinfer=node.flashinfer_version.value,
                          torch=node.torch_version.value, rules_revision=rs.revision)
    for rec, p in zip(report["probes"], probes):
        rec["tier"] = p.spec.get("tier")
    judge_sides(report)
    report["exhaustive"] = {"generated": generated, "tiers_run": tiers, "modules_chosen": len(chosen)}
    write_report(report, str(out / "report.md"))
    text = summary(report, tiers, generated)
    (out / "summary.md").write_text(text, encoding="utf-8")
    print(text)
    bad = [p for p in report["probes"] if p["verdicts"].get("exhaustive") in ("dangerous", "hang")]
    return 1 if bad else 0


def judge_sides(report: dict[str, Any]) -> None:
    """The pseudo-rule ``exhaustive`` judged on each probe's own side: a probe the packs refuse
    (a tier-0 confirmation, a sinks variant xqa.spec-sinks refuses) that fails confirms the
    refusal ('consistent'; 'stale' if it ran correctly), and only an accepted probe that fails is
    'dangerous'. (verify.report's side_for reads refused_by, which never names the pseudo-rule, so
    it would judge every probe as accepted.)"""
    from attnplan.verify.report import probe_verdict

    for rec in report["probes"]:
        if "exhaustive" in rec["verdicts"]:
            rec["verdicts"]["exhaustive"] = probe_verdict(rec["boundaries"][0]["side"], rec.get("outcome") or "skipped")


def infra_error(rec: dict[str, Any]) -> bool:
    """A result the kernel never produced: the probe's process could not load the rule packs (a
    checkout edited while the run read it: 'RulePackError', 7 probes of the 2026-11-25/26 leases).
    It is run again on resume and counts as not run in the report."""
    return rec.get("outcome") == "error" and str(rec.get("error") or "").startswith("RulePackError")


def _label() -> str:
    from attnplan.cli.verify import _device_label, _gpu

    name = _gpu()
    return _device_label(name) if name else "no GPU (dry run)"


if __name__ == "__main__":
    sys.exit(main())
