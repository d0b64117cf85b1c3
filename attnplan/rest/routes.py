"""The HTTP routes. Each one validates, calls the library (as the CLI does) and returns bytes."""

from __future__ import annotations

from typing import Literal, Optional

import anyio
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from attnplan.engine_request import with_backend

from attnplan.render import rules_json
from attnplan.policy import InvalidInputError
from attnplan.policy import capability_matrix, matrix_markdown
from attnplan.node.probe import DEFAULT_TIMEOUT_S

from .bodies import BODY_KEY, parse_body
from .metrics import Metrics
from .models import (
    DevicesOut,
    ErrorOut,
    HealthOut,
    MatrixOut,
    NodeOut,
    PlanOut,
    PlanRequest,
    PresetsOut,
    ReadyOut,
    RulesOut,
    ValidationErrorOut,
)
from .presets import load_presets
from .readiness import NotReady
from .service import Service, dumps

JSON = "application/json"
UNAUTHORIZED = {401: {"model": ErrorOut, "description": "missing or invalid bearer token (when the service has one)"}}
INVALID = {422: {"model": ValidationErrorOut, "description": "invalid input; each entry names the field"}}
NOT_READY = {503: {"model": ErrorOut, "description": "the node's facts are not known yet (probe running or failed)"}}
# A re-probe gets this long; past it the caller is told why instead of waiting on a stuck probe.
REFRESH_WAIT_S = DEFAULT_TIMEOUT_S + 2.0

router = APIRouter()


def service(request: Request) -> Service:
    return request.app.state.attnplan


def not_ready(exc: NotReady) -> HTTPException:
    return HTTPException(503, detail=f"node facts not ready: {exc.reason}", headers={"Retry-After": "1"})


def is_json(request: Request) -> bool:
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return ctype == JSON or (ctype.startswith("application/") and ctype.endswith("+json"))


async def json_body(request: Request) -> None:
    """The body is JSON by its content type, whatever FastAPI's own release tolerates (older
    ones parsed a ``text/plain`` body as JSON, newer ones refuse it with a 422), and it passes the
    one body policy of every route (rest/bodies.py: strict UTF-8, no duplicate keys, no NaN,
    bounded nesting) before its model sees it. ``async``: a plain ``def`` dependency costs a round
    trip through the thread pool on every plan."""
    if not is_json(request):
        raise HTTPException(415, f"the body must be JSON sent as 'content-type: {JSON}'")
    raw = await request.body()  # read once; FastAPI's own parse reads the same cached bytes
    request.scope[BODY_KEY] = raw
    parse_body(raw)


@router.post(
    "/v1/plan", response_class=JSONResponse, summary="The backend plan (or rejection) for an attention config",
    responses={200: {"model": PlanOut, "description": "the plan answer (docs/contract.md, The plan): status ok or rejected"},
               400: {"model": ErrorOut, "description": "a body that cannot be decoded"},
               413: {"model": ErrorOut, "description": "body over 64 KiB"},
               415: {"model": ErrorOut, "description": "a body not sent as application/json"},
               **UNAUTHORIZED, **INVALID, **NOT_READY},
    dependencies=[Depends(json_body)],
)
async def plan(body: PlanRequest, request: Request,
               trace: bool = Query(True, description="include the per-rule trace")) -> Response:
    """The same JSON as `attnplan plan --json`. A rejection is HTTP 200 with `status: rejected`,
    listing every violated rule and verified suggestions; `node` absent means this service's node;
    `engine` absent means the default engine layer (the node's vllm, else the newest modelled)."""
    if body.config is None:  # a whole model (rest/model_routes.py)
        from .model_routes import plan_model_body

        return await plan_model_body(body, request, trace)
    svc = service(request)
    try:
        node = svc.node_for(body.node)
    except NotReady as exc:
        raise not_ready(exc) from None
    except InvalidInputError as exc:  # an unknown device, a bad capability or version
        raise invalid(("body", "node", exc.field), exc) from None
    try:
        engine = svc.engine(body.engine)
        config = body.config
        if body.engine_backend is not None:  # under SGLang the name is SGLang's own (attnplan/engine_request.py)
            if engine.name != "sglang":
                raise InvalidInputError("engine_backend", "not a field to send: give config.attention_backend")
            engine, _ = with_backend(engine, body.engine_backend)
        rendered = await svc.plan_async(config, node, trace, engine)
    except InvalidInputError as exc:  # an engine (or the node's installed vllm) the rules do not cover
        raise invalid(("body", exc.field), exc) from None
    return Response(rendered.body, media_type=JSON)


