"""``verify``: hold every kernel rule against this GPU, directly through FlashInfer (issue 13)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

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
    p.add_argument("--rule", action="append", metavar="ID", help="only this rule (repeatable)")
    p.add_argument("--out", metavar="DIR", help="write probes.jsonl, report.json and report.md here")
    p.add_argument("--report", metavar="FILE.md", help="write the markdown report here and its JSON beside it")
    p.add_argument("--list", action="store_true", help="print the probes (JSON lines) without running them (no GPU needed)")
    p.add_argument("--provenance", metavar="REPORT.json",
                   help="print each rule's `verified:` record from a report (JSON lines; no GPU needed)")
    p.add_argument("--jobs", type=int, default=6, help="probe processes at a time (default 6)")
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
    from attnplan.policy import local_node
    from attnplan.verify import build_report, exit_code, generate, run_probes, subprocess_runner, write_report
    from attnplan.verify.report import summary_table

    if args.provenance:
        return _print_provenance(args.provenance)
    if args.jobs < 1:
        raise InvalidInputError("--jobs", "must be at least 1")
    rs = ruleset_from_args(args)
    declared = node_from_args(args)
    if declared is not None and not args.list:
        raise InvalidInputError("--device/--capability", "a declared node can only be listed (--list): probes run on this GPU")
    gpu = None if (args.list and declared is not None) else _gpu()
    if gpu is None and not args.list:
        print("attnplan: error: verify needs a CUDA GPU and none was found (use --list to see the probes)", file=sys.stderr)
        return 2
    node = declared if declared is not None else local_node()
    if node.capability.value is None:
        raise InvalidInputError("device", "the GPU's compute capability is unknown: nothing to verify against")
    try:
        gen = generate(rs, node, only=args.rule, quick=args.quick)
    except KeyError as exc:
        raise InvalidInputError("--rule", f"no rule {exc.args[0]!r}") from None
    if args.list:
        for p in gen.probes:
            print(json.dumps({"id": p.id, "backend": p.backend, "phase": p.phase, "call": p.call, "config": p.config,
                              "refused_by": list(p.refused_by), "skip": p.skip}), flush=True)
        return 0
    t0 = time.monotonic()
    log = lambda s: print(f"verify {time.monotonic() - t0:7.1f}s {s}", file=sys.stderr, flush=True)  # noqa: E731
    log(f"{gpu}: {len(gen.probes)} probes for {len(gen.rules)} kernel rules "
        f"({len({p.module for p in gen.probes if not p.skip})} JIT modules)")
    build_jobs = args.build_jobs or max(2, 2 * (os.cpu_count() or 8) // args.jobs)
    env = dict(os.environ, MAX_JOBS=str(build_jobs))   # FlashInfer's ninja reads MAX_JOBS
    log(f"{args.jobs} probe process(es) at a time, MAX_JOBS={build_jobs} for each build")
    results = run_probes(gen.probes, subprocess_runner(env=env), jobs=args.jobs, build_timeout=args.build_timeout,
                         probe_timeout=args.probe_timeout, deadline=args.deadline, progress=log)
    report = build_report(gen, results, device=_device_label(gpu or ""), capability=node.capability_str,
                          flashinfer=node.flashinfer_version.value, torch=node.torch_version.value,
                          rules_revision=rs.revision, quick=args.quick)
    _emit(report, args.out)
    if args.report:
        log(f"report: {args.report} and {write_report(report, args.report)}")
    print(summary_table(report), file=sys.stderr)
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
