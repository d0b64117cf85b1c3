"""``preflight``: which nodes of a cluster can run this attention config, and on which backends.

Nodes come from the node services (``--hosts``/``--hosts-file``), a Ray cluster (``--ray``) or a
simulated cluster (``--simulate``). httpx and ray are imported only when used, so that
``attnplan plan`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, Iterator

from attnplan.policy import InvalidInputError

from .plan import add_engine_arg
from .options import (add_config_args, add_rules_arg, config_fields_from_args, config_from_args, ruleset_from_args,
                      tensor_parallel_from_args)

DESCRIPTION = """\
For every node: can it run the config(s), on which prefill/decode backends, and if not, which
rules fail. Identical nodes are grouped; nodes that would run different backends, KV layouts
or page sizes for the same config are flagged (a tensor- or pipeline-parallel group across
them would mix kernels).

nodes (one of):
  --hosts h1:8000,h2:8000     node services (`attnplan serve`), queried concurrently;
                              bearer token from $ATTNPLAN_TOKEN
  --hosts-file FILE           the same, one host a line (# comments)
  --ray [ADDRESS]             one task pinned to each alive node of a Ray cluster
  --simulate "B200=8,H100=16" plan a cluster you do not have

exit codes: 0 every node ok, 1 some node rejects a config (or none can run it),
  2 bad input, 3 some node unreachable or answered unusably, 130 interrupted (Ctrl-C prints
  what was gathered so far).
"""

EXAMPLES = """\
examples:
  attnplan preflight --simulate "B200=8,GB300=4,H100=16" --model-config examples/qwen3-32b.json
  attnplan preflight --simulate "B200=2,H100=2" --serve "vllm serve tests/models/gemma-3-27b-it.json -tp 2"
  attnplan preflight --simulate "B200=2,H100=2" --serve "python -m sglang.launch_server --model-path gemma-2-9b"
  attnplan preflight --hosts 10.0.0.1:8000,10.0.0.2:8000 --head-dim 128 --num-heads 32 --num-kv-heads 8
  attnplan preflight --hosts-file nodes.txt --configs models.yaml --html report.html
  attnplan preflight --ray auto --model-config examples/llama-3.1-8b.json --json
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("preflight", help="cluster preflight: which nodes can run this config (HTTP, Ray, simulated)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION, epilog=EXAMPLES)
    t = p.add_argument_group("nodes").add_mutually_exclusive_group(required=True)
    t.add_argument("--hosts", metavar="HOSTS", help="comma-separated host:port of node services")
    t.add_argument("--hosts-file", metavar="FILE", help="node services, one host:port a line")
    t.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="a Ray cluster (default address: auto, i.e. RAY_ADDRESS or the local head)")
    t.add_argument("--simulate", metavar="SPEC", help='declared devices and counts, e.g. "B200=8,GB300=4,H100=16"')
    add_config_args(p)
    p.add_argument("--serve", metavar="LINE",
                   help='a whole model as served: "vllm serve MODEL [flags]" or "python -m sglang.launch_server '
                        '--model-path MODEL [flags]" (every layer group planned per rank on every node; MODEL is read '
                        "here and sent to the nodes)")
    p.add_argument("--configs", metavar="FILE",
                   help="a YAML list of configs (fields; or model_config/model: PATH, or serve: LINE, plus serve "
                        "fields; optional name and engine)")
    add_engine_arg(p, "engine layer to plan for: vllm (default: each node's installed vllm, else the newest modelled), "
                      "vllm==0.33.0, or flashinfer (kernel rules alone); a --configs entry's own engine wins. Sent to "
                      "nodes only when given: a node older than the field answers 422 (an error row)")
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print the report as JSON (schema_version 1)")
    g.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (nodes x configs grid)")
    g.add_argument("--per-node", action="store_true", help="list every node, not only the groups")
    g.add_argument("--upgrade-to", metavar="RELEASE",
                   help="add an upgrade column: each node's config planned here, on its facts, under RELEASE "
                        "(vllm==X, sglang==X or flashinfer==X) and compared with its answer (as `attnplan upgrade`)")
    h = p.add_argument_group("querying")
    h.add_argument("--concurrency", type=int, default=64, help="nodes queried at once over HTTP (default 64)")
    h.add_argument("--timeout", type=float, default=None,
                   help="seconds per node (HTTP, default 10) or for the whole Ray run (default 60)")
    h.add_argument("--retries", type=int, default=2, help="retries after a connect error or 502/503/504 (default 2)")
    h.add_argument("--ray-declare-label", metavar="LABEL",
                   help="dry runs/tests: plan a Ray node carrying this node label as the declared device it names "
                        "(e.g. attnplan.io/device=B200) instead of probing it")
    s = p.add_argument_group("simulated nodes")
    s.add_argument("--flashinfer-version", help="declare the simulated nodes' flashinfer version")
    s.add_argument("--cubins", choices=["available", "missing"], help="declare whether the simulated nodes have cubins")
    add_rules_arg(p)  # --simulate plans with these packs; remote nodes plan with their own
    p.set_defaults(run=run)


def _configs(args: argparse.Namespace) -> list[Any]:
    from attnplan.preflight.configs import load_configs
    from attnplan.preflight.model import NamedConfig

    if args.configs:
        if args.model_config or args.serve:
            raise InvalidInputError("configs", "give --configs or --model-config/--serve, not both (put model_config "
                                    "or serve in the file)")
        return load_configs(args.configs, config_fields_from_args(args), engine=args.engine)
    if args.serve is not None or args.model_config:
        return [model_config(args)]
    return [NamedConfig("config", config_from_args(args), args.engine)]


def model_config(args: argparse.Namespace) -> Any:
    """``--serve LINE`` or ``--model/--model-config MODEL`` (+ the serve flags) -> one model entry:
    every layer group planned per rank on every node. Shared with ``attnplan labels --model``."""
    from attnplan.preflight.configs import inline_model, model_name, model_request
    from attnplan.preflight.model import NamedConfig

    fields = config_fields_from_args(args)
    if args.serve is not None:
        if args.model_config:
            raise InvalidInputError("serve", "give --serve or --model-config, not both")
        req = model_request(None, args.serve, fields, args.engine)
    else:
        tp = tensor_parallel_from_args(args)
        if tp != 1:
            fields["tensor_parallel_size"] = tp
        req = model_request(args.model_config, None, fields, args.engine)
    return NamedConfig(model_name(req) or "model", None, req.engine, inline_model(req))


def check_models(configs: list[Any], rs: Any, *, plan: bool = False) -> None:
    """A model request that cannot be planned anywhere (an unreadable config.json, a dtype or
    backend nobody knows) is bad input (exit 2) before any node is asked. ``plan``: plan it once
    here for a stand-in node (exact; reading the model as its transformers class does costs the
    transformers/torch import, ~3 s); else check it with attnplan's own config reader (no import).
    A repo id this machine does not have is left to the nodes."""
    from attnplan.request import check_request, plan_request

    for c in configs:
        if c.request is not None and isinstance(c.request.model, dict):
            try:
                if plan:
                    from attnplan.policy import simulated_node

                    plan_request(c.request, simulated_node("H100"), rs)
                else:
                    check_request(c.request)
            except InvalidInputError as exc:
                if c.name == "config" or len(configs) == 1:
                    raise
                raise InvalidInputError(f"configs: {c.name}: {exc.field}", str(exc).split(": ", 1)[-1]) from None


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.concurrency <= 4096:
        raise InvalidInputError("concurrency", f"{args.concurrency} is out of range (1-4096)")
    if args.timeout is not None and not 0 < args.timeout <= 3600:
        raise InvalidInputError("timeout", f"{args.timeout} is out of range (0-3600 seconds)")
    if not 0 <= args.retries <= 10:
        raise InvalidInputError("retries", f"{args.retries} is out of range (0-10)")
    if (args.flashinfer_version or args.cubins) and args.simulate is None:
        raise InvalidInputError("flashinfer_version", "--flashinfer-version/--cubins declare simulated nodes: use them with --simulate")
    if args.ray_declare_label and args.ray is None:
        raise InvalidInputError("ray_declare_label", "--ray-declare-label is for --ray")


def check_engine(engine: Any, node: Any, rs: Any, where: str = "engine") -> Any:
    """``engine`` parsed (an ``EngineSpec``; None stays None: each node's default), and, given a
    ``node``, resolved on it. InvalidInputError (exit 2) for an engine the rules do not model, its
    text printable: the value is the user's and is echoed back (an escape sequence must not reach
    the terminal)."""
    from attnplan.policy import parse_engine, resolve_engine

    try:
        spec = parse_engine(engine, rs)
        if node is not None:
            resolve_engine(spec, node, rs)
    except InvalidInputError as exc:
        text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(exc).split(": ", 1)[-1])
        raise InvalidInputError(where, text) from None
    return spec if engine is not None else None


