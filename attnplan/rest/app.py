"""``create_app``: the REST service of one node (declared facts, or this machine probed).

    uvicorn.run(create_app(node=simulated_node("B200")), host="127.0.0.1", port=8001)
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnplan.policy import NodeFacts, RulePackError, RuleSet, default_ruleset, load_rules
from attnplan.node import NodeCache, ProbeIO
from attnplan.node.probe import ARTIFACTORY_TTL_S, DEFAULT_TIMEOUT_S

from .bodies import BODY_KEY, client_strings, scrub
from .metrics import Metrics, MetricsMiddleware
from .presets import Presets, default_examples_dir
from .readiness import PROBE_DEADLINE_S, NodeService
from .compare_routes import router as compare_router
from .model_routes import router as model_router
from .upgrade_routes import router as upgrade_router
from .routes import router, static_routes
from .docs import docs_routes
from .readiness import REFRESH_INTERVAL_S
from .security import (MAX_BODY_BYTES, OPEN_PATHS, OPEN_PREFIXES, BearerAuth, BodyLimit, CatchAll, CloseOnError,
                       NoTokenInURL)
from .service import Service

log = logging.getLogger("attnplan.api")
STATIC = Path(__file__).resolve().parent / "static"
MEDIA = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def _version() -> str:
    import importlib.metadata as md

    try:
        return md.version("attnplan")
    except md.PackageNotFoundError:
        return "0"


def _static_files() -> dict[str, tuple[bytes, str]]:
    # Read once: the page is a few KiB and serving it must not touch the disk per request.
    return {p.name: (p.read_bytes(), MEDIA[p.suffix]) for p in STATIC.iterdir() if p.suffix in MEDIA}


class ErrorResponse(JSONResponse):
    """Errors are ASCII-escaped: a field name or message may carry a client's lone surrogates,
    which UTF-8 cannot encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _field(loc: list[Any]) -> str:
    parts = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
    return ".".join(str(p) for p in parts) or (str(loc[0]) if loc else "body")


