"""Request bodies and the documented shapes of responses (the OpenAPI contract)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, model_validator

from attnplan.policy import AttentionConfig, PlanAnswer
from attnplan.request import EXAMPLE_SERVE_LINE, MAX_LINE_CHARS, ModelRequest


class NodeSpec(BaseModel):
    """A node you do not have: a catalog device or a compute capability (docs/contract.md, The plan)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    # min_length=1 (after stripping): "" names no device, and the schema says so as the code does.
    device: Optional[str] = Field(None, min_length=1, max_length=100,
                                  description="catalog device, e.g. B200, GB300, H100, 'RTX PRO 6000'")
    capability: Optional[str] = Field(None, min_length=1, max_length=16, description="compute capability, e.g. '10.3'")
    flashinfer_version: Optional[str] = Field(None, min_length=1, max_length=64,
                                              description="the node's flashinfer version (default: supported)")
    cubins: Optional[Literal["available", "missing"]] = Field(None, description="whether trtllm-gen cubins are available")


class PlanRequest(ModelRequest):
    """Either one attention ``config`` (today's body, unchanged) or a whole ``model`` with the
    ``vllm serve`` flags that shape it (``ModelRequest``: attnplan/request.py); ``node`` and
    ``engine`` apply to both."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True, json_schema_extra={"examples": [
        {"config": {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8, "kv_cache_dtype": "fp8"},
         "node": {"device": "B200"}},
        {"model": "google/gemma-3-27b-it", "tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
         "node": {"device": "H100"}},
        {"model": {"model_type": "gpt_oss", "num_hidden_layers": 24, "num_attention_heads": 64,
                   "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880, "sliding_window": 128,
                   "layer_types": ["sliding_attention", "full_attention"] * 12},
         "engine": "vllm==0.33.0", "node": {"device": "B200"}},
    ]})

    config: Optional[AttentionConfig] = Field(None, description="one attention config (one rank, every layer alike)")
    # A whole model instead: config.json contents, a preset name or a cached repo id (ModelRequest).
    model: Optional[Union[StrictStr, dict[str, Any]]] = Field(  # type: ignore[assignment]
        None, description="a whole model instead of config: its config.json contents (a JSON object), a preset name "
                          "(GET /v1/presets) or a HuggingFace repo id in the node's cache; every attention layer "
                          "group is planned per rank, with the vllm serve flags below")
    node: Optional[NodeSpec] = Field(None, description="declared node facts (absent: this service's node)")
    # Absent means the default engine layer, so a client that never heard of engines gets what it got
    # before. A node older than this field answers 422 to a body that has it (extra="forbid"): send
    # it only when you mean one (attnplan.preflight.http does exactly that).
    engine: Optional[StrictStr] = Field(
        None, min_length=1, max_length=64, examples=["vllm", "vllm==0.33.0", "flashinfer"],
        description="engine layer: 'vllm' (absent: the vllm installed on the node, else the newest modelled), "
                    "'vllm==X' for a modelled release, or 'flashinfer' (kernel rules alone); anything the rules "
                    "do not cover is a 422 naming the covered engines")

    @model_validator(mode="before")
    @classmethod
    def _one_shape(cls, data: Any) -> Any:
        # Errors carry the field they are about (config, model, or the serve field sent with a config).
        if not isinstance(data, dict):
            return data
        if "config" not in data and "model" not in data:
            raise _located("config", "missing", "Field required: give config (one attention config) or model (a whole "
                                                "model with its vllm serve flags)", data)
        if "config" in data and "model" in data:
            raise _located("model", "value_error", "give config (one attention config) or model (a whole model), "
                                                   "not both", data)
        if "config" in data:
            extra = sorted(k for k in data if k in ModelRequest.model_fields and k not in ("engine", "model"))
            if extra:
                raise _located(extra[0], "value_error", f"{extra[0]} applies to a whole model: send model with it, or "
                                                        "give the per-rank heads in config", data)
            cfg, engine = data.get("config"), data.get("engine")
            if isinstance(engine, str) and engine.strip().lower().startswith("sglang") and isinstance(cfg, dict) \
                    and "attention_backend" in cfg:
                # under SGLang the name is SGLang's own (its --attention-backend), never a FlashInfer config value:
                # it rides beside the config to SGLang's resolver (attnplan/engine_request.py), as on the CLI
                cfg = dict(cfg)
                data = {**data, "config": cfg, "engine_backend": cfg.pop("attention_backend")}
        return data

    # (set from config.attention_backend under --engine sglang by _one_shape; not a field a client sends)
    engine_backend: Optional[StrictStr] = Field(None, max_length=64, exclude=True, json_schema_extra={"readOnly": True},
                                                description="under engine sglang: SGLang's own --attention-backend "
                                                            "(config.attention_backend moved here)")

    def model_request(self) -> ModelRequest:
        """The ``ModelRequest`` of a body with a ``model``."""
        fields = {k: getattr(self, k) for k in self.model_fields_set if k in ModelRequest.model_fields}
        return ModelRequest.model_validate(fields)


def _located(field: str, kind: str, message: str, data: Any) -> ValidationError:
    """A validation error at ``field`` (pydantic re-locates it under the body)."""
    from pydantic_core import InitErrorDetails, PydanticCustomError

    err = PydanticCustomError(kind if kind != "missing" else "missing_field", message)
    return ValidationError.from_exception_data("PlanRequest", [InitErrorDetails(type=err, loc=(field,), input=data)])


class ServeLineRequest(BaseModel):
    """A pasted ``vllm serve ...`` line (JSON form of ``POST /v1/plan/serve``; a ``text/plain`` body is the line)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [
        {"line": EXAMPLE_SERVE_LINE, "node": {"device": "H100"}}]})

    line: StrictStr = Field(min_length=1, max_length=MAX_LINE_CHARS,
                            description="vllm serve MODEL [flags] (MODEL: a preset or a repo id in the node's cache)")
    node: Optional[NodeSpec] = Field(None, description="declared node facts (absent: this service's node)")
    engine: Optional[StrictStr] = Field(None, min_length=1, max_length=64,
                                        description="engine layer (absent: vllm, as the line is vLLM's)")


