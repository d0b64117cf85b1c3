"""``serve``: the REST service (api/) under uvicorn, for this node or a declared one."""

from __future__ import annotations

import argparse
import os

from attnplan.policy import InvalidInputError

from .options import add_node_args, add_rules_arg, node_from_args, rules_dir_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="REST service: plans over HTTP, metrics, status page (127.0.0.1 by default)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Serve POST /v1/plan, GET /v1/node, /v1/rules, /v1/matrix, /healthz, /readyz, /metrics and a\n"
            "status page at /. Binding a non-loopback address needs a bearer token (--token or\n"
            "ATTNPLAN_TOKEN; the variable keeps it out of `ps`) unless --insecure is given."),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (default: $ATTNPLAN_TOKEN)")
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback address without a token")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-access-log", dest="access_log", action="store_false", help="do not log each request")
    add_node_args(p)
    add_rules_arg(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from attnplan.rest.security import is_loopback, resolve_token

    if not 0 <= args.port <= 65535:
        raise InvalidInputError("port", f"{args.port} is not a TCP port (0-65535)")
    token = resolve_token(args.token, os.environ)
    if not is_loopback(args.host) and token is None and not args.insecure:
        raise InvalidInputError("host", f"{args.host} is not a loopback address: give --token or ATTNPLAN_TOKEN "
                                        "(or --insecure to serve it to anyone who can connect)")
    node = node_from_args(args)  # bad node flags fail here, before anything listens

    # Imported here so that `attnplan plan` never pays for fastapi/uvicorn.
    from attnplan.rest.app import create_app
    from attnplan.rest.server import serve

    where = f"declared node {node.gpu_name.value}" if node is not None else "this node, probed in the background"
    serve(create_app(node=node, token=token, rules_dir=rules_dir_from_args(args)), args.host, args.port, log_level=args.log_level,
          access_log=args.access_log, banner=f"{where}; bearer token {'required' if token else 'not required'}")
    return 0
