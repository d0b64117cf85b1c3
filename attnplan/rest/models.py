"""Request bodies and the documented shapes of responses (the OpenAPI contract)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from attnplan.policy import AttentionConfig, PlanAnswer


class NodeSpec(BaseModel):
    """A node you do not have: a catalog device or a compute capability (SPEC §8)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    # min_length=1 (after stripping): "" names no device, and the schema says so as the code does.
    device: Optional[str] = Field(None, min_length=1, max_length=100,
                                  description="catalog device, e.g. B200, GB300, H100, 'RTX PRO 6000'")
    capability: Optional[str] = Field(None, min_length=1, max_length=16, description="compute capability, e.g. '10.3'")
    flashinfer_version: Optional[str] = Field(None, min_length=1, max_length=64,
                                              description="the node's flashinfer version (default: supported)")
    cubins: Optional[Literal["available", "missing"]] = Field(None, description="whether trtllm-gen cubins are available")


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    config: AttentionConfig
    node: Optional[NodeSpec] = Field(None, description="declared node facts (absent: this service's node)")
    # Absent means the default engine layer, so a client that never heard of engines gets what it got
    # before. A node older than this field answers 422 to a body that has it (extra="forbid"): send
    # it only when you mean one (attnplan.preflight.http does exactly that).
    engine: Optional[str] = Field(
        None, min_length=1, max_length=64, examples=["vllm", "vllm==0.33.0", "flashinfer"],
        description="engine layer: 'vllm' (absent: the vllm installed on the node, else the newest modelled), "
                    "'vllm==X' for a modelled release, or 'flashinfer' (kernel rules alone); anything the rules "
                    "do not cover is a 422 naming the covered engines")


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


# The answer's schema is PlanAnswer's (node facts rendered by policy.answer.node_json).
PlanOut = PlanAnswer