def invalid(loc: tuple[str, ...], exc: InvalidInputError) -> RequestValidationError:
    """A 422 in the same shape as pydantic's, naming the field (and, in the message, what is allowed)."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": str(exc)}])


@router.get("/v1/node", response_class=JSONResponse, summary="This service's node facts, each with its source",
            responses={200: {"model": NodeOut}, **UNAUTHORIZED, **INVALID, **NOT_READY})
async def node(request: Request, refresh: bool = Query(False, description="re-probe this machine first (coalesced: "
                                                                        "one probe at a time, at most one per interval)")) -> Response:
    svc = service(request)
    try:
        facts = await svc.nodes.refresh_async(REFRESH_WAIT_S) if refresh else svc.nodes.node()
    except NotReady as exc:
        raise not_ready(exc) from None
    return Response(svc.node_body(facts), media_type=JSON)


@router.get("/v1/rules", response_class=JSONResponse, summary="Every rule: id, title, reason, source, checks",
            responses={200: {"model": RulesOut}, **UNAUTHORIZED})
async def rules(request: Request) -> Response:
    svc = service(request)
    rs = svc.rules()
    # Built once, in a worker thread: rendering every rule takes tens of ms, too long for the loop.
    body = await anyio.to_thread.run_sync(svc.once, "rules", lambda: dumps(rules_json(rs)))
    return Response(body, media_type=JSON)


@router.get("/v1/matrix", response_class=JSONResponse, summary="Capability matrix derived from the rules",
            responses={200: {"model": MatrixOut, "content": {"text/markdown": {"schema": {"type": "string"}}}},
                       **UNAUTHORIZED, **INVALID})
async def matrix(request: Request, format: Literal["json", "markdown"] = Query("json"),  # noqa: A002
                 engine: Optional[str] = Query(None, min_length=1, max_length=64,
                                               description="engine layer: vllm, vllm==X or flashinfer (absent: JSON "
                                                           "is the default layer, markdown every layer in turn)")
                 ) -> Response:
    svc = service(request)
    rs = svc.rules()
    try:
        eng = svc.matrix_engine(engine)
    except InvalidInputError as exc:
        raise invalid(("query", "engine"), exc) from None
    if format == "markdown":
        text = await anyio.to_thread.run_sync(svc.once, f"matrix.md:{eng}",
                                              lambda: matrix_markdown(rs, engine=eng).encode("utf-8"))
        return Response(text, media_type="text/markdown; charset=utf-8")
    body = await anyio.to_thread.run_sync(
        svc.once, f"matrix.json:{eng}",
        lambda: dumps({"rules_revision": rs.revision, "engine": str(eng) if eng else rs.default_engine,
                       "rows": capability_matrix(rs, engine=eng)}))
    return Response(body, media_type=JSON)


@router.get("/v1/presets", summary="Model presets: the config.json files in examples/, as config fields",
            responses={**UNAUTHORIZED})
def presets(request: Request) -> PresetsOut:
    # Read when the app was created (rest/presets.py says why); never parsed on a request.
    snap = getattr(request.app.state, "presets", None)
    found, errors = snap if snap is not None else load_presets(service(request).examples_dir)
    return PresetsOut.model_validate({"presets": found, "errors": errors})


@router.get("/v1/devices", summary="The device catalog (what a declared node may name)", responses={**UNAUTHORIZED})
async def devices(request: Request) -> DevicesOut:
    return DevicesOut.model_validate({"devices": service(request).devices()})


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> HealthOut:
    return HealthOut(status="ok")


@router.get("/readyz", response_class=JSONResponse, summary="Readiness: the node's facts are known",
            responses={200: {"model": ReadyOut}, 503: {"model": ReadyOut, "description": "not ready, and why"}})
async def readyz(request: Request) -> Response:
    svc = service(request)
    ready, reason = svc.nodes.readiness()
    if svc.rules_error is not None:
        ready, reason = False, f"rule packs not loaded: {svc.rules_error}"
    return Response(dumps({"ready": ready, "reason": reason}), status_code=200 if ready else 503, media_type=JSON)


@router.get("/metrics", summary="Prometheus metrics",
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **UNAUTHORIZED})
async def metrics(request: Request) -> Response:
    m: Metrics = service(request).metrics
    body, content_type = m.exposition()
    return Response(body, media_type=content_type)


def static_routes(files: dict[str, tuple[bytes, str]]) -> APIRouter:
    """The status page: a self-contained shell (no CDN); its script calls the API with fetch."""
    r = APIRouter(include_in_schema=False)
    headers = {
        "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                   "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }

    @r.get("/")
    async def index() -> Response:
        body, media = files["index.html"]
        return Response(body, media_type=media, headers=headers)

    @r.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in files or name == "index.html":
            raise HTTPException(404, detail="Not Found")
        body, media = files[name]
        return Response(body, media_type=media, headers=headers)

    return r

