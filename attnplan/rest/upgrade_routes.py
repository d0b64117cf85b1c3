"""``POST /v1/upgrade`` (issue 42 item 3): what changes if a deployment moves to another release, as
``attnplan upgrade --json`` prints it.

The deployment is a preset of this service, a config.json sent in the body, or a pasted ``vllm serve`` /
``sglang.launch_server`` line whose model is a preset or a repo id in this node's cache - never a path on the
server (as /v1/compare and /v1/plan/serve). It is planned on the catalog GPUs named in ``devices``, else on
this service's node. The body passes the one body policy (rest/bodies.py) and strict types; a bad field is a
422 naming it. A plain ``def`` handler: the comparison is CPU work over the rules, run in the thread pool.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from attnplan.policy import InvalidInputError

from .models import ErrorOut
from .readiness import NotReady
from .routes import INVALID, JSON, NOT_READY, UNAUTHORIZED, json_body, not_ready, service
from .service import dumps

PRESET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
WHAT = ("model", "config_json", "serve", "launch")


class UpgradeRequest(BaseModel):
    # The body policy of every route (rest/bodies.py): strict types, unknown fields refused.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True, populate_by_name=True,
                              json_schema_extra={"examples": [
                                  {"from": "vllm==0.32.0", "to": "vllm==0.33.0", "model": "llama-3.1-8b",
                                   "devices": ["H100", "B200"]},
                                  {"from": "flashinfer==0.6.7", "to": "flashinfer==0.7.2.post1",
                                   "serve": "vllm serve llama-3.1-8b -tp 2", "devices": ["GB300"]}]})

    from_: StrictStr = Field(alias="from", min_length=1, max_length=64,
                             description="the release run today: vllm==X, sglang==X or flashinfer==X")
    to: StrictStr = Field(min_length=1, max_length=64, description="the release upgraded to")
    engine: Optional[StrictStr] = Field(None, min_length=1, max_length=64,
                                        description="a FlashInfer upgrade's engine layer (default: vllm, or the line's)")
    model: Optional[StrictStr] = Field(None, min_length=1, max_length=128,
                                       description="a preset name (GET /v1/presets), e.g. llama-3.1-8b")
    config_json: Optional[dict[str, Any]] = Field(None, description="a HuggingFace config.json, instead of a preset")
    serve: Optional[StrictStr] = Field(None, min_length=1, max_length=8192,
                                       description="a `vllm serve MODEL [flags]` line (MODEL: a preset or a cached repo id)")
    launch: Optional[StrictStr] = Field(None, min_length=1, max_length=8192,
                                        description="a `python -m sglang.launch_server --model-path M ...` line")
    devices: Optional[list[StrictStr]] = Field(None, min_length=1, max_length=16,
                                               description='GPUs from the device catalog (absent: this service\'s node)')
    flashinfer_version: Optional[StrictStr] = Field(None, min_length=1, max_length=64,
                                                    description="the flashinfer declared on the devices (engine upgrades)")
    cubins: Optional[Literal["available", "missing"]] = Field(None, description="whether trtllm-gen cubins are available")
    tp: StrictInt = Field(1, ge=1, le=1024, description="model / config_json: tensor parallel size (one rank planned)")
    kv_cache_dtype: Optional[StrictStr] = Field(None, min_length=1, max_length=32,
                                                description="model / config_json: the KV cache dtype")
    page_size: Optional[StrictInt] = Field(None, ge=1, le=1024, description="model / config_json: the block/page size")

    @model_validator(mode="after")
    def _one_deployment(self) -> "UpgradeRequest":
        given = [k for k in WHAT if getattr(self, k) is not None]
        if len(given) != 1:
            raise InvalidInputError("model", "give exactly one of model (a preset), config_json, serve and launch")
        if given[0] in ("serve", "launch") and (self.tp != 1 or self.kv_cache_dtype is not None or self.page_size is not None):
            raise InvalidInputError("tp", "tp, kv_cache_dtype and page_size shape a model: a line carries its own flags")
        if (self.flashinfer_version is not None or self.cubins is not None) and self.devices is None:
            raise InvalidInputError("devices", "flashinfer_version and cubins describe declared devices: give devices")
        return self


router = APIRouter()
# The planner's field -> the body's field a client sent.
FIELDS = {"device": "devices", "capability": "devices", "from": "from", "to": "to", "engine": "engine",
          "flashinfer_version": "flashinfer_version", "cubins": "cubins", "tp": "tp", "tensor_parallel_size": "tp",
          "kv_cache_dtype": "kv_cache_dtype", "page_size": "page_size"}


def _invalid(field: str, exc: Exception) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": str(exc)}])


def _planner(body: UpgradeRequest, rs: Any, svc: Any) -> tuple[str, Any]:
    """(the deployment's name, its planner) for the body's model, config.json or line."""
    from attnplan.upgrade import model_planner

    presets = svc.presets.paths if svc.presets is not None else None
    if body.serve is not None:
        from attnplan.request import ModelRequest, parse_serve_text, plan_request

        line = parse_serve_text(body.serve, allow_files=False)  # a client's line never opens a node file

        def plan_serve(node: Any, side: Any) -> Any:
            req = ModelRequest.from_serve_line(line, engine=str(side.engine))
            return plan_request(req, node, rs, allow_paths=False, parser=line.parser, presets=presets)

        return "vllm serve " + line.model, plan_serve
    if body.launch is not None:
        from attnplan.lines import request_from_launch_line
        from attnplan.sglang.launch import parse_launch_text
        from attnplan import request as vreq

        ll = parse_launch_text(body.launch)
        # a client's model is a preset or a repo id in this node's cache, never a path (as /v1/plan/launch)
        data = vreq.read_reference(ll.model, allow_paths=False, presets=presets)

        def plan_line(node: Any, side: Any) -> Any:  # the line pinned to each side's release, as the CLI plans it
            req = request_from_launch_line(ll, engine=str(side.engine), model=data)
            return vreq.plan_request(req, node, rs, allow_paths=False, parser=ll.parser)

        return "sglang.launch_server " + ll.model, plan_line
    if body.model is not None:
        # The service's one preset registry (rest/presets.py), as /v1/compare resolves names.
        path = svc.presets.path(body.model) if svc.presets is not None and PRESET.match(body.model) else None
        if path is None:
            raise InvalidInputError("model", "no such preset (GET /v1/presets lists them)")
        model: Any = str(path)
    else:
        model = body.config_json
    over = {k: v for k, v in (("kv_cache_dtype", body.kv_cache_dtype), ("page_size", body.page_size)) if v is not None}
    return body.model or "config_json", model_planner(model, rs, overrides=over, tensor_parallel_size=body.tp)


def _line_kind(body: UpgradeRequest) -> Optional[str]:
    return "vllm" if body.serve is not None else "sglang" if body.launch is not None else None


@router.post("/v1/upgrade", response_class=JSONResponse,
             summary="What changes if a deployment moves to another engine or FlashInfer release: per GPU and layer "
                     "group, verdict, selected backend, kernels, page, query dtype, each with its rules",
             responses={200: {"description": "as `attnplan upgrade --json`: rules_changed, deployments (each with "
                                             "before/after verdicts, worse, changes per layer group), worse"},
                        400: {"model": ErrorOut, "description": "a body that cannot be decoded"},
                        413: {"model": ErrorOut, "description": "body over 64 KiB"},
                        415: {"model": ErrorOut, "description": "a body not sent as application/json"},
                        **UNAUTHORIZED, **INVALID, **NOT_READY}, dependencies=[Depends(json_body)])
def upgrade_route(body: UpgradeRequest, request: Request) -> Response:
    from attnplan.policy import simulated_node
    from attnplan.upgrade import Target, parse_sides, upgrade

    svc = service(request)
    rs = svc.rules()
    kind = _line_kind(body)
    try:
        engine = body.engine
        if kind is not None:
            if engine is not None and engine.strip().lower().partition("==")[0].strip() != kind:
                raise InvalidInputError("engine", f"the {kind} line is planned under {kind}")
            engine = engine or kind
        a, b = parse_sides(body.from_, body.to, rs, engine)
        if kind is not None and a.engine.name != kind:
            raise InvalidInputError("from", f"a {kind} line is upgraded between {kind} releases, not {a.engine.name}")
    except InvalidInputError as exc:
        raise _invalid(FIELDS.get(exc.field, "from"), exc) from None
    try:
        name, planner = _planner(body, rs, svc)
    except InvalidInputError as exc:
        raise _invalid(FIELDS.get(exc.field, next(k for k in WHAT if getattr(body, k) is not None)), exc) from None
    try:
        if body.devices is not None:
            targets = [Target(d, simulated_node(d, flashinfer_version=body.flashinfer_version, cubins=body.cubins))
                       for d in dict.fromkeys(body.devices)]
        else:
            node = svc.node_for(None)
            targets = [Target(str(node.hostname.value or "this node"), node)]
    except InvalidInputError as exc:
        raise _invalid(FIELDS.get(exc.field, "devices"), exc) from None
    except NotReady as exc:
        raise not_ready(exc) from None
    try:
        rep = upgrade(rs, a, b, {name: planner}, targets)
    except InvalidInputError as exc:
        raise _invalid(FIELDS.get(exc.field, next(k for k in WHAT if getattr(body, k) is not None)), exc) from None
    except HTTPException:
        raise
    return Response(dumps(rep.to_json()), media_type=JSON)
