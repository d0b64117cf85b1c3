"""``POST /v1/compare`` (issue 26): vLLM 0.33 vs SGLang 0.5.23 per GPU for one model, as `attnplan compare --json`.

The model is a preset of this service (the config.json files of its examples directory, by name) or a
config.json sent in the body; never a path on the server. A plain ``def`` handler: the comparison is
CPU work over the rules, run in FastAPI's thread pool.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from attnplan.policy import InvalidInputError

from .models import ErrorOut
from .routes import INVALID, JSON, UNAUTHORIZED, json_body, service
from .service import dumps

PRESET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class CompareRequest(BaseModel):
    # The body policy of every route (rest/bodies.py): strict types, as /v1/plan's (issue 40 #5: tp took
    # true, "2" and 2.5), unknown fields refused.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    model: Optional[StrictStr] = Field(None, min_length=1, max_length=128,
                                       description="a preset name (GET /v1/presets), e.g. llama-3.1-8b")
    config_json: Optional[dict[str, Any]] = Field(None, description="a HuggingFace config.json, instead of a preset")
    devices: list[StrictStr] = Field(min_length=1, max_length=16,
                                     description='GPUs from the device catalog, e.g. ["H100", "B200"]')
    tp: StrictInt = Field(1, ge=1, le=1024, description="tensor parallel size (each row is one rank)")
    kv_cache_dtype: StrictStr = Field("auto", min_length=1, max_length=32,
                                      description="auto, fp8, fp8_e4m3, fp8_e5m2, bf16 or nvfp4 (both engines)")
    page_size: Optional[StrictInt] = Field(None, ge=1, le=1024, description="the block/page size given to both engines")

    @model_validator(mode="after")
    def _one_model(self) -> "CompareRequest":
        if (self.model is None) == (self.config_json is None):
            raise InvalidInputError("model", "give exactly one of model (a preset name) and config_json")
        return self


router = APIRouter()


def _invalid(field: str, exc: Exception) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": str(exc)}])


@router.post("/v1/compare", response_class=JSONResponse,
             summary="vLLM 0.33 vs SGLang 0.5.23 per GPU: backends per phase, page size, query dtype, coercions, refusals",
             responses={400: {"model": ErrorOut, "description": "a body that cannot be decoded"},
                        413: {"model": ErrorOut, "description": "body over 64 KiB"},
                        415: {"model": ErrorOut, "description": "a body not sent as application/json"},
                        **UNAUTHORIZED, **INVALID}, dependencies=[Depends(json_body)])
def compare_route(body: CompareRequest, request: Request) -> Response:
    from attnplan.compare import compare   # one request per engine through the one pipeline (issue 36)

    svc = service(request)
    model: Any = body.config_json
    if body.model is not None:
        # The service's one preset registry (rest/presets.py), as /v1/plan and /v1/plan/serve resolve names.
        path = svc.presets.path(body.model) if svc.presets is not None else None
        if path is None:
            raise _invalid("model", InvalidInputError("model", "no such preset (GET /v1/presets lists them; the "
                                                               "presets shipped with attnplan are known too)"))
        model = str(path)
    try:
        rep = compare(model, body.devices, tp=body.tp, kv_cache_dtype=body.kv_cache_dtype, page_size=body.page_size,
                      ruleset=svc.rules())
    except InvalidInputError as exc:
        # the engine requests' field names (attnplan/request.py ModelRequest) said as this body names them
        field = {"device": "devices", "capability": "devices", "block_size": "page_size",
                 "tensor_parallel_size": "tp"}.get(exc.field, exc.field)
        raise _invalid(field if field in CompareRequest.model_fields else "model", exc) from None
    if body.model is not None:
        rep["model"] = body.model
    return Response(dumps(rep), media_type=JSON)