def _errors(exc: RequestValidationError, sent: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    out = []
    for e in exc.errors():
        loc = list(e.get("loc", ()))
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "json_invalid" and e.get("ctx"):
            loc = ["body"]
            msg = f"{msg}: {(e.get('ctx') or {}).get('error', 'malformed JSON')}"
        elif e.get("type") == "value_error":
            # Our own refusals (InvalidInputError) may quote a value the client sent: not repeated back
            # (rest/bodies.py; pydantic's own messages never carry the input).
            msg = scrub(msg, sent)
        # Never the input itself: it may be 64 KiB of junk, and echoing it helps nobody.
        out.append({"loc": loc, "field": _field(loc), "msg": msg, "type": str(e.get("type", "value_error"))})
    return out


def create_app(*, node: Optional[NodeFacts] = None, token: Optional[str] = None,
               node_cache: Optional[NodeCache] = None, probe_io: Optional[ProbeIO] = None,
               artifactory_ttl: float = ARTIFACTORY_TTL_S, artifactory_timeout: float = DEFAULT_TIMEOUT_S,
               probe_deadline: float = PROBE_DEADLINE_S, examples_dir: Optional[Path] = None,
               max_body_bytes: int = MAX_BODY_BYTES, rules_dir: Optional[Path] = None,
               ruleset: Optional[RuleSet] = None, refresh_interval: float = REFRESH_INTERVAL_S,
               docs_dir: Optional[Path] = None) -> FastAPI:
    """The service. ``node``: serve these declared facts (no probing); else probe this machine in
    the background (through ``node_cache`` / ``probe_io`` when given). ``token``: require
    ``Authorization: Bearer <token>`` on everything but health, readiness and the page shell.
    A probe still running after ``probe_deadline`` seconds counts as a probe failure.
    ``rules_dir``: rule packs to serve instead of the shipped ones; packs that fail to load keep
    the service not ready (``/readyz`` 503 naming the pack) and plan routes at 503.
    ``refresh_interval``: ``?refresh=true`` within this many seconds of the last probe is served
    from it. ``docs_dir``: serve Swagger UI at ``/docs`` from these local assets (off when None:
    nothing on this origin, where the status page keeps the token, loads from a CDN)."""
    rules_error: Optional[str] = None
    if ruleset is None:
        try:
            ruleset = load_rules(rules_dir) if rules_dir is not None else default_ruleset()
        except RulePackError as exc:
            rules_error = str(exc)
            log.error("rule packs failed to load: %s", exc)
    metrics = Metrics()
    nodes = NodeService(metrics=metrics, node=node, node_cache=node_cache, probe_io=probe_io,
                        artifactory_ttl=artifactory_ttl, artifactory_timeout=artifactory_timeout,
                        probe_deadline=probe_deadline, refresh_interval=refresh_interval)
    svc = Service(metrics=metrics, nodes=nodes,
                  examples_dir=examples_dir if examples_dir is not None else default_examples_dir(),
                  ruleset=ruleset, rules_error=rules_error)
    # Presets are read now, not on a request: reading one may import transformers (seconds).
    t0 = time.perf_counter()
    svc.presets = Presets(svc.examples_dir)  # one registry for every route (rest/presets.py)
    presets = (svc.presets.listed, svc.presets.errors)
    log.info("presets: %d read (%d refused) from %s in %.2f s", len(presets[0]), len(presets[1]),
             svc.examples_dir, time.perf_counter() - t0)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        nodes.start()
        try:
            yield
        finally:
            nodes.stop()

    app = FastAPI(
        title="attnplan", version=_version(), lifespan=lifespan, redoc_url=None, docs_url=None,
        swagger_ui_oauth2_redirect_url=None,
        description="Which attention kernels will run on this node, for this model, and why not. "
                    "`POST /v1/plan` answers as `attnplan plan --json` does (docs/contract.md, The plan).",
    )
    app.state.attnplan = svc
    app.state.presets = presets
    static = static_routes(_static_files())
    app.include_router(router)
    app.include_router(model_router)  # whole models and vllm serve lines (rest/model_routes.py)
    app.include_router(compare_router)  # vLLM and SGLang side by side (rest/compare_routes.py)
    app.include_router(upgrade_router)  # one deployment under two releases (rest/upgrade_routes.py)
    app.include_router(static)
    if docs_dir is not None:
        app.include_router(docs_routes(docs_dir, title=app.title))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> ErrorResponse:
        raw = request.scope.get(BODY_KEY)
        sent = frozenset(client_strings(raw)) if isinstance(raw, bytes) else frozenset()
        return ErrorResponse({"detail": _errors(exc, sent)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> ErrorResponse:
        return ErrorResponse({"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> ErrorResponse:
        # The traceback goes to the server's log (uvicorn prints it); the client learns only that it failed.
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return ErrorResponse({"detail": "internal server error"}, status_code=500)

    # Added innermost first: metrics see every request (401s and 413s included), auth runs
    # before the body is read, the body limit before any parser.
    app.add_middleware(CatchAll)  # innermost: an unhandled exception is a 500 that keeps the connection (issue 40 #5)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    if token:
        app.add_middleware(BearerAuth, token=token)
    app.add_middleware(NoTokenInURL)
    # Requests refused before routing (401, 413) have no matched route: label them by path when
    # it is one of ours. (Recent FastAPI keeps included routers whole in app.routes.)
    paths = {getattr(r, "path", None) for r in (*app.routes, *router.routes, *static.routes)}
    app.add_middleware(MetricsMiddleware, metrics=metrics, known_paths=frozenset(p for p in paths if p))
    app.add_middleware(CloseOnError)  # outermost: every refusal, whoever makes it, closes the connection

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            if token:
                schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                for path, ops in schema["paths"].items():
                    if path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES):
                        for op in ops.values():
                            op["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
