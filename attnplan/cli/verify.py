"""``verify``: hold every kernel rule against this GPU, directly through FlashInfer (issue 13)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from attnplan.policy import InvalidInputError

from .options import add_node_args, add_rules_arg, node_from_args, ruleset_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check every kernel rule against this GPU, through FlashInfer",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=(
                           "Probe each kernel rule on both sides of its boundary (configs generated from the rule's\n"
                           "conditions), each probe run directly through FlashInfer in its own process against a\n"
                           "float32 reference. Per rule: consistent, stale (refuses something that runs correctly)\n"
                           "or dangerous (accepts something that fails or computes wrong).\n"
                           "Exit 0: no rule dangerous; 1: some rule dangerous (or a config it accepts hangs);\n"
                           "2: bad input or no GPU."))
    p.add_argument("--quick", action="store_true", help="one probe per side of each boundary")
    p.add_argument("--sweep", action="store_true",
                   help="a covering sweep over what the packs accept here (every pair of factor values, every "
                        "--strength-tuple of each JIT family's compiled ones), not boundaries")
    p.add_argument("--seed", type=int, default=0, help="the sweep's or sample's seed (same rules, node and seed: same probes)")
    p.add_argument("--strength", type=int, default=3, metavar="T",
                   help="with --sweep: cover every T-tuple of the values of the factors each JIT family compiles in "
                        "(every pair of the others); default 3 (issue 38: a failure needing three compiled values "
                        "at once escaped the pairwise sweep); 2 is the pairwise sweep of docs/verified")
    p.add_argument("--sample", type=int, metavar="N",
                   help="N random configurations drawn uniformly from what the packs accept here (not the sweep's "
                        "grid): an independent check beside the covering sweep")
    p.add_argument("--target", action="append", metavar="LABEL",
                   help="sweep only this backend or target (e.g. xqa, fa2/decode+sinks; repeatable)")
    p.add_argument("--calibrate", metavar="FILE.yaml",
                   help="with --sweep: also run each kernel's plainest probe re-seeded, write the measured spreads "
                        "here and judge the sweep by them")
    p.add_argument("--tolerances", metavar="FILE.yaml", help="judge by this spread table (default: the shipped one)")
    p.add_argument("--results-log", metavar="FILE.jsonl", help="append each probe's result here as it finishes")
    p.add_argument("--resume", metavar="FILE.jsonl", action="append",
                   help="take results from a --results-log of an earlier (partial) run; run only the rest")
    p.add_argument("--offline", action="store_true",
                   help="no GPU: build the report from --resume results only (probes without one are 'not run'); "
                        "with --device naming the GPU they ran on")
    p.add_argument("--rejudge", metavar="REPORT.json",
                   help="judge a report's results again by --tolerances (no GPU) and rewrite --report")
    p.add_argument("--rule", action="append", metavar="ID", help="only this rule (repeatable)")
    p.add_argument("--out", metavar="DIR", help="write probes.jsonl, report.json and report.md here")
    p.add_argument("--report", metavar="FILE.md", help="write the markdown report here and its JSON beside it")
    p.add_argument("--list", action="store_true", help="print the probes (JSON lines) without running them (no GPU needed)")
    p.add_argument("--provenance", metavar="REPORT.json",
                   help="print each rule's `verified:` record from a report (JSON lines; no GPU needed)")
    p.add_argument("--jobs", type=int, default=6, help="probe processes at a time (default 6)")
    p.add_argument("--isolate", action="store_true",
                   help="a fresh process for every probe (default: one per JIT module, a fresh one after any "
                        "probe that errors, crashes or hangs)")
    p.add_argument("--build-timeout", type=float, default=420.0, help="limit for a probe that builds its module (s)")
    p.add_argument("--probe-timeout", type=float, default=90.0, help="limit for every other probe (s)")
    p.add_argument("--deadline", type=float, default=None, help="start no probe after this many seconds")
    p.add_argument("--build-jobs", type=int, default=None,
                   help="MAX_JOBS for each probe's JIT build (default: 2 x cores / --jobs, at least 2)")
    add_node_args(p)
    add_rules_arg(p)
    p.set_defaults(run=run)


def _gpu() -> Optional[str]:
    """The GPU's name, or None when there is none (torch missing, no CUDA device)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def _device_label(name: str) -> str:
    for token in ("H100", "H200", "H20", "A100", "L40S", "B200", "B300", "GB200", "GB300"):
        if token in name.replace("NVIDIA ", ""):
            return token
    return name.replace("NVIDIA ", "").replace(" ", "-")


