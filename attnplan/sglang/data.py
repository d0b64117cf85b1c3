"""The tables of SGLang's resolution (rules/backends.yaml ``engines.sglang.native``), validated."""

from __future__ import annotations

import functools
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from attnplan.policy.errors import RulePackError
from attnplan.policy.rulepack import RESOLVER_RULES, RuleSet

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
    # what get_default_attn_backend answers for these flags (model_overrides/qwen3_5.py asks it first)
    default_backend: Optional[str] = None
    speculative: Optional[bool] = None               # a --speculative-algorithm is given
    backend: str
    page_size: Optional[int] = None                  # declared with the backend (overrides the user's, last writer wins)


class ModelSpec(_M):
    """One architecture's override (arg_groups/model_overrides/*.py) and model_hook.py's assert."""

    rule: str
    # which flags must be unset for the default: all three (model_override_base.py
    # is_attention_backend_not_set) or --attention-backend alone (``cfg.attention_backend is None``)
    unset: Literal["all", "base"] = "all"
    default: list[DefaultRow] = []
    allowed: Optional[list[str]] = None
    # what the assert reads: both phases (attention_backends_of) or the base backend alone
    assert_on: Literal["phases", "base"] = "phases"
    hybrid_gdn: bool = False                         # configs/hybrid_arch.py hybrid_gdn_config

    @field_validator("allowed", mode="before")
    @classmethod
    def _allowed_names(cls, v: object) -> object:
        # an entry that holds for some releases only is {backend: X, versions: R}; the release's layer keeps
        # it as {backend: X} (rulepack.py _for_release drops the key), read here as the name
        if isinstance(v, list):
            return [x["backend"] if isinstance(x, dict) and set(x) == {"backend"} else x for x in v]
        return v


class HybridGdnSpec(_M):
    """attention_registry.py attn_backend_wrapper: the backends a hybrid GDN model builds with on Blackwell."""

    rule: str
    sm120: list[str]
    blackwell: list[str]                              # HYBRID_GDN_SM100_BACKENDS (10.x, 11.x)


class EagleSpec(_M):
    """speculative_hook.py _handle_eagle_family: the EAGLE top-k (the user's, else _auto_choose_speculative_params')
    and the trtllm_mha refusal for top-k > 1."""

    rule: str
    algorithms: list[str]                             # the algorithms the EAGLE family handler runs for
    auto_topk: dict[str, int]                         # architecture -> top-k when --speculative-num-steps is unset
    default_auto_topk: int
    refuse_topk_above: int
    backends: list[str]                               # a phase on one of these with top-k above the bound is refused
    page_rule: str
    page_tree_backends: list[str]                     # _PAGE_TREE_SPEC_BACKENDS: top-k > 1 with pages > 1


class CutedslSpec(_M):
    """overrides.py _cutedsl_prefill_backend_fill: decode-only, SM100 only, its prefill filled."""

    rule: str
    platform: str
    kv_dtypes: list[str]
    prefill_fill: str


class DeterministicSpec(_M):
    allowed: list[str]
    deepseek: list[str]
    absorbed_mla: list[str]
    radix_supported: list[str]
    default: list[DefaultRow]


class PageArch(_M):
    """An architecture a page constraint gives its own page (overrides.py _fa4_page_constraint: DiffusionGemma)."""

    architecture: str
    page: int


class PageSpec(_M):
    allowed: list[int]
    coerce: int
    rule: str
    standard_only: bool = False
    platform: Optional[str] = None
    architectures: list[PageArch] = []


class Alias(_M):
    """serving_hook.py handle_deprecated_args: a deprecated backend name and what it becomes."""

    name: str
    to: str
    prefill_to: str                                   # the name a prefill flag gets (``to`` may be decode-only)
    kv_cache_dtype: Optional[str] = None              # set where the base or decode flag named it
    rule: str


class ForcedTopk(_M):
    """model_override_base.py _forces_eagle_topk_one: an algorithm whose top-k counts as declared."""

    algorithm: str


class MlaBackendCheck(_M):
    """overrides.py _mla_backend_page_constraints / _mla_kv_cache_dtype_checks for one MLA backend as the base
    or decode backend, and its factory's MLA-only refusal."""

    backend: str
    pages: list[int]
    coerce: int
    platform: str
    kv_dtypes: list[str]
    mla_only: bool = True
    rule: str