def parse_engines(configs: list[Any], rs: Any) -> list[Any]:
    """The configs with their engines parsed, once, before any node is asked: an engine the rules
    do not model is bad input (exit 2). No node is known here: ``vllm`` alone is each node's own."""
    import dataclasses

    return [dataclasses.replace(c, engine=check_engine(c.engine, None, rs, "engine" if c.name == "config"
                                                       else f"configs: {c.name}: engine"))
            if c.engine is not None else c for c in configs]


def run(args: argparse.Namespace) -> int:
    from attnplan.preflight.model import Outcome
    from attnplan.preflight.progress import Progress, ProgressSink
    from attnplan.preflight.report import build_report, render_text

    _check(args)
    rs = ruleset_from_args(args)  # a pack that fails to load: exit 2 before any node is asked
    upgrade_to = None
    if args.upgrade_to is not None:
        from attnplan.preflight.upgrade_column import parse_upgrade_to

        upgrade_to = parse_upgrade_to(args.upgrade_to, rs)  # an unmodelled release: exit 2 before any node is asked
    configs = parse_engines(_configs(args), rs)
    check_models(configs, rs)
    t0 = time.perf_counter()
    interrupted = False
    options: dict[str, Any] = {}
    if args.simulate is not None:  # "" is a spec too (an empty one: bad input), not "no --simulate"
        from attnplan.preflight.simulate import simulate

        source, targets = "simulate", [args.simulate]
        outcomes = simulate(args.simulate, configs, flashinfer_version=args.flashinfer_version, cubins=args.cubins,
                            ruleset=rs)
    elif args.ray is not None:
        from attnplan.preflight.ray_source import RayConnectError, ray_preflight

        source, targets = "ray", [args.ray]
        timeout = args.timeout if args.timeout is not None else 60.0
        options = {"timeout_s": timeout, "declare_label": args.ray_declare_label}
        names: list[str] = []
        # The node count is known once connected: the bar starts then (a counter until then).
        progress = Progress(0)
        sink: dict[int, Outcome] = ProgressSink(progress)
        try:
            with _stdout_to_stderr():  # Ray prints node events to stdout; stdout is the report's
                ray_preflight(configs, address=args.ray, timeout=timeout, declare_label=args.ray_declare_label,
                              sink=sink, names=_Names(names, progress))
        except RayConnectError as exc:
            progress.close()
            print(f"attnplan: error: {exc}", file=sys.stderr)
            return 3
        except KeyboardInterrupt:
            interrupted = True
        progress.close()
        outcomes = [sink.get(i) or Outcome(name=n, kind="skipped", reason="interrupted") for i, n in enumerate(names)]
    else:
        import asyncio

        from attnplan.preflight.http import HttpOptions, parse_hosts, query_hosts, read_hosts_file

        hosts = read_hosts_file(args.hosts_file) if args.hosts_file is not None else parse_hosts([args.hosts])
        source, targets = "hosts", [h.name for h in hosts]
        opts = HttpOptions(concurrency=args.concurrency, timeout=args.timeout if args.timeout is not None else 10.0,
                           retries=args.retries, token=os.environ.get("ATTNPLAN_TOKEN", "").strip() or None)
        options = {"concurrency": opts.concurrency, "timeout_s": opts.timeout, "retries": opts.retries,
                   "token": bool(opts.token)}
        _raise_nofile(len(hosts))
        hprogress = Progress(len(hosts))
        hsink: dict[int, Outcome] = ProgressSink(hprogress)
        try:
            asyncio.run(query_hosts(hosts, configs, opts, hsink))
        except KeyboardInterrupt:
            interrupted = True
        hprogress.close()
        outcomes = [hsink.get(i) or Outcome(name=h.name, address=h.url, kind="skipped", reason="interrupted")
                    for i, h in enumerate(hosts)]
    upgrades = None
    if upgrade_to is not None:
        from attnplan.preflight.upgrade_column import upgrade_cells

        upgrades = upgrade_cells(outcomes, configs, upgrade_to, rs)
    report = build_report(source=source, targets=targets, configs=configs, outcomes=outcomes, options=options,
                          elapsed_s=time.perf_counter() - t0, interrupted=interrupted, ruleset=rs, upgrades=upgrades)
    if args.html:
        from attnplan.preflight.html import write_html

        try:
            write_html(report, args.html)
        except OSError as exc:
            print(f"attnplan: error: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if args.json:
        from .main import emit_json

        emit_json(report.to_json())
    else:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        print(render_text(report, per_node=args.per_node, color=color))
    if args.html:
        print(f"attnplan: wrote {args.html}", file=sys.stderr)
    sys.stdout.flush()
    return report.summary.exit_code


class _Names(list):  # type: ignore[type-arg]
    """The node names ray_preflight reports up front (``names[:] = ...``): they size the bar."""

    def __init__(self, target: list, progress: Any):
        super().__init__()
        self.target, self.progress = target, progress

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.target[:] = list(self)
        self.progress.total = len(self)
        self.progress.enabled = self.progress.enabled or (len(self) > 0 and _tty(self.progress.stream))


def _tty(stream: Any) -> bool:
    from attnplan.preflight.progress import _is_tty

    return _is_tty(stream)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python or native code) to stderr for a while."""
    sys.stdout.flush()
    saved_fd = os.dup(1)
    saved = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = saved
        os.dup2(saved_fd, 1)
        os.close(saved_fd)


def _raise_nofile(n_hosts: int) -> None:
    """One socket per node in flight: make sure the soft descriptor limit allows it."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, max(soft, 4096))
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass
