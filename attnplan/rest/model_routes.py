"""Whole models over HTTP: ``POST /v1/plan`` with a ``model`` (routes.py hands such bodies here)
and ``POST /v1/plan/serve`` with a pasted ``vllm serve ...`` line.

Both build one ``attnplan.request.ModelRequest`` and answer with what ``attnplan vllm serve
--json`` prints (``request.answer_json``): every attention layer group per rank, and vLLM's
KV-cache groups. A client names a model by its config.json contents, a preset or a repo id in
this node's HuggingFace cache, never by a path on this machine. Planning runs in a worker thread
(``anyio.to_thread``), never on the event loop; rendered answers are kept (they are pure
functions of the request, the node facts and the rules).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Optional

import anyio
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from attnplan.policy import InvalidInputError
from attnplan.request import EXAMPLE_SERVE_LINE, ModelRequest, answer_json, parse_serve_text, plan_request

from .bodies import BODY_KEY, parse_body
from .models import (EXAMPLE_LAUNCH_LINE, ErrorOut, LaunchLineRequest, ModelPlanOut, NodeSpec, PlanRequest,
                     ServeLineRequest, ValidationErrorOut)
from .readiness import NotReady
from .service import Service, dumps

JSON = "application/json"
CACHE_SIZE = 128
# What the planner's own errors call a field -> the request field a client sent.
FIELD_NAMES = {"page_size": "block_size", "model_config": "model", "dcp_world_size": "decode_context_parallel_size"}

router = APIRouter()
_cache: "OrderedDict[tuple[Any, ...], bytes]" = OrderedDict()
_lock = threading.Lock()


def _invalid(loc: tuple[Any, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": message}])


def _field_error(exc: InvalidInputError, prefix: tuple[str, ...] = ("body",)) -> RequestValidationError:
    field = FIELD_NAMES.get(exc.field, exc.field)
    return _invalid((*prefix, *field.split(".")), str(exc))


def _not_ready(exc: NotReady) -> HTTPException:
    return HTTPException(503, detail=f"node facts not ready: {exc.reason}", headers={"Retry-After": "1"})


def _render(svc: Service, req: ModelRequest, spec: Optional[NodeSpec], trace: bool, parser: str) -> bytes:
    """The answer's bytes (runs in a worker thread)."""
    rs = svc.rules()
    try:
        node = svc.node_for(spec)
    except InvalidInputError as exc:  # an unknown device, a bad capability or version
        raise _field_error(exc, ("body", "node")) from None
    key = (req.model_dump_json(), node, rs.revision, trace, parser)
    with _lock:
        body = _cache.get(key)
        if body is not None:
            _cache.move_to_end(key)
            return body
    try:
        sa = plan_request(req, node, rs, allow_paths=False, parser=parser,
                          presets=svc.presets.paths if svc.presets is not None else None)
    except InvalidInputError as exc:
        raise _field_error(exc) from None
    data = answer_json(sa, req, node, trace=trace, rules_revision=rs.revision)
    first = next((g for g in (sa.model.attention_groups if sa.model else ()) if g.prefill is not None), None)
    svc.metrics.plans.labels(data["status"] or "rejected", first.prefill.backend if first else "none",
                             first.decode.backend if first and first.decode else "none").inc()
    body = dumps(data)
    with _lock:
        _cache[key] = body
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return body


async def _answer(request: Request, req: ModelRequest, spec: Optional[NodeSpec], trace: bool,
                  parser: str = "request") -> Response:
    svc: Service = request.app.state.attnplan
    try:
        body = await anyio.to_thread.run_sync(_render, svc, req, spec, trace, parser)
    except NotReady as exc:
        raise _not_ready(exc) from None
    return Response(body, media_type=JSON)


async def plan_model_body(body: PlanRequest, request: Request, trace: bool) -> Response:
    """``POST /v1/plan`` with ``model``: every layer group of the model (routes.py calls this)."""
    try:
        req = body.model_request()
    except ValidationError as exc:  # not reachable through PlanRequest's own validation; kept for callers
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
    return await _answer(request, req, body.node, trace)


def _inline_schema() -> dict[str, Any]:
    # ServeLineRequest is no route parameter (the handler reads the body itself), so it is not in
    # the components: its schema goes inline, NodeSpec by reference (PlanRequest puts it there).
    schema = ServeLineRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


SERVE_BODY = {
    "required": True,
    "content": {
        "text/plain": {"schema": {"type": "string", "minLength": 1, "maxLength": 8192}, "example": EXAMPLE_SERVE_LINE},
        JSON: {"schema": _inline_schema(), "example": {"line": EXAMPLE_SERVE_LINE, "node": {"device": "H100"}}},
    },
}


async def _line_body(request: Request, model: Any) -> Any:
    """A pasted line: ``text/plain`` (the body is the line, the node is this service's) or JSON ``{"line": ...}``
    read under the one body policy of every route (rest/bodies.py)."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    raw = await request.body()
    request.scope[BODY_KEY] = raw  # so that no error repeats what was sent (rest/bodies.py scrub)
    if ctype == "text/plain":
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(("body",), f"not UTF-8 text (byte {exc.start})") from None
        if len(text) > 8192:
            raise _invalid(("body",), f"the line is {len(text)} characters; at most 8192")
        return model.model_construct(line=text, node=None, **({"engine": None} if "engine" in model.model_fields else {}))
    if ctype == JSON or (ctype.startswith("application/") and ctype.endswith("+json")):
        data = parse_body(raw)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RequestValidationError([{"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"]}
                                          for e in exc.errors()]) from None
    raise HTTPException(415, f"send the line as text/plain, or {{\"line\": ...}} as {JSON}")


@router.post(
    "/v1/plan/serve", response_class=JSONResponse, openapi_extra={"requestBody": SERVE_BODY},
    summary="What vLLM 0.33 would do with a pasted `vllm serve ...` line, per rank and layer group",
    responses={200: {"model": ModelPlanOut, "description": "as `attnplan vllm serve ... --json`: status ok, rejected "
                                                           "(rules per layer group) or startup_error (vLLM's own)"},
               401: {"model": ErrorOut, "description": "missing or invalid bearer token (when the service has one)"},
               413: {"model": ErrorOut, "description": "body over 64 KiB"},
               415: {"model": ErrorOut, "description": "neither text/plain nor application/json"},
               422: {"model": ValidationErrorOut, "description": "invalid input; each entry names the field"},
               503: {"model": ErrorOut, "description": "the node's facts are not known yet"}},
)
async def plan_serve(request: Request, trace: bool = Query(True, description="include the per-rule trace")) -> Response:
    """The line is read as `attnplan vllm serve` reads it (vLLM's own parser when installed on this
    node; `vllm serve` may be left out); MODEL must be a preset or a repo id in this node's
    HuggingFace cache. `text/plain`: the body is the line and the node is this service's;
    `application/json`: `{"line": ..., "node": {...}, "engine": ...}`."""
    body = await _line_body(request, ServeLineRequest)
    try:
        line = parse_serve_text(body.line, allow_files=False)  # a client's line never opens a node file
        req = ModelRequest.from_serve_line(line, engine=body.engine or "vllm")
    except InvalidInputError as exc:
        field = FIELD_NAMES.get(exc.field, exc.field)
        raise _invalid(("body", "line"), f"{field}: {str(exc).removeprefix(exc.field + ': ')}") from None
    return await _answer(request, req, body.node, trace, parser=line.parser)


def _render_launch(svc: Service, text: str, spec: Optional[NodeSpec], trace: bool) -> bytes:
    """A launch_server line's answer (runs in a worker thread): SGLang's own pick per phase, the verdict, the
    FlashInfer plan per rank and layer group - what ``attnplan sglang launch_server --json`` prints."""
    from attnplan.lines import plan_launch
    from attnplan.sglang.launch import launch_json, parse_launch_text
    from attnplan.request import read_reference

    rs = svc.rules()
    try:
        node = svc.node_for(spec)
    except InvalidInputError as exc:
        raise _field_error(exc, ("body", "node")) from None
    try:
        line = parse_launch_text(text)
        # a client's model is a preset or a repo id in this node's cache, never a path (as /v1/plan/serve)
        data = read_reference(line.model, allow_paths=False,
                              presets=svc.presets.paths if svc.presets is not None else None)
        la = plan_launch(line, node, rs, data=data)
    except InvalidInputError as exc:
        raise _invalid(("body", "line"), str(exc)) from None
    return dumps(launch_json(la, trace=trace))


LAUNCH_BODY = {
    "required": True,
    "content": {
        "text/plain": {"schema": {"type": "string", "minLength": 1, "maxLength": 8192}, "example": EXAMPLE_LAUNCH_LINE},
        JSON: {"schema": {"type": "object", "required": ["line"], "additionalProperties": False,
                          "properties": {"line": {"type": "string", "minLength": 1, "maxLength": 8192},
                                         "node": {"$ref": "#/components/schemas/NodeSpec"}}},
               "example": {"line": EXAMPLE_LAUNCH_LINE, "node": {"device": "B200"}}},
    },
}


@router.post(
    "/v1/plan/launch", response_class=JSONResponse, openapi_extra={"requestBody": LAUNCH_BODY},
    summary="What SGLang 0.5.23 would do with a pasted `python -m sglang.launch_server ...` line, per rank",
    responses={200: {"description": "as `attnplan sglang launch_server ... --json`: the verdict, SGLang's pick per "
                                    "phase, the FlashInfer plan per rank and layer group"},
               401: {"model": ErrorOut, "description": "missing or invalid bearer token (when the service has one)"},
               413: {"model": ErrorOut, "description": "body over 64 KiB"},
               415: {"model": ErrorOut, "description": "neither text/plain nor application/json"},
               422: {"model": ValidationErrorOut, "description": "invalid input; each entry names the field"},
               503: {"model": ErrorOut, "description": "the node's facts are not known yet"}},
)
async def plan_launch_route(request: Request, trace: bool = Query(True, description="include the per-rule trace")) -> Response:
    """The line is read as `attnplan sglang launch_server` reads it (`python -m sglang.launch_server` may be
    left out); `--model-path` must be a preset or a repo id in this node's HuggingFace cache."""
    body = await _line_body(request, LaunchLineRequest)
    svc: Service = request.app.state.attnplan
    try:
        out = await anyio.to_thread.run_sync(_render_launch, svc, body.line, body.node, trace)
    except NotReady as exc:
        raise _not_ready(exc) from None
    return Response(out, media_type=JSON)
