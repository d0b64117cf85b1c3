"""The tables of SGLang's resolution (rules/backends.yaml ``engines.sglang.native``), validated."""

from __future__ import annotations

import functools
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from attnplan.policy.errors import RulePackError
from attnplan.policy.rulepack import RuleSet

Phase = Literal["prefill", "decode"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlatformSpec(_M):
    majors: list[int]
    cuda: str            # the minimum torch.version.cuda, "M.m"


class DefaultRow(_M):
    """One branch of a default: every condition given must hold."""

    platform: Union[str, list[str], None] = None     # a platform predicate (any of a list)
    no_spec_or_topk_one: Optional[bool] = None       # utils/common.py is_no_spec_infer_or_topk_one
    # (no speculative algorithm, or its EAGLE top-k declared, or DFLASH): get_default_attn_backend's SM100 branch
    spec_topk_declared: Optional[bool] = None
    asymmetric_kv: Optional[bool] = None             # model_config.has_asymmetric_kv
    sinks: Optional[bool] = None                     # model_config.has_attention_sinks
    deepseek: Optional[bool] = None                  # overrides.py _deterministic_is_deepseek_model
    backend: str


class ModelSpec(_M):
    rule: str
    default: list[DefaultRow] = []
    allowed: Optional[list[str]] = None


class DeterministicSpec(_M):
    allowed: list[str]
    deepseek: list[str]
    absorbed_mla: list[str]
    radix_supported: list[str]
    default: list[DefaultRow]


class PageSpec(_M):
    allowed: list[int]
    coerce: int
    rule: str
    standard_only: bool = False
    platform: Optional[str] = None


class PhaseRow(_M):
    capability_major: Optional[int] = None
    candidates: Optional[list[str]] = Field(None, min_length=1)
    runs: Optional[str] = None


class BackendSpec(_M):
    runs_flashinfer: bool
    source: str
    runs: str = ""
    standard: dict[Phase, list[PhaseRow]] = {}
    mla: dict[Phase, list[PhaseRow]] = {}


class NativeSpec(_M):
    platform: dict[str, PlatformSpec]
    default: dict[Literal["standard", "mla"], list[DefaultRow]]
    models: dict[str, ModelSpec]
    deterministic: DeterministicSpec
    pages: dict[str, PageSpec]
    default_page_size: int
    kv4: dict[Literal["standard", "mla", "fa4_prefill_standard", "fa4_prefill_mla"], list[str]]
    backends: dict[str, BackendSpec]


@functools.lru_cache(maxsize=8)
def native(rs: RuleSet, engine: str = "sglang") -> NativeSpec:
    """The engine's native tables of this rule set; a malformed table names the field."""
    spec = rs.engines.get(engine)
    if spec is None or spec.native is None:
        raise RulePackError("backends.yaml", f"engines.{engine}.native is missing")
    try:
        data = NativeSpec.model_validate(spec.native)
    except ValidationError as exc:
        where = "; ".join(".".join(str(x) for x in e["loc"]) + ": " + e["msg"] for e in exc.errors())
        raise RulePackError("backends.yaml", f"engines.{engine}.native: {where}") from None
    known = set(rs.backends)
    for name, b in data.backends.items():
        for kind in (b.standard, b.mla):
            for rows in kind.values():
                for row in rows:
                    for c in row.candidates or ():
                        if c not in known:
                            raise RulePackError("backends.yaml", f"engines.{engine}.native.backends.{name} names unknown backend {c!r}")
    ids = {r.id for r in rs.rules}
    for rid in [m.rule for m in data.models.values()] + [p.rule for p in data.pages.values()]:
        if rid not in ids:
            raise RulePackError("backends.yaml", f"engines.{engine}.native names rule {rid!r}, which no pack holds")
    return data