EXAMPLE_LAUNCH_LINE = "python -m sglang.launch_server --model-path llama-3.1-8b --tp 2"


class LaunchLineRequest(BaseModel):
    """A pasted SGLang ``launch_server`` line (JSON form of ``POST /v1/plan/launch``; a ``text/plain`` body is
    the line)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": [
        {"line": EXAMPLE_LAUNCH_LINE, "node": {"device": "B200"}}]})

    line: StrictStr = Field(min_length=1, max_length=MAX_LINE_CHARS,
                            description="[python -m] sglang.launch_server --model-path M [flags] (M: a preset or a repo "
                                        "id in the node's cache)")
    node: Optional[NodeSpec] = Field(None, description="declared node facts (absent: this service's node)")


class ModelPlanOut(BaseModel):
    """The answer for a whole model: ``attnplan vllm serve --json``'s JSON plus the echoed request."""

    model_config = ConfigDict(extra="allow")

    schema_version: str
    vllm: dict[str, Any] = Field(description="the serve flags as read (parser: vllm, subset, or request)")
    ranks: int = Field(description="tensor parallel x pipeline parallel")
    status: Literal["ok", "rejected", "startup_error"]
    startup_error: Optional[str] = Field(None, description="the error vLLM raises at startup (heads vs tp, DCP)")
    per_rank: Optional[dict[str, Any]] = Field(
        None, description="one rank's plan (as attnplan plan --json): layer_groups, each with its prefill/decode plan "
                          "or violations, and kv_cache_groups (vLLM's KV-cache groups)")
    notes: list[str]
    request: dict[str, Any] = Field(description="the request as planned (an inline config.json by its sha256)")
    node: dict[str, Any]
    rules_revision: str


class FieldError(BaseModel):
    loc: list[Union[str, int]] = Field(description="where: body / query, then the field path")
    field: str = Field(description="the field, dotted (config.head_dim, node.device, trace)")
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    detail: list[FieldError]


class ErrorOut(BaseModel):
    detail: str


class FactOut(BaseModel):
    value: Any = None
    source: Literal["measured", "declared", "assumed", "unknown"]
    detail: Optional[str] = None


class NodeOut(BaseModel):
    node: dict[str, FactOut]
    fingerprint: str


class ReadyOut(BaseModel):
    ready: bool
    reason: str


class HealthOut(BaseModel):
    status: Literal["ok"]


class RulesOut(BaseModel):
    rules_revision: str
    rules: list[dict[str, Any]]
    backends: dict[str, Any]


class MatrixOut(BaseModel):
    rules_revision: str
    engine: str = Field(description="the engine layer the rows were evaluated for")
    rows: list[dict[str, Any]]


class Preset(BaseModel):
    name: str = Field(description="file name without .json")
    fields: dict[str, Any] = Field(description="attention config fields the config.json implies")


class PresetsOut(BaseModel):
    presets: list[Preset]
    errors: list[str] = Field(description="example files that could not be read, and why")


class DeviceOut(BaseModel):
    name: str
    capability: str
    memory_gib: int
    aliases: list[str]


class DevicesOut(BaseModel):
    devices: list[DeviceOut]


# The answer's schema is PlanAnswer's (node facts rendered by policy.answer.node_json); for a
# whole model (a body with ``model``) it is ModelPlanOut.
PlanOut = Union[PlanAnswer, ModelPlanOut]