def run(args: argparse.Namespace) -> int:
    from attnplan.node import local_node
    from attnplan.verify import build_report, exit_code, generate, run_probes, subprocess_runner, write_report
    from attnplan.verify.runner import cpu_summary
    from attnplan.verify.report import summary_table

    if args.provenance:
        return _print_provenance(args.provenance)
    if args.tolerances:
        from attnplan.verify import tolerance

        tolerance.use(args.tolerances)
    if args.rejudge:
        return _rejudge(args)
    if args.jobs < 1:
        raise InvalidInputError("--jobs", "must be at least 1")
    if args.strength < 2:
        raise InvalidInputError("--strength", "must be at least 2 (every pair)")
    if args.sample is not None and (args.sample < 1 or args.sweep):
        raise InvalidInputError("--sample", "takes a count of at least 1, without --sweep")
    t0 = time.monotonic()
    log = lambda s: print(f"verify {time.monotonic() - t0:7.1f}s {s}", file=sys.stderr, flush=True)  # noqa: E731
    if args.sweep or args.sample:
        # Issue 40 class 9: before the first probe line come the rule load, the GPU probe (torch's
        # import) and the generation - over 10 s of silence on a 2-core machine. Say so first.
        what = "covering sweep" if args.sweep else f"uniform sample of {args.sample}"
        log(f"loading rules and this node's facts, then generating the {what} (seed {args.seed}; "
            f"up to a minute of CPU before the first probe)...")
    rs = ruleset_from_args(args)
    declared = node_from_args(args)
    if declared is not None and not (args.list or args.offline):
        raise InvalidInputError("--device/--capability", "a declared node can only be listed (--list): probes run on this GPU")
    if args.offline and (declared is None or not args.resume):
        raise InvalidInputError("--offline", "needs --device (the GPU the results came from) and --resume FILE")
    gpu = None if ((args.list or args.offline) and declared is not None) else _gpu()
    if args.offline:
        gpu = str(declared.gpu_name.value or "declared")
    if gpu is None and not args.list:
        print("attnplan: error: verify needs a CUDA GPU and none was found (use --list to see the probes)", file=sys.stderr)
        return 2
    node = declared if declared is not None else local_node()
    if node.capability.value is None:
        raise InvalidInputError("device", "the GPU's compute capability is unknown: nothing to verify against")
    sw = None
    sm = None
    if args.sweep:
        from attnplan.verify import Generated
        from attnplan.verify.sweep import calibration_probes, sweep

        # The targets before a --target one are covered too (a target reuses the rows of those
        # before it, so its probes are the same in a part or a whole run): up to ~25 s of CPU.
        log(f"generating the covering sweep (seed {args.seed}, strength {args.strength}) over what the packs "
            f"accept on capability {node.capability_str}...")
        sw = sweep(rs, node, seed=args.seed, only=args.target, strength=args.strength, progress=log)
        if args.target and not sw.coverage:
            raise InvalidInputError("--target", f"no sweep target {args.target}")
        calib = calibration_probes(sw.probes) if args.calibrate else []
        gen = Generated(calib + sw.probes, [], [])
    elif args.sample:
        from attnplan.verify import Generated
        from attnplan.verify.sweep import sample

        log(f"drawing {args.sample} configurations uniformly from what the packs accept on capability "
            f"{node.capability_str} (seed {args.seed})...")
        sm = sample(rs, node, args.sample, seed=args.seed, only=args.target)
        if not sm.probes:
            raise InvalidInputError("--sample", f"no accepted configuration drawn on {args.target or 'any target'}")
        log(f"drew {sm.drawn} configurations, {len(sm.probes)} accepted: {sm.per_target}")
        gen = Generated(sm.probes, [], [])
    else:
        try:
            gen = generate(rs, node, only=args.rule, quick=args.quick)
        except KeyError as exc:
            raise InvalidInputError("--rule", f"no rule {exc.args[0]!r}") from None
    if args.list:
        for p in gen.probes:
            print(json.dumps({"id": p.id, "backend": p.backend, "phase": p.phase, "call": p.call, "config": p.config,
                              "refused_by": list(p.refused_by), "skip": p.skip}), flush=True)
        return 0
    log(f"{gpu}: {len(gen.probes)} probes for {len(gen.rules)} kernel rules "
        f"({len({p.module for p in gen.probes if not p.skip})} JIT modules)")
    build_jobs = args.build_jobs or max(2, 2 * (os.cpu_count() or 8) // args.jobs)
    env = dict(os.environ, MAX_JOBS=str(build_jobs))   # FlashInfer's ninja reads MAX_JOBS
    log(f"{args.jobs} probe process(es) at a time, MAX_JOBS={build_jobs} for each build")
    done = _resumed(args.resume, gen.probes)
    if done:
        log(f"resumed: {len(done)} result(s) from {', '.join(args.resume)}")
    sink = _results_log(args.results_log)
    todo = [] if args.offline else [p for p in gen.probes if p.id not in done]
    limits = dict(jobs=args.jobs, build_timeout=args.build_timeout, probe_timeout=args.probe_timeout,
                  deadline=args.deadline, progress=log, on_result=sink)
    with _children_die_with_us():
        if args.isolate:
            results = run_probes(todo, subprocess_runner(env=env), **limits)
        else:
            from attnplan.verify.runner import batch_subprocess_runner, run_modules

            results = run_modules(todo, batch_subprocess_runner(env=env), **limits)
    cost = cpu_summary(results, os.cpu_count())
    if cost:
        log(cost)
    results.update(done)
    report = build_report(gen, results, device=_device_label(gpu or ""), capability=node.capability_str,
                          flashinfer=node.flashinfer_version.value, torch=node.torch_version.value,
                          rules_revision=rs.revision, quick=args.quick)
    if sw is not None:
        report = _finish_sweep(report, sw, rs, args)
    if sm is not None:
        from attnplan.verify import tolerance
        from attnplan.verify.report import rejudge

        report = rejudge(report, tolerance.table())
        report["sample"] = sm.summary()
    _emit(report, args.out)
    if args.report:
        log(f"report: {args.report} and {write_report(report, args.report)}")
    print(summary_table(report), file=sys.stderr)
    return exit_code(report)


@contextlib.contextmanager
def _children_die_with_us() -> Iterator[None]:
    """SIGTERM (a lease's end, ``timeout``) ends the run as Ctrl-C does, and either way every probe
    process still running (its own session: a JIT build with its ninja and nvcc) is killed, so no
    build outlives the run. Finished results are already in --results-log."""
    from attnplan.verify.runner import PROCESSES

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        yield
    finally:
        n = PROCESSES.kill_all()
        if n:
            print(f"verify: stopped; killed {n} probe process(es)", file=sys.stderr, flush=True)
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _resumed(paths: Optional[list[str]], probes: list[Any]) -> dict[str, dict[str, Any]]:
    """Results of an earlier run by probe id, matched on the probe's content digest (the part of
    its id after the dash), so a regenerated sweep takes them whatever its numbering. Probes that
    were only skipped for time are run again."""
    if not paths:
        return {}
    from attnplan.safeio import read_bounded

    by_digest = {p.id.split("-", 1)[-1]: p.id for p in probes}
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in read_bounded(path, what="--resume").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            pid = by_digest.get(str(rec.get("digest")))
            if pid and rec.get("outcome") not in (None, "skipped", "build-timeout"):
                out[pid] = {k: v for k, v in rec.items() if k != "digest"}
    return out


def _results_log(path: Optional[str]) -> Any:
    if not path:
        return lambda p, r: None
    import threading

    lock = threading.Lock()

    def write(probe: Any, res: dict[str, Any]) -> None:
        with lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"digest": probe.id.split("-", 1)[-1], "id": probe.id, **res}, default=str) + "\n")
    return write


