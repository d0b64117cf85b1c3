"""``attnplan sglang launch_server --model-path M [flags]``: what would SGLang 0.5.23 run on that GPU?

Everything after ``launch_server`` is the SGLang line (``python -m sglang.launch_server ...`` may be
pasted whole), read by attnplan's named subset of SGLang's flags (attnplan/sglang/launch.py);
attnplan's own flags (``--device``, ``--capability``, ``--flashinfer-version``, ``--cubins``, ``--json``,
``--no-trace``, ``--require-flashinfer``, ``--rules``) may appear anywhere in it. The answer leads with the
verdict of the line as typed: SGLang's own backend per phase and what happens (runs; fails at startup,
graph capture or the first request; wrong output). Exit 0: the line runs; 1: any other outcome (the
rule is named; ``--require-flashinfer``: also where SGLang runs a backend that is not FlashInfer's);
2: bad input.
"""

from __future__ import annotations

import argparse

from attnplan.policy import InvalidInputError
from attnplan.node import local_node

from . import verbosity
from .main import emit_json
from .options import add_node_args, add_rules_arg, node_from_args, ruleset_from_args
from .vllm import split_own


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sglang", help="what would `python -m sglang.launch_server ...` (SGLang 0.5.23) run on this GPU?",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__)
    ssub = p.add_subparsers(dest="sglang_command", metavar="launch_server", parser_class=_Verbatim)
    s = ssub.add_parser("launch_server", help="plan a `python -m sglang.launch_server --model-path M [flags]` line",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_args(s)
    s.add_argument("--json", action="store_true", help="print the plan contract per rank (JSON)")
    s.add_argument("--no-trace", action="store_true", help="leave the per-rule trace out of --json")
    add_rules_arg(s)
    s.add_argument("line", nargs=argparse.REMAINDER, metavar="--model-path M [sglang flags]")
    s.set_defaults(run=run)
    p.set_defaults(run=_need_launch)


class _Verbatim(argparse.ArgumentParser):
    """A launch_server line begins with SGLang's own flags (``--model-path M``), which argparse would
    take for attnplan's: the whole line is kept verbatim and split by ``split_own``."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        args = list(args or [])
        if args[:1] in (["-h"], ["--help"]):
            self.print_help()
            self.exit(0)
        ns = namespace if namespace is not None else argparse.Namespace()
        for k, v in self._defaults.items():
            setattr(ns, k, v)
        for k in ("device", "capability", "flashinfer_version", "cubins", "rules"):
            setattr(ns, k, None)
        ns.json, ns.no_trace, ns.line = False, False, args
        return ns, []


def _need_launch(args: argparse.Namespace) -> int:
    raise InvalidInputError("sglang", "give a subcommand: attnplan sglang launch_server --model-path M [flags]")


def run(args: argparse.Namespace) -> int:
    from attnplan.lines import plan_launch
    from attnplan.sglang.launch import launch_json, parse_launch_line, render_launch

    own, rest = split_own(list(args.line), args)
    line = parse_launch_line(rest)
    node = node_from_args(own)
    la = plan_launch(line, node if node is not None else local_node(), ruleset_from_args(own))
    for note in la.notes:
        verbosity.note(note)   # -q silences notes, as for vllm serve
    if own.json:
        emit_json(launch_json(la, trace=not own.no_trace))
    else:
        print(render_launch(la))
    v = la.verdict
    if v is None:
        return 0 if la.ok else 1
    return v.exit_code(require_flashinfer=bool(getattr(own, "require_flashinfer", False)))