class PhaseRow(_M):
    capability_major: Optional[int] = None
    candidates: Optional[list[str]] = Field(None, min_length=1)
    runs: Optional[str] = None
    # a second kernel of the same phase the FlashInfer plan does not name (flashinfer_backend.py's ragged
    # prefill wrapper beside the paged one), said plainly
    also: Optional[str] = None


class BackendSpec(_M):
    runs_flashinfer: bool
    source: str
    runs: str = ""
    standard: dict[Phase, list[PhaseRow]] = {}
    mla: dict[Phase, list[PhaseRow]] = {}
    # the model kinds the backend serves (its attention_registry.py factory builds an MLA or a standard
    # backend): a fix never offers a backend for the other kind
    kinds: list[Literal["standard", "mla"]] = ["standard", "mla"]


class NativeSpec(_M):
    platform: dict[str, PlatformSpec]
    aliases: list[Alias] = []
    forces_topk_one: list[ForcedTopk] = []
    mla_backend_checks: list[MlaBackendCheck] = []
    default: dict[Literal["standard", "mla"], list[DefaultRow]]
    models: dict[str, ModelSpec]
    deterministic: DeterministicSpec
    pages: dict[str, PageSpec]
    default_page_size: int
    kv4: dict[Literal["standard", "mla", "fa4_prefill_standard", "fa4_prefill_mla"], list[str]]
    hybrid_gdn: HybridGdnSpec
    eagle: EagleSpec
    cutedsl_mla: CutedslSpec
    backends: dict[str, BackendSpec]


# The rule ids sglang/resolve.py names in its own steps (the tables name the others): every one must be in
# the rule set, checked with the tables (``native``), so a pack set without one fails naming it - never a
# KeyError at plan time (issue 40 class 3). tests/test_sglang_rule_ids.py keeps this list equal to the
# ids resolve.py spells.
# The rule ids the resolver's code names: one list, the loader's (policy/rulepack.py RESOLVER_RULES), so a pack set
# without one of them fails to load instead of failing every SGLang plan.
CODE_RULES = RESOLVER_RULES["attnplan.sglang.resolve:engine_resolution"]


def referenced_rules(data: NativeSpec) -> set[str]:
    """Every rule id SGLang's resolution can name with these tables: the code's and the tables'."""
    return (set(CODE_RULES) | {m.rule for m in data.models.values()} | {p.rule for p in data.pages.values()}
            | {data.hybrid_gdn.rule, data.eagle.rule, data.eagle.page_rule, data.cutedsl_mla.rule}
            | {a.rule for a in data.aliases} | {c.rule for c in data.mla_backend_checks})


@functools.lru_cache(maxsize=16)
def native(rs: RuleSet, engine: str = "sglang", version: Optional[str] = None) -> NativeSpec:
    """The engine's native tables of this rule set at ``version`` (None: the newest modelled release);
    a malformed table names the field."""
    spec = rs.layer(engine, version) if engine in rs.engines else None
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
    missing = sorted(referenced_rules(data) - ids)
    if missing:
        raise RulePackError("backends.yaml", f"engines.{engine}: SGLang's resolution names rule(s) {', '.join(missing)}, "
                                             f"which no pack holds")
    for where, rows in [("default.standard", data.default["standard"]), ("default.mla", data.default["mla"]),
                        ("deterministic.default", data.deterministic.default)] + \
                       [(f"models.{a}.default", m.default) for a, m in data.models.items()]:
        for row in rows:
            names = [row.platform] if isinstance(row.platform, str) else (row.platform or [])
            for n in names:
                if n not in data.platform:
                    raise RulePackError("backends.yaml", f"engines.{engine}.native.{where} names platform {n!r}, "
                                                         f"which native.platform does not define")
    for n in [data.cutedsl_mla.platform] + [p.platform for p in data.pages.values() if p.platform] + \
             [c.platform for c in data.mla_backend_checks]:
        if n not in data.platform:
            raise RulePackError("backends.yaml", f"engines.{engine}.native names platform {n!r}, which native.platform "
                                                 f"does not define")
    return data