def _finish_sweep(report: dict[str, Any], sw: Any, rs: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Calibrate (when asked), judge every result by the spread table, add the sweep's findings."""
    from attnplan.verify import tolerance
    from attnplan.verify.report import rejudge
    from attnplan.verify.sweep import findings

    data = tolerance.table()
    if args.calibrate:
        import yaml

        measured = [(p["kernel_key"], p["rel_err"]) for p in report["probes"]
                    if p["boundaries"][0]["rule"] == "calibration" and p.get("rel_err") is not None
                    and not p.get("nonfinite") and p.get("outcome") in ("ok", "wrong")]
        data = tolerance.calibrate(measured, data, device=report["device"], flashinfer=str(report["flashinfer"]),
                                   date=report["date"])
        Path(args.calibrate).write_text(_TABLE_HEAD + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    report = rejudge(report, data)
    report["sweep"] = {"seed": sw.seed, "strength": sw.strength, "coverage": sw.summary(), **findings(report, rs)}
    return report


_TABLE_HEAD = """# attnplan verify: per kernel, the spread of a correct kernel against the float32 reference over the
# same dequantized cache (max |out - ref| / max |ref|), measured by `attnplan verify --sweep --calibrate`
# (each kernel's plainest sweep probe, re-seeded); threshold = factor x spread (attnplan/verify/tolerance.py).
"""


def _rejudge(args: argparse.Namespace) -> int:
    from attnplan.safeio import parse_json, read_bounded
    from attnplan.verify import tolerance
    from attnplan.verify.report import rejudge, summary_table, write_report
    from attnplan.verify.sweep import findings

    if not args.report:
        raise InvalidInputError("--report", "--rejudge needs --report FILE.md to write the judged report to")
    report = parse_json(read_bounded(args.rejudge, what="--rejudge"), what="--rejudge", name=args.rejudge)
    report = rejudge(report, tolerance.table())
    if report.get("sweep"):
        report["sweep"].update(findings(report, ruleset_from_args(args)))
    write_report(report, args.report)
    print(summary_table(report), file=sys.stderr)
    from attnplan.verify import exit_code

    return exit_code(report)


def _print_provenance(path: str) -> int:
    from attnplan.safeio import parse_json, read_bounded
    from attnplan.verify import provenance

    report = parse_json(read_bounded(path, what="--provenance"), what="--provenance", name=path)
    try:
        records = list(provenance(report))
    except (KeyError, TypeError) as exc:
        raise InvalidInputError("--provenance", f"{path}: not a verify report ({exc})") from None
    for rule, record in records:
        print(json.dumps({"rule": rule, "verified": record}))
    return 0


def _emit(report: dict[str, Any], out: Optional[str]) -> None:
    lines = [json.dumps(p, default=str) for p in report["probes"]]
    for line in lines:
        print(line)
    if out:
        from attnplan.verify.report import write_report

        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        (d / "probes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        write_report(report, str(d / "report.md"))
