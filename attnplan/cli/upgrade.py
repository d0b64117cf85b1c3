"""``attnplan upgrade --from vllm==0.32.0 --to vllm==0.33.0 MODEL --device H100,B200``: what breaks if I upgrade?

The same deployment planned under both releases and compared (attnplan/upgrade.py), per GPU and
attention layer group: the verdict's outcome, the engine's selected backend, the FlashInfer backend and
kernel per phase, the page size, the query dtype, the FlashInfer plan newly refused or accepted, silent
coercions and silent-output changes, each with the rules behind it and their source.

what is deployed (one of):
  MODEL                                   a preset, a config.json, a model directory or a cached repo id,
                                          planned as `attnplan plan --model MODEL` (--tp, --kv-cache-dtype,
                                          --page-size)
  -- vllm serve MODEL [flags]             a pasted vLLM line (as `attnplan vllm serve`)
  -- python -m sglang.launch_server ...   a pasted SGLang line (as `attnplan sglang launch_server`)

releases: --from and --to name two releases of one engine the rules model (vllm==X, sglang==X), or two
FlashInfer releases (flashinfer==X) declared on the node under one engine (--engine, or the line's).

where: --device H100,B200 (catalog GPUs, declared), --preflight HOSTS-FILE (the facts of each node service
listed, one host:port a line, as `attnplan preflight --hosts-file`), else this machine.

exit codes: 0 no deployment gets worse, 1 some deployment gets worse (its outcome, or one of its layer
groups', ranks later in: runs, fails-at-startup, fails-at-graph-capture, fails-at-first-request,
wrong-output), 2 bad input, 3 a node service unreachable (--preflight).
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

from attnplan.policy import InvalidInputError, NodeFacts, RuleSet

from .main import emit_json
from .options import add_rules_arg, pull_own_flags, ruleset_from_args

EXAMPLES = """\
examples:
  attnplan upgrade --from vllm==0.32.0 --to vllm==0.33.0 llama-3.1-8b --device H100,B200
  attnplan upgrade --from flashinfer==0.6.7 --to flashinfer==0.7.2.post1 llama-3.1-8b --device GB300 --json
  attnplan upgrade --from vllm==0.32.0 --to vllm==0.33.0 --device B200 -- vllm serve gemma-2-9b -tp 2
  attnplan upgrade --from flashinfer==0.6.7 --to flashinfer==0.7.2.post1 --device GB300 -- \\
      python -m sglang.launch_server --model-path llama-3.1-8b
"""
EXIT_UNREACHABLE = 3
LAUNCH_PREFIXES = ("python", "python3", "-m", "sglang.launch_server", "launch_server")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("upgrade", help="what changes (and breaks) if this deployment moves to another engine or "
                                       "FlashInfer release", description=__doc__, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="from_", required=True, metavar="RELEASE",
                   help="the release run today: vllm==X, sglang==X or flashinfer==X")
    p.add_argument("--to", required=True, metavar="RELEASE", help="the release upgraded to (the same engine, or flashinfer)")
    p.add_argument("--engine", default=None, metavar="ENGINE",
                   help="a FlashInfer upgrade's engine layer: vllm (default), vllm==X, sglang, sglang==X")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--device", metavar="GPUS", help='comma-separated catalog GPUs, e.g. H100,B200,"RTX PRO 6000"')
    where.add_argument("--preflight", metavar="HOSTS_FILE",
                       help="node services (`attnplan serve`), one host:port a line: each node's own facts are planned")
    p.add_argument("--flashinfer-version", metavar="VERSION",
                   help="the flashinfer declared on --device nodes (an engine upgrade; default: the supported one)")
    p.add_argument("--cubins", choices=["available", "missing"], help="declare whether trtllm-gen cubins are available")
    p.add_argument("--tp", type=int, default=1, help="MODEL: tensor parallel size (each row is one rank)")
    p.add_argument("--kv-cache-dtype", default=None, help="MODEL: the KV cache dtype (default: the engine's auto)")
    p.add_argument("--page-size", type=int, default=None, help="MODEL: the block/page size (default: the engine's)")
    p.add_argument("--json", action="store_true", help="the report as JSON (as POST /v1/upgrade returns it)")
    add_rules_arg(p)
    p.add_argument("what", nargs="*", metavar="MODEL | -- LINE",
                   help="a model, or after `--` a `vllm serve ...` or `python -m sglang.launch_server ...` line")
    p.set_defaults(run=run)


# -- what is deployed ----------------------------------------------------------------------------
def line_kind(words: list[str]) -> Optional[str]:
    """'vllm' for a `vllm serve` line, 'sglang' for a launch_server line, None for a model name."""
    if words[:2] == ["vllm", "serve"] or words[:1] == ["serve"]:
        return "vllm"
    if words and (words[0] in LAUNCH_PREFIXES or words[0].endswith(("/python", "/python3"))):
        return "sglang"
    return None


def serve_planner(words: list[str], rs: RuleSet) -> Any:
    """A `vllm serve` line planned at each side's release: the line read as `attnplan vllm serve` reads it, as a
    whole-model request pinned to the side's engine (attnplan/request.py plan_request, what POST /v1/plan/serve runs)."""
    from attnplan.vllm.args import parse_serve_line
    from attnplan.request import ModelRequest, plan_request

    rest = words[2:] if words[:1] == ["vllm"] else words[1:]
    line = parse_serve_line(rest)
    ModelRequest.from_serve_line(line)  # the bounds REST holds a line to: one standard, exit 2

    def plan(node: NodeFacts, side: Any) -> Any:
        req = ModelRequest.from_serve_line(line, engine=str(side.engine))
        return plan_request(req, node, rs, parser=line.parser)

    return plan


