"""The tables of SGLang's resolution (rules/backends.yaml ``engines.sglang.native``), validated."""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from attnplan.errors import RuleError, RulePackError
from attnplan.policy.rulepack import RESOLVER_RULES, RuleSet

Phase = Literal["prefill", "decode"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlatformSpec(_M):
    majors: list[int]
    cuda: str            # the minimum torch.version.cuda, "M.m"


Var = Literal["attention_backend", "prefill_attention_backend", "decode_attention_backend", "kv_cache_dtype",
              "page_size", "speculative_eagle_topk"]


class ChoiceRow(_M):
    """One branch of a choice (``choose``): the first row whose ``when`` holds gives its value."""

    when: Optional[dict[str, Any]] = None
    value: Any


class Refuse(_M):
    """SGLang raising: the message (a template over the resolved arguments), the phase it names and when it
    raises - at startup (the argument pipeline) or when the model runner builds the backend."""

    message: str
    phase: str = "both"                               # prefill | decode | both, or "{phase}" (build_phase rows)
    backend: Optional[str] = None                     # a template too ("{prefill}")
    outcome: Literal["startup", "backend-build"] = "startup"


class Coerce(_M):
    """A silent change SGLang makes (a warning at most), said as a coercion of ``field``: of ``var``'s value
    when the row changed it (and ``when``, read before the row, holds), else of ``given`` to ``runs``."""

    field: str
    var: Optional[Var] = None
    given: Any = None
    runs: Any = None
    when: Optional[dict[str, Any]] = None
    message: str


class Row(_M):
    """One SGLang decision (backends.yaml ``engines.sglang.native.pipeline`` / ``build_phase`` / ``build``): the
    rule it applies, the SGLang function that decides it, when it holds, and what it does."""

    rule: str
    source: str
    when: Optional[dict[str, Any]] = None
    platform: Optional[str] = None                    # short for {fact: sglang.<platform>, eq: true}
    standard_only: bool = False                       # short for {fact: sglang.is_mla, eq: false}
    refuse: Optional[Refuse] = None
    set: dict[Var, Any] = {}
    coerce: list[Coerce] = []
    step: bool = True                                 # the rule joins Resolution.steps when the row applies

    @model_validator(mode="after")
    def _one_effect(self) -> "Row":
        if self.refuse is not None and (self.set or self.coerce):
            raise RuleError("a row refuses or changes arguments, not both")
        for c in self.coerce:
            if c.var is not None and c.var not in self.set:
                raise RuleError(f"coerce.var {c.var!r} is not a variable this row sets")
            if c.var is None and (c.given is None or c.runs is None):
                raise RuleError("a coerce without var names given and runs")
        return self

    def condition(self) -> dict[str, Any]:
        """The row's whole condition (``when`` with its short keys), as the condition language reads it."""
        parts = [self.when] if self.when is not None else []
        if self.platform is not None:
            parts.append({"fact": f"sglang.{self.platform}", "eq": True})
        if self.standard_only:
            parts.append({"fact": "sglang.is_mla", "eq": False})
        return {"all": parts} if parts else {}


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
    choices: dict[str, list[ChoiceRow]] = {}
    pipeline: list[Row]
    build_phase: list[Row] = []
    build: list[Row] = []
    backends: dict[str, BackendSpec]

    def rows(self) -> list[tuple[str, Row]]:
        return [(f"{k}[{i}]", r) for k in ("pipeline", "build_phase", "build") for i, r in enumerate(getattr(self, k))]


# The rule ids sglang/resolve.py names in its own code (engine_resolution's input checks); every other id is a
# row's (``rule:``), and check_whole (policy/rulepack.py) finds those in the tables. Each must be in the rule
# set, so a pack set without one fails to load naming it - never a KeyError at plan time.
# tests/test_sglang_rule_ids.py keeps this list equal to the ids resolve.py spells; the loader's list
# (policy/rulepack.py RESOLVER_RULES) holds them.
CODE_RULES = frozenset({"sglang.backend-names", "sglang.kv-names"})
assert CODE_RULES <= RESOLVER_RULES["attnplan.sglang.resolve:engine_resolution"]


def referenced_rules(data: NativeSpec) -> set[str]:
    """Every rule id SGLang's resolution can name with these tables: the code's and the rows'."""
    return set(CODE_RULES) | {r.rule for _, r in data.rows()}


# The names a message template may use: the resolved arguments, both phases, the model and the row's change.
TEMPLATE_KEYS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "kv_cache_dtype",
                 "page_size", "speculative_eagle_topk", "prefill", "decode", "architecture", "group_size", "phase",
                 "given", "runs")


