"""``serve``: the REST service (api/) under uvicorn, for this node or a declared one."""

from __future__ import annotations

import argparse
import os
import sys

from attnplan.policy import InvalidInputError

from . import verbosity
from .options import add_node_args, add_rules_arg, node_from_args, rules_dir_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="REST service: plans over HTTP, metrics, status page (127.0.0.1 by default)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Serve POST /v1/plan, GET /v1/node, /v1/rules, /v1/matrix, /healthz, /readyz, /metrics and a\n"
            "status page at /. Binding a non-loopback address needs a bearer token of at least 16\n"
            "characters (--token or ATTNPLAN_TOKEN; the variable keeps it out of `ps`) unless --insecure\n"
            "is given. Connections that send no complete request headers within --header-timeout\n"
            "seconds are closed, a body not complete within --body-timeout is answered 408 and a request\n"
            "not answered within --request-timeout 503; at --max-connections the oldest connection\n"
            "waiting on its client makes room. /docs is off\n"
            "unless --docs names local Swagger UI assets (no CDN on the status page's origin)."),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (default: $ATTNPLAN_TOKEN)")
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback address without a token")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-access-log", dest="access_log", action="store_false",
                   help="do not log each request (logged lines never carry the query string)")
    p.add_argument("--max-connections", type=int, default=None, metavar="N",
                   help="open connections at most (default 1000, lowered to fit the descriptor limit)")
    p.add_argument("--header-timeout", type=float, default=None, metavar="SECONDS",
                   help="close a connection whose request headers are not complete by then (default 5)")
    p.add_argument("--body-timeout", type=float, default=None, metavar="SECONDS",
                   help="answer 408 and close when a request body is not complete by then (default 10)")
    p.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="answer 503 and close when a request is not answered by then (default 30)")
    p.add_argument("--docs", metavar="DIR", default=None,
                   help="serve Swagger UI at /docs from DIR (swagger-ui-bundle.js and swagger-ui.css, e.g. the "
                        "swagger-ui-dist npm package); off by default")
    add_node_args(p)
    add_rules_arg(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from attnplan.rest.connections import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_CONNECTIONS, REQUEST_TIMEOUT_S
    from attnplan.rest.security import check_token, is_loopback, resolve_token

    if not 0 <= args.port <= 65535:
        raise InvalidInputError("port", f"{args.port} is not a TCP port (0-65535)")
    max_connections = MAX_CONNECTIONS if args.max_connections is None else args.max_connections
    if not 1 <= max_connections <= 1_000_000:
        raise InvalidInputError("max_connections", f"{max_connections} is out of range (1-1000000)")
    header_timeout = HEADER_TIMEOUT_S if args.header_timeout is None else args.header_timeout
    if not 0.1 <= header_timeout <= 600:  # NaN fails this too
        raise InvalidInputError("header_timeout", f"{header_timeout} is out of range (0.1-600 seconds)")
    timeouts = {}
    for name, default in (("body_timeout", BODY_TIMEOUT_S), ("request_timeout", REQUEST_TIMEOUT_S)):
        value = default if getattr(args, name) is None else getattr(args, name)
        if not 0.1 <= value <= 3600:  # NaN fails this too
            raise InvalidInputError(name, f"{value} is out of range (0.1-3600 seconds)")
        timeouts[name] = value
    token = resolve_token(args.token, os.environ)  # stripped; whitespace only is refused
    if not is_loopback(args.host) and token is None and not args.insecure:
        raise InvalidInputError("host", f"{args.host} is not a loopback address: give --token or ATTNPLAN_TOKEN "
                                        "(or --insecure to serve it to anyone who can connect)")
    check_token(token, args.host)  # a public bind needs a token that cannot be guessed
    node = node_from_args(args)  # bad node flags fail here, before anything listens
    docs_dir = Path(args.docs) if args.docs is not None else None
    if docs_dir is not None:
        from attnplan.rest.docs import load_assets

        load_assets(docs_dir)  # missing assets: exit 2 now, not a broken page later

    # Imported here so that `attnplan plan` never pays for fastapi/uvicorn. Everything a request
    # needs is imported and read from here to create_app's return (rules, presets): the banner
    # reports that start-up time, and no request pays it later.
    import time

    t0 = time.perf_counter()
    from attnplan.rest.app import create_app
    from attnplan.rest.server import serve

    where = f"declared node {node.gpu_name.value}" if node is not None else "this node, probed in the background"
    app = create_app(node=node, token=token, rules_dir=rules_dir_from_args(args), docs_dir=docs_dir)
    if verbosity.level() >= 0:
        print(f"attnplan: service started in {time.perf_counter() - t0:.2f} s (imports, rules, presets read)",
              file=sys.stderr, flush=True)
    serve(app, args.host, args.port, log_level=args.log_level, access_log=args.access_log,
          max_connections=max_connections, header_timeout=header_timeout, **timeouts,
          banner=f"{where}; bearer token {'required' if token else 'not required'}")
    return 0