def launch_planner(words: list[str], rs: RuleSet) -> Any:
    """A launch_server line planned as `attnplan sglang launch_server` plans it, pinned to each side's SGLang
    release: the line as a whole-model request (lines.py request_from_launch_line + plan_request, the
    one pipeline of engine lines)."""
    from attnplan.lines import request_from_launch_line
    from attnplan.sglang.launch import parse_launch_line
    from attnplan.request import plan_request

    line = parse_launch_line(words)

    def plan(node: NodeFacts, side: Any) -> Any:
        return plan_request(request_from_launch_line(line, engine=str(side.engine)), node, rs, parser=line.parser)

    return plan


# -- where ---------------------------------------------------------------------------------------
def targets_from_args(args: argparse.Namespace) -> list[Any]:
    from attnplan.policy import simulated_node
    from attnplan.node import local_node
    from attnplan.upgrade import Target

    if args.device is not None:
        names = [d.strip() for d in args.device.split(",") if d.strip()]
        if not names:
            raise InvalidInputError("device", "--device is empty: name catalog GPUs, e.g. H100,B200")
        return [Target(d, simulated_node(d, flashinfer_version=args.flashinfer_version, cubins=args.cubins))
                for d in dict.fromkeys(names)]
    if args.flashinfer_version or args.cubins:
        raise InvalidInputError("device", "--flashinfer-version/--cubins describe declared GPUs: add --device")
    if args.preflight is not None:
        return preflight_targets(args.preflight)
    n = local_node()
    return [Target(str(n.hostname.value or "this node"), n)]


class Unreachable(Exception):
    def __init__(self, host: str, reason: str):
        super().__init__(f"{host}: {reason}")
        self.host, self.reason = host, reason


MAX_NODE_BYTES = 1 << 20   # a node's facts are ~3 KiB: a node that sends more is not answering GET /v1/node