def _values(raw: Any) -> list[Any]:
    """The choice rows a ``set`` value names (``{choose: ...}``), else none."""
    if isinstance(raw, dict) and "choose" in raw:
        return [raw["choose"]]
    return []


def _check(data: NativeSpec, engine: str) -> None:
    """Every row condition compiles over SGLang's facts, every template names known keys, every choice exists."""
    from attnplan.policy.conditions import compile_condition
    from attnplan.errors import ConditionError

    from .facts import names

    known = names(list(data.platform))

    def cond(where: str, raw: Any) -> None:
        if raw:
            try:
                compile_condition(raw, known)
            except ConditionError as exc:
                raise RulePackError("backends.yaml", f"engines.{engine}.native.{where}: {exc}") from None

    for name, rows in data.choices.items():
        for i, c in enumerate(rows):
            cond(f"choices.{name}[{i}].when", c.when)
    dummy = {k: "x" for k in TEMPLATE_KEYS}
    for where, row in data.rows():
        if row.platform is not None and row.platform not in data.platform:
            raise RulePackError("backends.yaml", f"engines.{engine}.native.{where} names platform {row.platform!r}, "
                                                 f"which native.platform does not define")
        cond(f"{where}.when", row.condition())
        texts = [("refuse", row.refuse.message), ("refuse.phase", row.refuse.phase),
                 ("refuse.backend", row.refuse.backend or "")] if row.refuse else []
        texts += [(f"coerce[{i}]", c.message) for i, c in enumerate(row.coerce)]
        for what, text in texts:
            try:
                text.format_map(dummy)
            except (KeyError, IndexError, ValueError) as exc:
                raise RulePackError("backends.yaml", f"engines.{engine}.native.{where}.{what}: the template {text!r} "
                                                     f"names {exc} (known: {', '.join(TEMPLATE_KEYS)})") from None
        for i, c in enumerate(row.coerce):
            cond(f"{where}.coerce[{i}].when", c.when)
        for var, raw in row.set.items():
            for choice in _values(raw):
                if isinstance(choice, str):
                    if choice not in data.choices:
                        raise RulePackError("backends.yaml", f"engines.{engine}.native.{where}.set.{var} chooses "
                                                             f"{choice!r}, which native.choices does not define")
                    continue
                try:
                    rows = [ChoiceRow.model_validate(c) for c in choice]
                except (ValidationError, TypeError):
                    raise RulePackError("backends.yaml", f"engines.{engine}.native.{where}.set.{var}: a choice is a "
                                                         f"list of {{when, value}} rows") from None
                for j, c in enumerate(rows):
                    cond(f"{where}.set.{var}.choose[{j}].when", c.when)
            if isinstance(raw, dict) and not (set(raw) <= {"choose"} or set(raw) == {"map"} or set(raw) == {"fact"}):
                raise RulePackError("backends.yaml", f"engines.{engine}.native.{where}.set.{var}: a value is a literal, "
                                                     f"{{fact: NAME}}, {{choose: ...}} or {{map: {{old: new}}}}")
            if isinstance(raw, dict) and set(raw) == {"fact"} and raw["fact"] not in known:
                raise RulePackError("backends.yaml", f"engines.{engine}.native.{where}.set.{var}: unknown fact {raw['fact']!r}")


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
    where = f"engines.{engine}" + (f" (sglang=={version})" if version else "")
    if missing:
        raise RulePackError("backends.yaml", f"{where}: SGLang's resolution names rule(s) {', '.join(map(repr, missing))}, "
                                             f"which no pack holds")
    _check(data, engine)
    if version is None:
        # the load checks this (policy/rulepack.py check_whole -> RESOLVER_TABLES): every modelled release's rows
        # too, so a rule only an older release's rows name (sglang.tokenspeed-mla) is a load error as well
        for v in spec.versions:
            native(rs, engine, v)
    return data
