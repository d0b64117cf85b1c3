"""``attnplan vllm serve MODEL [vllm serve flags...]``: will this ``vllm serve`` line work on that GPU?

Everything after ``serve`` is the ``vllm serve`` line, read by vLLM's own flag table when vLLM is
installed (extracted from its parser once per vLLM version and cached in ~/.cache/attnplan or
$ATTNPLAN_CACHE_DIR), else by a named subset (attnplan/vllm/args.py; ATTNPLAN_VLLM_PARSER=subset
forces it); attnplan's own flags (``--device``,
``--capability``, ``--flashinfer-version``, ``--cubins``, ``--json``, ``--no-trace``, ``--rules``)
may appear anywhere in it and are taken out first. The answer leads with the verdict of the line as
typed: the backend vLLM itself selects and what happens (runs; fails at startup, at CUDA-graph capture
or at the first request; runs with wrong output), then FlashInfer's plan (the line's own, or "if
forced"). Exit 0: the line runs; 1: any other outcome (the rule is named; --require-flashinfer: also
when vLLM runs a backend that is not FlashInfer's); 2: bad input.
"""

from __future__ import annotations

import argparse
import sys

from attnplan.policy import InvalidInputError
from attnplan.node import local_node

from .main import emit_json
from . import verbosity
from .options import add_node_args, add_rules_arg, node_from_args, pull_own_flags, ruleset_from_args

OWN_FLAGS = ("--device", "--capability", "--flashinfer-version", "--cubins", "--rules", "--engine")
OWN_SWITCHES = ("--json", "--no-trace", "--require-flashinfer")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vllm", help="will this `vllm serve` line work on this GPU? (per tensor-parallel rank)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__)
    vsub = p.add_subparsers(dest="vllm_command", metavar="serve")
    s = vsub.add_parser("serve", help="plan a `vllm serve MODEL [flags]` line", prefix_chars="-",
                        add_help=True, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_args(s)
    s.add_argument("--json", action="store_true", help="print the plan contract per rank (JSON)")
    s.add_argument("--no-trace", action="store_true", help="leave the per-rule trace out of --json")
    s.add_argument("--require-flashinfer", action="store_true",
                   help="exit 1 also when vLLM runs a backend that is not FlashInfer's")
    s.add_argument("--engine", metavar="vllm==X",
                   help="the vLLM release the line is for (default: the installed vllm, else the newest modelled); "
                        "another release than the installed one reads the line with that release's shipped flag table")
    add_rules_arg(s)
    s.add_argument("line", nargs=argparse.REMAINDER, metavar="MODEL [vllm serve flags]")
    s.set_defaults(run=run)
    p.set_defaults(run=_need_serve)


def _need_serve(args: argparse.Namespace) -> int:
    raise InvalidInputError("vllm", "give a subcommand: attnplan vllm serve MODEL [flags]")


def split_own(argv: list[str], before: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
    """attnplan's own flags out of a ``vllm serve`` line; the rest is vLLM's. ``before``: the
    values given before MODEL (parsed by argparse)."""
    own = argparse.Namespace(**{k: getattr(before, k, None) for k in
                                ("device", "capability", "flashinfer_version", "cubins", "rules", "engine")},
                             **{f.lstrip("-").replace("-", "_"): bool(getattr(before, f.lstrip("-").replace("-", "_"), False))
                                for f in OWN_SWITCHES})
    dest = lambda f: f.lstrip("-").replace("-", "_")  # noqa: E731
    rest = pull_own_flags(argv, own, {f: dest(f) for f in OWN_FLAGS}, {f: dest(f) for f in OWN_SWITCHES})
    return own, rest


def run(args: argparse.Namespace) -> int:
    from attnplan.policy import parse_engine
    from attnplan.vllm.args import parse_serve_line
    from attnplan.request import plan_serve
    from attnplan.vllm.serve import render_serve, serve_json

    own, rest = split_own(list(args.line), args)
    rs = ruleset_from_args(own)
    spec = parse_engine(own.engine or "vllm", rs)   # an unmodelled release: exit 2 naming the modelled ones
    if spec.name != "vllm":
        raise InvalidInputError("engine", f"a vllm serve line is vLLM's; got {own.engine!r}")
    line = parse_serve_line(rest, release=spec.version)
    node = node_from_args(own)
    # one pipeline (attnplan/request.py plan_request), held to the bounds REST holds a line to (tp <= 4096, ...)
    sa = plan_serve(line, node if node is not None else local_node(), rs, engine=str(spec))
    for note in sa.notes:
        verbosity.note(note)
    if own.json:
        emit_json(serve_json(sa, trace=not own.no_trace))
    else:
        print(render_serve(sa))
    v = sa.verdict
    if v is None:
        return 0 if sa.ok else 1
    return v.exit_code(require_flashinfer=own.require_flashinfer)
