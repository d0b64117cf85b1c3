"""``attnplan``: which attention kernels will run on this GPU, for this model, and will it fail?

Exit codes: 0 ok, 1 rejected, 2 bad input, 3 some nodes unreachable (preflight), 70 internal
error (a bug: one line on stderr, the traceback only with ATTNPLAN_DEBUG=1), 130 interrupted.
A closed pipe (``attnplan plan ... | head -5``) keeps the command's own exit code.

Start-up is kept cheap (issue 27: ``--version`` <= 0.1 s): this module imports nothing of the
engine at import time, ``--version`` answers before any subcommand module is imported, and each
subcommand module imports what it needs.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import sys
from typing import Any, Callable, Optional

from attnplan._version import __version__

# Every example runs from a wheel install, offline: models are shipped presets (attnplan/presets,
# named by file stem) or flags.
EXAMPLES = """\
examples:
  attnplan vllm serve llama-3.1-8b -tp 4 --kv-cache-dtype fp8 --device B200
  attnplan plan --device B200 --head-dim 128 --num-heads 32 --num-kv-heads 8
  attnplan plan --device H100 --model llama-3.1-8b --engine flashinfer
  attnplan plan --device "RTX PRO 6000" --model llama-3.1-8b --kv-cache-dtype nvfp4
  attnplan plan --capability 10.3 --flashinfer-version 0.6.7 --head-dim 128 --num-heads 32 --json
  attnplan explain --device H100 --model gemma-2-9b
  attnplan node                      # this machine's facts
  attnplan rules                     # every rule, its reason and source
  attnplan matrix --format markdown  # capability matrix derived from the rules
  attnplan serve --port 8000         # REST service (127.0.0.1 by default)
  attnplan verify --quick --report docs/verified/H100-flashinfer-0.7.2.post1.md   # on a GPU node
  attnplan preflight --simulate "B200=8,H100=16" --model qwen3-32b
  attnplan completion bash > ~/.local/share/bash-completion/completions/attnplan

models: --model (alias --model-config) takes a shipped preset by name (deepseek-v3, gemma-2-9b,
  gpt-oss-120b, llama-3.1-8b, qwen3-32b), a directory holding config.json, a config.json path, or
  a HuggingFace repo id already in the local cache (fetch one with: hf download REPO config.json).

environment:
  ATTNPLAN_RULES=DIR            rule packs to use instead of the shipped ones (as --rules)
  ATTNPLAN_TOKEN=TOKEN          bearer token for `serve` (keeps it out of `ps`)
  ATTNPLAN_VLLM_PARSER=subset   read `vllm serve` lines with attnplan's documented flag subset
                                even where vLLM is installed (default: vLLM's own flag table)
  ATTNPLAN_ARTIFACTORY_CHECK=never|always|auto
                                whether probing this node asks FlashInfer's cubin artifactory if it
                                is reachable (auto, the default: only on GPUs whose plans depend on
                                it, 9.0, 10.x, 12.x)
  ATTNPLAN_EXAMPLES_DIR=DIR     config.json files `serve` offers as presets (default: the shipped ones)
  ATTNPLAN_CACHE_DIR=DIR        where vLLM's flag table is cached and the adapter's host_step.c built
                                (default ~/.cache/attnplan)
  ATTNPLAN_VLLM_PLUGIN=off      turn the vLLM plugin's startup check off (in vLLM processes)
  ATTNPLAN_VLLM_DEVICE=NAME     the vLLM plugin checks against a catalog device instead of this GPU
  ATTNPLAN_DECODE_METADATA=torch  the adapter builds decode metadata with torch ops, not one Triton launch
  ATTNPLAN_FUSED_APPEND=0         a CUDA-graph decode step appends the new K/V with torch scatters, not in the metadata launch
  ATTNPLAN_GRAPH_SCHEDULER_REPLAY=0  a CUDA-graph decode step that plans runs FlashInfer's whole wrapper plan,
                                not its scheduler call alone
  ATTNPLAN_EAGER_SCHEDULER_REPLAY=0  an eager decode step of a repeated shape plans the backend's wrapper
                                with FlashInfer's whole plan, not its layout's own with the scheduler alone
  ATTNPLAN_GENERAL_SCHEDULER_REPLAY=0  a prefill / mixed step plans FlashInfer's wrappers whole, not with the
                                scheduler call alone once learned and checked on them
  ATTNPLAN_NATIVE_HOST=0        a prefill / mixed step's metadata by numpy, not the adapter's host_step.c
                                (the same bytes; numpy runs anyway where no C compiler is found)
  ATTNPLAN_NATIVE_TORCH=0       a CUDA step's host_step.c call, copy, views and gather by ctypes and torch calls
                                from Python, not one call of the adapter's host_torch.cpp (the same tensors; built
                                when a CUDA executor is made)
  ATTNPLAN_DEBUG=1              print the traceback of an internal error (exit 70)
  ATTNPLAN_HTTP=h11|httptools   the HTTP protocol `serve` runs (default: httptools when installed)
  ATTNPLAN_LOOP=asyncio|uvloop  the event loop `serve` runs (default: uvloop when installed)
  ATTNPLAN_SGLANG_SRC=DIR       SGLang 0.5.23's sglang/srt for its oracle (python -m attnplan.oracle.sglang)
  ATTNPLAN_SGLANG_RELEASES=DIR  where the older SGLang releases' sglang/srt are unpacked (sglang-X/; default
                                .venv/releases), for the oracle's --release
  ATTNPLAN_VLLM_RELEASES=DIR    where scripts/vllm_releases.py unpacks vLLM releases (vllm-X/; default
                                .venv/releases), for the vLLM oracle's --release X
  ATTNPLAN_ORACLE_VLLM_RELEASE=X  set by the vLLM oracle in its re-run under release X (the vLLM it must import)
  ATTNPLAN_ORACLE_RULES=DIR, ATTNPLAN_ORACLE_BACKENDS=FILE
                                the rule packs / backends.yaml the vLLM oracle judges (default: the shipped ones)
