"""``attnplan``: which attention kernels will run on this GPU, for this model, and will it fail?

Exit codes: 0 ok, 1 rejected, 2 bad input, 3 some nodes unreachable (preflight), 70 internal
error (a bug: one line on stderr, the traceback only with ATTNPLAN_DEBUG=1), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Callable, Optional

from attnplan._version import __version__
from attnplan.policy import AttnplanError

EXAMPLES = """\
examples:
  attnplan vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 4 --kv-cache-dtype fp8 --device B200
  attnplan plan --device B200 --head-dim 128 --num-heads 32 --num-kv-heads 8
  attnplan plan --device H100 --model-config examples/llama-3.1-8b.json --engine flashinfer
  attnplan plan --device "RTX PRO 6000" --model-config examples/llama-3.1-8b.json --kv-cache-dtype nvfp4
  attnplan plan --capability 10.3 --flashinfer-version 0.6.7 --head-dim 128 --num-heads 32 --json
  attnplan explain --device H100 --model-config examples/gemma-2-9b.json
  attnplan node                      # this machine's facts
  attnplan rules                     # every rule, its reason and source
  attnplan matrix --format markdown  # capability matrix derived from the rules
  attnplan serve --port 8000         # REST service (127.0.0.1 by default)
  attnplan verify --quick --report docs/verified/H100-flashinfer-0.7.2.post1.md   # on a GPU node
  attnplan preflight --simulate "B200=8,H100=16" --model-config examples/qwen3-32b.json
"""

# Subcommands living in their own modules: name -> module exposing add_parser(sub) and run(args) -> int.
COMMANDS = ("attnplan.cli.plan", "attnplan.cli.vllm", "attnplan.cli.serve", "attnplan.cli.preflight",
            "attnplan.cli.labels", "attnplan.cli.verify", "attnplan.cli.sglang", "attnplan.cli.compare")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other bad input
        self.exit(2, f"attnplan: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="attnplan", description=__doc__.split("\n")[0],
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for mod in COMMANDS:
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name == mod or (exc.name and exc.name.startswith(("fastapi", "uvicorn", "httpx", "ray", "prometheus"))):
                continue  # an optional part's dependencies are missing: its command is absent
            raise
        module.add_parser(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Optional[Callable[[argparse.Namespace], int]] = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        return run(args)
    except AttnplanError as exc:
        # One line, whatever the message holds (a parser's own text may span several).
        msg = "; ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
        # A user's own escape sequences (a flag value, a file name) are shown, never executed.
        print("attnplan: error: " + "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in msg), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug must never read as "rejected" (1) or "bad input" (2)
        return internal_error(exc)


EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): distinct from 1 (rejected), 2 (bad input), 3 (unreachable)


def internal_error(exc: BaseException) -> int:
    """One line naming the error; the traceback only when ATTNPLAN_DEBUG is set."""
    import os

    if os.environ.get("ATTNPLAN_DEBUG"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    text = " ".join(str(exc).split())[:300]
    print(f"attnplan: internal error: {type(exc).__name__}" + (f": {text}" if text else "")
          + " (a bug: please report it; ATTNPLAN_DEBUG=1 shows the traceback)", file=sys.stderr)
    return EXIT_INTERNAL


def emit_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