def preflight_targets(path: str, timeout: float = 10.0) -> list[Any]:
    """Each node service's facts (``GET /v1/node``: its probed facts, as preflight's nodes plan with them), read
    once, bounded; a node that does not answer with node facts is ``Unreachable`` (exit 3, as preflight)."""
    import json
    import os

    import httpx

    from attnplan.upgrade import Target
    from attnplan.preflight.http import read_hosts_file

    hosts = read_hosts_file(path)
    token = os.environ.get("ATTNPLAN_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out = []
    with httpx.Client(timeout=timeout, headers=headers, follow_redirects=False) as client:
        for h in hosts:
            try:
                with client.stream("GET", h.url.rstrip("/") + "/v1/node") as r:
                    if r.status_code != 200:
                        raise Unreachable(h.name, f"GET /v1/node answered {r.status_code}")
                    body = b""
                    for chunk in r.iter_bytes():
                        body += chunk
                        if len(body) > MAX_NODE_BYTES:
                            raise Unreachable(h.name, f"GET /v1/node sent over {MAX_NODE_BYTES} bytes")
            except httpx.HTTPError as exc:
                raise Unreachable(h.name, type(exc).__name__) from None
            try:
                facts = NodeFacts.model_validate(json.loads(body)["node"])
            except Exception as exc:  # noqa: BLE001 - an answer that is not node facts: the node is unusable
                raise Unreachable(h.name, f"GET /v1/node is not node facts ({type(exc).__name__})") from None
            out.append(Target(h.name, facts))
    return out


# attnplan's own flags, taken out of a pasted line wherever they stand (as `attnplan vllm serve` does:
# cli/vllm.py split_own), so that `-- vllm serve M -tp 2 --json` works
OWN_VALUES = {"--from": "from_", "--to": "to", "--engine": "engine", "--device": "device", "--preflight": "preflight",
              "--flashinfer-version": "flashinfer_version", "--cubins": "cubins", "--rules": "rules"}
OWN_SWITCHES = {"--json": "json"}


def split_own(words: list[str], args: argparse.Namespace) -> list[str]:
    rest = pull_own_flags(words, args, OWN_VALUES, OWN_SWITCHES)
    if args.device is not None and args.preflight is not None:
        raise InvalidInputError("device", "--device and --preflight are two answers to where: give one")
    return rest


# -- the command ---------------------------------------------------------------------------------
def build(args: argparse.Namespace, rs: RuleSet) -> Any:
    from attnplan.upgrade import model_planner, parse_sides, upgrade

    words = list(args.what or [])
    if not words:
        raise InvalidInputError("model", "give a MODEL, or `-- vllm serve MODEL ...` / `-- python -m "
                                         "sglang.launch_server ...`")
    kind = line_kind(words)
    engine = args.engine
    if kind is not None:
        if engine is not None and engine.strip().lower().partition("==")[0].strip() != kind:
            raise InvalidInputError("engine", f"--engine {engine} contradicts the {kind} line")
        engine = engine or kind
        if any(x is not None for x in (args.kv_cache_dtype, args.page_size)) or args.tp != 1:
            raise InvalidInputError("tp", "--tp/--kv-cache-dtype/--page-size are a MODEL's: a line carries its own flags")
    elif len(words) != 1:
        raise InvalidInputError("model", f"one MODEL, or a line after `--` beginning `vllm serve` or `python -m "
                                         f"sglang.launch_server` (got {' '.join(words[:3])!r}...)")
    a, b = parse_sides(args.from_, args.to, rs, engine)
    if kind is not None and a.engine.name != kind:
        raise InvalidInputError("from", f"a {kind} line is upgraded between {kind} releases, not {a.engine.name}")
    if kind == "vllm":
        planner, name = serve_planner(words, rs), " ".join(words)
    elif kind == "sglang":
        planner, name = launch_planner(words, rs), " ".join(words)
    else:
        if args.tp < 1:
            raise InvalidInputError("tp", f"tensor parallel size must be at least 1, got {args.tp}")
        over = {k: v for k, v in (("kv_cache_dtype", args.kv_cache_dtype), ("page_size", args.page_size)) if v is not None}
        planner, name = model_planner(words[0], rs, overrides=over, tensor_parallel_size=args.tp), words[0]
    return upgrade(rs, a, b, {name: planner}, targets_from_args(args))


def run(args: argparse.Namespace) -> int:
    import sys

    words = list(args.what or [])
    if line_kind(words) is not None:
        args.what = split_own(words, args)  # before the rules are read: --rules may stand in the line
    rs = ruleset_from_args(args)
    try:
        rep = build(args, rs)
    except Unreachable as exc:
        print(f"attnplan: error: node unreachable: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.json:
        emit_json(rep.to_json())
    else:
        print(render(rep))
    return rep.exit_code()


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    sel = v.selected.decode if v.selected.prefill == v.selected.decode else f"{v.selected.prefill}/{v.selected.decode}"
    return f"{v.outcome} ({sel})"


def render(rep: Any) -> str:
    from attnplan.upgrade import changes_text
    from attnplan.render.tables import table

    n = len(rep.deployments)
    changed = sum(1 for d in rep.deployments if d.changed or d.error)
    bad = sum(1 for d in rep.deployments if d.worse)
    out = [f"upgrade {rep.from_} -> {rep.to} ({rep.engine}): {n} deployment(s), {changed} changed, {bad} worse"]
    if rep.rules_changed:
        out += ["", "rules that speak for one release only:"]
        for r in rep.rules_changed:
            side = "before only" if r.applies_before else "after only"
            out.append(f"  {r.id} ({side}; {r.range or 'no range'}): {r.title}" + (f" - {r.source}" if r.source else ""))
    body = [[d.deployment if len(d.deployment) <= 40 else d.deployment[:37] + "...",
             f"{d.device} ({d.capability})" if d.capability else d.device, _cell(d.before), _cell(d.after),
             "WORSE" if d.worse else ("changed" if d.changed or d.error else "same")] for d in rep.deployments]
    out += ["", table(["deployment", "GPU", f"before ({rep.from_})", f"after ({rep.to})", ""], body)]
    details = []
    for d in rep.deployments:
        lines = list(changes_text(d))
        if lines:
            details.append(f"{d.device}: {d.deployment}")
            details += [f"  {ln}" for ln in lines]
    if details:
        out += ["", "changes:", *details]
    return "\n".join(out)