"""

# Subcommand modules, each exposing add_parser(sub) and, through set_defaults(run=...), run(args) -> int,
# with the commands each registers. One line per module: a new command module is added here.
COMMANDS: list[tuple[str, tuple[str, ...]]] = [
    ("attnplan.cli.plan", ("plan", "explain", "node", "rules", "matrix")),
    ("attnplan.cli.vllm", ("vllm",)),
    ("attnplan.cli.sglang", ("sglang",)),
    ("attnplan.cli.compare", ("compare",)),
    ("attnplan.cli.upgrade", ("upgrade",)),
    ("attnplan.cli.serve", ("serve",)),
    ("attnplan.cli.preflight", ("preflight",)),
    ("attnplan.cli.labels", ("labels",)),
    ("attnplan.cli.verify", ("verify",)),
    ("attnplan.cli.cubins", ("cubins",)),
    ("attnplan.cli.completion", ("completion",)),
]


def _chosen_command(argv: Optional[list[str]]) -> Optional[str]:
    """The subcommand ``argv`` names (its first word that is not a global option), if it is one of ours."""
    for word in argv or ():
        if word in ("-q", "--quiet") or (word.startswith("-v") and set(word[1:]) <= {"v"}) or word == "--verbose":
            continue
        return word if any(word in names for _, names in COMMANDS) else None
    return None

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other bad input
        self.exit(2, f"attnplan: error: {message} (see '{self.prog} --help')\n")


def build_parser(argv: Optional[list[str]] = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line, only the module of the subcommand it names is imported
    (one command's path stays short: ``attnplan plan`` does not import the REST, preflight or verify
    modules). ``--help``, no command or an unknown one build every subcommand."""
    chosen = _chosen_command(argv)
    parser = _Parser(
        prog="attnplan", description=__doc__.split("\n")[0],
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnplan {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more on stderr (-v: notes and timings; -vv: also library warnings)")
    parser.add_argument("-q", "--quiet", action="store_true", help="nothing on stderr but errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for mod, names in COMMANDS:
        if chosen is not None and chosen not in names:
            continue
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name == mod or (exc.name and exc.name.startswith(("fastapi", "uvicorn", "httpx", "ray", "prometheus"))):
                continue  # an optional part's dependencies are missing: its command is absent
            raise
        module.add_parser(sub)
    return parser


class _PipeGuard(io.TextIOBase):
    """stdout that survives a reader going away (``| head -5``): the command runs to its verdict
    and its exit code is kept; what it still writes is dropped."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.inner.write(text)
            except BrokenPipeError:
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.inner.flush()
            except BrokenPipeError:
                self.broken = True

    def isatty(self) -> bool:
        return bool(getattr(self.inner, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:  # .buffer, .reconfigure, ...: the real stream's
        return getattr(self.inner, name)


def main(argv: Optional[list[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in == ["--version"]:  # before any engine import: the cheapest answer there is
        print(f"attnplan {__version__}")
        return 0
    guard = _PipeGuard(sys.stdout)
    sys.stdout = guard
    try:
        return _main(args_in)
    finally:
        guard.flush()
        sys.stdout = guard.inner
        if guard.broken:
            # Python's own flush at exit would fail again (and turn the exit code into 120).
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, guard.inner.fileno())
            except (OSError, ValueError, io.UnsupportedOperation):
                pass


def _main(argv: list[str]) -> int:
    from attnplan.policy import AttnplanError

    parser = build_parser(argv)
    args = parser.parse_args(argv)
    run: Optional[Callable[[argparse.Namespace], int]] = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    from . import verbosity

    verbosity.set_level(-1 if args.quiet else int(args.verbose or 0))
    try:
        with verbosity.library_warnings():
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


def add_json_flag(p: argparse.ArgumentParser, help_: str = "print JSON instead of tables") -> None:
    """``--json`` (every command that prints a result has it)."""
    p.add_argument("--json", action="store_true", help=help_)


def emit_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
