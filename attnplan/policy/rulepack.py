"""Rule packs: YAML files of rules, safe-loaded and validated, compiled once.

A pack either loads whole or raises ``RulePackError`` naming the file and the rule: unknown
keys, duplicate ids, unknown facts or backends and bad version specifiers are all refused. The
catalog's engine rows are held to a schema and their conditions compiled at load; a directory of
packs (policy/shipped.py) is then checked as a whole (``check_whole``): every rule id the code
(``RESOLVER_RULES``) or the catalog names exists, or nothing loads (issue 40 #3).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .conditions import ConditionError, Pred, compile_condition
from attnplan.errors import RuleError, RulePackError


Phase = Literal["prefill", "decode"]
Scope = Literal["candidate", "pair"]
Layer = Literal["kernel", "engine"]
EngineName = str  # an engine layer named in backends.yaml ``engines:`` (vllm, sglang, flashinfer)
RULE_ID = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")
# Limits on what a rules directory may hold, checked before any pack is parsed (issue 24 #13:
# 40 packs of ~1 MB, 430k rules, ran past 150 s). The shipped packs are ~40 KB in all.
MAX_PACK_BYTES = 1024 * 1024
MAX_DIR_BYTES = 2 * 1024 * 1024
MAX_PACKS = 256


class CheckSpec(BaseModel):
    """One requirement: where it applies (scope, backends, phases, ``when``) and what it needs."""

    model_config = ConfigDict(extra="forbid")

    scope: Scope = "candidate"
    backends: Optional[list[str]] = None
    phases: Optional[list[Phase]] = None
    when: Optional[dict[str, Any]] = None
    require: dict[str, Any]
    message: Optional[str] = None


class VerifiedRecord(BaseModel):
    """One measurement of a rule against a real GPU (issue 13): where, with what, and the verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str
    capability: str
    flashinfer: str
    date: str
    verdict: Literal["consistent", "stale", "dangerous"]
    note: str = ""


class SourceOnly(BaseModel):
    """A rule read from source and never measured, with why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_only: str = Field(min_length=1)


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    reason: str
    source: str
    layer: Layer = "kernel"
    flashinfer: Optional[str] = None   # kernel rules: the flashinfer versions this rule describes
    vllm: Optional[str] = None         # engine rules: the vLLM versions this rule was read for
    # engine rules of another engine (issue 26): its name and the versions the rule was read for
    engine: Optional[str] = None
    versions: Optional[str] = None
    verified: Optional[Union[list[VerifiedRecord], SourceOnly]] = None
    fix: Optional[str] = None
    fixed_in: Optional[str] = None
    # "resolver": an engine rule its engine's resolver applies (backends.yaml engines.<name>.resolver)
    # before any candidate is checked - a backend it switches, a page size it forces, a refusal at
    # one of its phases (outcome); such a rule has no checks of its own.
    # "verdict": an engine rule the verdict applies (policy/verdict.py) from the engine's own backend data
    # (backends.yaml engines.<name>.engine_backend) - its validation of the backend it runs, which is not
    # FlashInfer's and has no candidate checks.
    applied_by: Literal["checks", "resolver", "verdict"] = "checks"
    outcome: Optional[Literal["startup", "backend-build", "first-request", "silent-wrong", "coercion", "default"]] = None
    checks: list[CheckSpec] = []

    @model_validator(mode="after")
    def _layer_ranges(self) -> "RuleSpec":
        if self.layer == "kernel" and self.vllm is not None:
            raise RuleError("a kernel rule has no vllm range (it says what FlashInfer runs)")
        if self.layer == "engine" and self.flashinfer is not None:
            raise RuleError("an engine rule has no flashinfer range (give it a vllm range)")
        if self.layer == "kernel" and (self.engine is not None or self.versions is not None):
            raise RuleError("a kernel rule names no engine (it says what FlashInfer runs)")
        if self.vllm is not None and self.engine not in (None, "vllm"):
            raise RuleError("a vllm range belongs to a vllm rule; give another engine's range as versions")
        if self.applied_by == "checks" and not self.checks:
            raise RuleError("a rule needs at least one check (or applied_by: resolver, for an engine's resolver)")
        if self.applied_by in ("resolver", "verdict") and (self.checks or self.layer != "engine"):
            raise RuleError(f"a {self.applied_by} rule is an engine rule without checks")
        return self

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # A rule with a single check may write the check's keys at the top level.
        if isinstance(data, dict) and "require" in data and "checks" not in data:
            data = dict(data)
            check = {k: data.pop(k) for k in ("scope", "backends", "phases", "when", "require", "message") if k in data}
            data["checks"] = [check]
        return data


class PackSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pack: str
    description: str = ""
    # an engine pack may name its engine and versions once for all its rules (issue 26)
    engine: Optional[str] = None
    versions: Optional[str] = None
    rules: list[RuleSpec]


class CallSpec(BaseModel):
    """How one phase of a backend is executed: the adapter's calling convention and FlashInfer's entry point."""

    model_config = ConfigDict(extra="forbid")

    call: str
    entry_point: str
    returns_lse: bool


class VerifyCallSpec(BaseModel):
    """What ``attnplan verify`` needs of a call besides invoking it (attnplan/verify/call_facts.py)."""

    model_config = ConfigDict(extra="forbid")

    jit: Literal["prefill", "decode", "mla", "xqa", "sink"]   # the JIT module family a probe builds
    inputs: Literal["paged", "ragged", "latent"] = "paged"     # what a probe reads
    tensor_core_kernel: bool = False        # use_tensor_cores runs the prefill module (its own tolerance key)
    query_to_fp8_over_fp8_kv: bool = False  # converts the query to e4m3 over an fp8 cache (the reference mirrors it)


class JitNameSpec(BaseModel):
    """A call whose FlashInfer JIT module is *named* by fewer parameters than it is compiled for
    (backends.yaml ``calls.<c>.jit_name``): two modules that differ only in what the name leaves
    out share one build directory and one loaded library, so one process (or two sharing a JIT
    cache at once) runs the other's kernel. policy/jit_names.py rejects such a pair in one plan;
    verify's runner never builds two of them at once."""

    model_config = ConfigDict(extra="forbid")

    named_by: list[str] = Field(min_length=1)   # the plan's modules[].params FlashInfer's name is made of (and the backend)
    compiled: list[str] = Field(min_length=1)   # ... and those compiled into the module that the name leaves out
    rule: str                                   # the rule id a clash is reported under
    source: str
    verified: Optional[Union[list[VerifiedRecord], SourceOnly]] = None


class CallInfoSpec(BaseModel):
    """What one kernel call is, whichever backend names it (backends.yaml ``calls:``): the JIT module the
    plan lists for it, where it runs at all, and whether ``attnplan verify`` has a probe for it."""

    model_config = ConfigDict(extra="forbid")

    source: str
    module: str                                  # the plan's modules[].params.kernel for this call
    module_tensor_cores: Optional[str] = None    # ... when the decode runs on tensor cores
    capability_majors: Optional[list[int]] = None  # the families it runs on at all (None: where its rules allow)
    verify_probe: bool = False                   # attnplan/verify/calls.py CALLS runs it directly
    verify: VerifyCallSpec                       # verify's facts about the call
    jit_name: Optional[JitNameSpec] = None       # its module's name leaves compiled parameters out


class SplitKVSpec(BaseModel):
    """KV dtypes and capability families where a family's kernels must run without split-KV."""

    model_config = ConfigDict(extra="forbid")

    source: str
    kv_dtypes: list[str] = Field(min_length=1)
    capability_majors: list[int] = Field(min_length=1)


class FamilySpec(BaseModel):
    """What a backend family means for the plan (backends.yaml ``families:``), so that no code reads
    meaning out of a family's or a backend's name."""

    model_config = ConfigDict(extra="forbid")

    doc: str = ""
    source: str
    module_kind: Literal["jit", "cubin"]         # JIT-compiled here, or precompiled cubins
    trtllm_api: bool                             # block tables + seq_lens (no paged_kv_indices)
    kv_layout: Optional[Literal["NHD", "HND"]] = None   # the cache layout it needs (None: either)
    query_dtype_over_kv: dict[str, str] = {}     # KV dtype -> the query dtype its kernels take over it
    output_dtype_over_kv: dict[str, str] = {}    # KV dtype -> the output dtype its kernels write over it
    tensor_core_decode_group: Optional[int] = None      # decode runs on tensor cores from this GQA group
    tensor_core_decode_backends: list[str] = []         # ... and always on these backends' decode
    split_kv_disabled: Optional[SplitKVSpec] = None


class ArtifactoryCheckSpec(BaseModel):
    """Where a plan can depend on the artifactory check: the probe asks the artifactory there only."""

    model_config = ConfigDict(extra="forbid")

    source: str
    when: dict[str, Any]


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    kind: Literal["standard", "mla", "any"]
    phases: list[Phase]
    family: str                          # a families entry: what the family means for the plan
    flashinfer_backend: str
    calls: dict[Phase, CallSpec]
    mla_calls: dict[Phase, CallSpec] = {}   # a kind-"any" backend serving an MLA model's phase
    sink_calls: dict[Phase, CallSpec] = {}  # with attention sinks (config.sinks), this call instead
    kernels: dict[Phase, str]
    workspace_bytes: int = Field(ge=0)
    zero_workspace: bool = False
    doc: str = ""


class SelectionRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capability_major: Optional[int] = None
    candidates: list[str] = Field(min_length=1)
    note: str = ""
    # The engine itself picks the kernel (vLLM's static decode-kernel choice): the first candidate its
    # engine-layer rules allow is what it runs, so a kernel rule refusing that one is a failure of the
    # config, not a fallback to the next candidate the engine would never take.
    engine_decides: bool = False


Selection = dict[Literal["standard", "mla"], dict[Phase, list[SelectionRow]]]


class EngineSizesSpec(BaseModel):
    """Sizes an engine plans with (backends.yaml ``engine_sizes``): the KV-cache block arithmetic of hybrid
    (attention + recurrent) models and the fixed KV split of batch-invariant mode."""

    model_config = ConfigDict(extra="forbid")

    source: str
    kernel_block_min: int = Field(ge=1)   # the smallest kernel block size the engine's backends take
    mla_hybrid_align: int = Field(ge=1)   # an MLA model's hybrid block is aligned to this many tokens
    decode_fixed_split_tokens: int = Field(ge=1)  # batch invariance: one KV split of this many tokens


class ReleasePin(BaseModel):
    """One engine release's pins (backends.yaml ``engines.<name>.releases``): the FlashInfer its wheel requires."""

    model_config = ConfigDict(extra="forbid")

    flashinfer: Optional[str] = None    # flashinfer-python pinned by the release (None: not pinned / vendored)
    source: str = Field(min_length=1)   # where the pin was read (the wheel's METADATA Requires-Dist)
    notes: list[str] = []               # release notes that change what attnplan answers (cited by upgrade)


class EngineFlags(BaseModel):
    """``engines.<name>.flags``: how the engine's own command line spells a fix (policy/suggest.py
    suggestion_flag): every key is required, ``null`` where that command has no such flag, so an engine's
    vocabulary is data and never a branch on its name (issue 36 item 6)."""

    model_config = ConfigDict(extra="forbid")

    page_size: str = Field(min_length=1)          # the flag that sets the KV page (vLLM: --block-size)
    batch_invariant_off: Optional[str]            # what turns batch invariance off (vLLM: an environment variable)
    attention_backend: Optional[str]              # the flag that names a FlashInfer backend of the plan itself
    # the --attention-backend value that makes the engine run FlashInfer, per model kind (policy/verdict.py
    # forced_with); null for a layer that runs nothing else
    force_flashinfer: Optional[dict[Literal["standard", "mla"], str]]
    # the flags that run FlashInfer's MLA prefill where the engine's own MLA prefill choice is not FlashInfer's
    # (vLLM 0.33: --attention-config's mla_prefill_backend, platforms/interface.py get_mla_prefill_backend_cls;
    # policy/engine.py names it in the mla-prefill note); null for a layer whose MLA prefill is FlashInfer's plan
    mla_prefill_flashinfer: Optional[str]


class EngineLayer(BaseModel):
    """One engine layer (docs/contract.md, Engines and versions): the versions modelled and its selection order."""

    model_config = ConfigDict(extra="forbid")

    doc: str = ""
    # How people write the engine's name (the data and the JSON keep the lower-case id): policy/engine.py notes.
    display: str = Field(min_length=1)
    # attnplan's own FlashInfer layer (the execution adapter): no release of its own, its version is the node's
    # FlashInfer (policy/engines.py), and it refuses a rejected plan at engine init (policy/verdict.py).
    adapter: bool = False
    flags: EngineFlags
    # The config's KV dtype -> the spelling the engine's --kv-cache-dtype takes (a fix is a flag the same command
    # accepts); a dtype missing from the table has no spelling there. ``null``: attnplan's own vocabulary.
    kv_dtype_spelling: Optional[dict[str, str]]
    # The rule ids the verdict names for this engine (policy/verdict.py: its validation of its own backends, its
    # refusal of a parallel layout): like the resolver's, a pack set without one fails to load (check_whole).
    verdict_rules: list[str] = []
    # Who judges the engine's own (non-FlashInfer) backends: "verdict" - policy/verdict.py from ``engine_backend``
    # (vLLM's validate_configuration of its pick or of a backend named in its vocabulary); "resolver" - the
    # engine's resolver (SGLang); null - the engine runs FlashInfer's kernels only (the adapter).
    own_backends_judged_by: Optional[Literal["verdict", "resolver"]] = None
    covers: Optional[str] = None        # packaging specifier of the versions the data models
    versions: list[str] = []            # the modelled releases, newest last
    # Per modelled release: what it pins (issue 42): the flashinfer-python its wheel requires, and where
    # that was read. Keys are exactly ``versions`` (checked at load).
    releases: dict[str, ReleasePin] = {}
    selection: Selection
    # An engine that picks among its own backends before FlashInfer runs (SGLang): the function that
    # resolves its flags into per-phase candidates (attnplan.* only), and the tables it reads.
    resolver: Optional[str] = None
    native: Optional[dict[str, Any]] = None
    # Issue 21 (attnplan/policy/engine_rows.py reads these): backend names that select with the engine's
    # own order, how a requested page maps to the kernel page, the query dtype per phase, and the
    # engine's own backend choice (rows of conditions: checked against QueryDtypeRow / EngineBackendSpec and
    # compiled at load, _check_engine_rows; kept as data for engine_rows.py).
    auto_names: list[str] = []
    kernel_page: Literal["exact", "largest_divisor"] = "exact"
    query_dtype: list[dict[str, Any]] = []
    engine_backend: Optional[dict[str, Any]] = None
    # whether the engine's FlashInfer decode wrapper runs on tensor cores (use_tensor_cores), first row that
    # holds (TensorCoreRow); no rows: attnplan's own choice (families.<f>.tensor_core_decode_group)
    decode_tensor_cores: list[dict[str, Any]] = []


class QueryDtypeRow(BaseModel):
    """One row of ``engines.<name>.query_dtype`` (read by policy/engine_rows.py query_dtype): a typo in a
    key would otherwise load and fail every plan of the engine at run time (issue 40 #3)."""

    model_config = ConfigDict(extra="forbid")

    phases: Optional[list[Phase]] = None
    backends: Optional[list[str]] = None
    when: Optional[dict[str, Any]] = None
    dtype: str = Field(min_length=1)   # model, kv or a dtype name


class TensorCoreRow(BaseModel):
    """One row of ``engines.<name>.decode_tensor_cores`` (policy/engine_rows.py decode_tensor_cores)."""

    model_config = ConfigDict(extra="forbid")

    when: Optional[dict[str, Any]] = None
    value: bool


class EngineRefusalRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1)
    when: dict[str, Any]


class EngineChoiceRow(BaseModel):
    """One backend of ``engines.<name>.engine_backend.<kind>`` (policy/engine_rows.py engine_choice)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    runs_flashinfer: bool = False
    flashinfer: Optional[str] = None    # mla_prefill rows: the FlashInfer backend that engine backend runs
    when: Optional[dict[str, Any]] = None
    refused_when: list[EngineRefusalRow] = []


class EngineBackendSpec(BaseModel):
    """``engines.<name>.engine_backend``: the engine's own backend choice, as rows of conditions."""

    model_config = ConfigDict(extra="forbid")

    source: str = ""
    flashinfer_name: dict[Literal["standard", "mla"], str] = {}
    standard: list[EngineChoiceRow] = []
    mla: list[EngineChoiceRow] = []
    # the engine's own MLA prefill backend, chosen apart from the attention backend (vLLM 0.33:
    # platforms/interface.py get_mla_prefill_backend_cls): policy/engine.py names it in engine_phases
    mla_prefill: list[EngineChoiceRow] = []


class CubinIndexSpec(BaseModel):
    """Where trtllm-gen cubins can come from (issue 12 item 3): kept as data, not guessed."""

    model_config = ConfigDict(extra="forbid")

    pypi_max: str                        # the package index serves flashinfer-cubin up to this version
    wheel_index: str                     # FlashInfer's own wheel index
    doc: str = ""
    artifactory_check: Optional[ArtifactoryCheckSpec] = None


class BackendCatalogSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backends: dict[str, BackendSpec]
    families: dict[str, FamilySpec]
    calls: dict[str, CallInfoSpec]
    mla_modules: dict[Phase, str]
    engine_sizes: dict[str, EngineSizesSpec] = {}
    default_engine: str = Field(min_length=1)
    engines: dict[str, EngineLayer]
    force: dict[Literal["standard", "mla"], dict[str, dict[Phase, str]]]
    cubins: Optional[CubinIndexSpec] = None


class MeasuredRecord(BaseModel):
    """One measurement behind a measured threshold (rules/decode_choice.yaml): the GPU, the FlashInfer, the
    bench command that measured it, its log, and the numbers it gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str = Field(min_length=1)
    capability: str = Field(min_length=1)
    flashinfer: str = Field(min_length=1)
    date: str = Field(min_length=1)
    command: str = Field(min_length=1)
    log: str = Field(min_length=1)
    measured: str = Field(min_length=1)


class DecodeChoiceSpec(BaseModel):
    """One per-shape decode choice (rules/decode_choice.yaml, issue 41 item 3): on these GPUs, under this
    engine layer and FlashInfer, for the configs ``when`` holds for, the decode kernel ``small`` runs a decode
    batch that reads at most ``small_up_to_kv_tokens`` KV tokens and ``large`` any other - where the rules
    accept both for the config. Measured, so ``verified`` names the command, the log and the numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    engine: str = Field(min_length=1)
    devices: list[str] = Field(min_length=1)       # devices.yaml names
    capability: str
    flashinfer: str                                # a version specifier
    small: str
    large: str
    small_up_to_kv_tokens: int = Field(gt=0)
    when: Optional[dict[str, Any]] = None
    source: str = Field(min_length=1)
    verified: list[MeasuredRecord] = Field(min_length=1)


@dataclass(frozen=True)
class DecodeChoiceEntry:
    """A loaded ``DecodeChoiceSpec``: its data, the capability as the rules compare it, ``when`` and the
    FlashInfer range compiled (parsed once at load; candidates.py decode_choice_for only tests them)."""

    spec: DecodeChoiceSpec
    capability: int
    when: Optional[Pred]
    file: str
    flashinfer: Any = None           # packaging SpecifierSet of spec.flashinfer

    def provenance(self) -> str:
        """One line: where and with what the threshold was measured."""
        return "; ".join(f"{r.device} ({r.capability}, flashinfer {r.flashinfer}, {r.date}): {r.command}, {r.log}"
                         for r in self.spec.verified)


DECODE_CHOICE_FILE = "decode_choice.yaml"   # beside backends.yaml; absent: nothing measured, no switch


def _load_decode_choices(backends_path: Path, catalog: "BackendCatalogSpec") -> tuple[tuple[DecodeChoiceEntry, ...], str]:
    """The measured per-shape decode choices beside ``backends_path`` (and the file's text, for the
    revision), all or nothing: every name they use must mean something in the catalog and the device
    catalog, every threshold be measured (``verified``) on a GPU the entry names."""
    from .capability import parse_capability
    from .devices import catalog as device_catalog
    from attnplan.errors import InvalidInputError

    path = backends_path.parent / DECODE_CHOICE_FILE
    if not path.exists():
        return (), ""
    data, text = _load_yaml(path)
    file = str(path)
    if not isinstance(data, dict) or set(data) != {"decode_choice"} or not isinstance(data["decode_choice"], list):
        raise RulePackError(file, "the file holds one key, decode_choice: a list of entries")
    out: list[DecodeChoiceEntry] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["decode_choice"]):
        rid = raw.get("id") if isinstance(raw, dict) else None
        try:
            spec = DecodeChoiceSpec.model_validate(raw)
        except ValidationError as exc:
            raise RulePackError(file, f"decode_choice[{i}]: {_pydantic_msg(exc)}", rule=rid if isinstance(rid, str) else None) from None
        where = f"decode_choice[{i}]"
        if not RULE_ID.match(spec.id) or spec.id in seen:
            raise RulePackError(file, f"{where}: ids are unique lower-case words joined by '.' or '-'", rule=spec.id)
        seen.add(spec.id)
        eng = catalog.engines.get(spec.engine)
        if eng is None:
            raise RulePackError(file, f"{where}: engine {spec.engine!r} has no engines entry", rule=spec.id)
        if not eng.adapter:
            # an engine that picks its own kernel cannot switch at run time on attnplan's data
            raise RulePackError(file, f"{where}: engine {spec.engine!r} is not attnplan's adapter (engines.<name>.adapter)",
                                rule=spec.id)
        for role in ("small", "large"):
            b = getattr(spec, role)
            if b not in catalog.backends or "decode" not in catalog.backends[b].phases:
                raise RulePackError(file, f"{where}: {role} {b!r} is no decode backend of {backends_path.name}", rule=spec.id)
        if spec.small == spec.large:
            raise RulePackError(file, f"{where}: small and large name the same backend", rule=spec.id)
        try:
            cap = parse_capability(spec.capability)
            for d in spec.devices:
                dev = device_catalog().find(d)
                if dev is None or dev.name != d or dev.capability_int != cap:
                    raise RulePackError(file, f"{where}: device {d!r} is not a devices.yaml name of capability "
                                              f"{spec.capability}", rule=spec.id)
            for r in spec.verified:
                if parse_capability(r.capability) != cap or r.device not in spec.devices:
                    raise RulePackError(file, f"{where}: a verified record ({r.device}, {r.capability}) is not a "
                                              "measurement on a device and capability the entry names", rule=spec.id)
        except InvalidInputError as exc:
            raise RulePackError(file, f"{where}: {exc}", rule=spec.id) from None
        fi_range = _specifier(file, spec.flashinfer, "flashinfer range", rule=spec.id)
        try:
            when = compile_condition(spec.when) if spec.when is not None else None
        except ConditionError as exc:
            raise RulePackError(file, f"{where}.when: {exc}", rule=spec.id) from None
        out.append(DecodeChoiceEntry(spec, cap, when, file, fi_range))
    return tuple(out), text


@dataclass(frozen=True)
class Check:
    rule: "Rule"
    index: int
    scope: str
    backends: Optional[frozenset[str]]
    phases: Optional[frozenset[str]]
    when: Optional[Pred]
    require: Pred
    message: Optional[str]

    def applies_to(self, backend: str | None, phase: str | None) -> bool:
        if self.backends is not None and backend not in self.backends:
            return False
        if self.phases is not None and phase not in self.phases:
            return False
        return True


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    reason: str
    source: str
    fix: Optional[str]
    fixed_in: Optional[str]
    pack: str
    file: str
    checks: tuple[Check, ...] = field(default=(), compare=False)
    layer: str = "kernel"
    flashinfer: Optional[str] = None
    vllm: Optional[str] = None
    verified: Any = field(default=None, compare=False)
    engine: Optional[str] = None        # engine rules: the engine they speak for (None: vllm)
    versions: Optional[str] = None      # engine rules of a non-vLLM engine: its version range
    applied_by: str = "checks"          # "resolver": applied by the engine's resolver, not by checks
    outcome: Optional[str] = None

    def provenance(self) -> str:
        """One line: where this rule was verified, or why it is read from source only."""
        v = self.verified
        if v is None:
            return "unrecorded"
        if isinstance(v, SourceOnly):
            return f"source only: {v.source_only}"
        return "; ".join(f"{r.verdict} on {r.device} ({r.capability}, flashinfer {r.flashinfer}, {r.date})" for r in v)

    def applies(self, engine: str, engine_version: Optional[str], flashinfer_version: Any) -> bool:
        """Whether this rule speaks for this engine layer and these versions (docs/contract.md, Engines and versions).

        Engine rules apply under their engine and vLLM range only; a kernel rule's flashinfer range
        limits it to those releases (an unknown flashinfer version keeps it: fail closed)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        if self.layer == "engine":
            if engine != (self.engine or "vllm"):
                return False
            rng = self.versions if self.versions is not None else self.vllm
            if rng is None or engine_version is None:
                return True
            return SpecifierSet(rng).contains(Version(engine_version), prereleases=True)
        if self.flashinfer is None or flashinfer_version is None:
            return True
        try:
            return SpecifierSet(self.flashinfer).contains(Version(str(flashinfer_version)), prereleases=True)
        except InvalidVersion:
            return True


@dataclass(frozen=True, eq=False)  # identity-hashed: one loaded set keys the caches
class RuleSet:
    """Every loaded rule and the backend catalog, plus a revision hash of the sources."""

    rules: tuple[Rule, ...]
    backends: dict[str, BackendSpec]
    selection: dict[str, dict[str, list[SelectionRow]]]   # the default engine's (kept for old readers)
    force: dict[str, dict[str, dict[str, str]]]
    revision: str
    files: tuple[str, ...]
    engines: dict[str, EngineLayer] = field(default_factory=dict)
    default_engine: str = ""            # backends.yaml default_engine (required there: load_ruleset)
    cubins: Optional[CubinIndexSpec] = None
    families: dict[str, FamilySpec] = field(default_factory=dict)
    calls: dict[str, CallInfoSpec] = field(default_factory=dict)
    mla_modules: dict[str, str] = field(default_factory=dict)
    engine_sizes: dict[str, EngineSizesSpec] = field(default_factory=dict)
    # (engine, release) -> that release's layer: the engine's data with every item whose ``versions`` range
    # excludes the release dropped (_release_layers). ``engines[name]`` is the newest release's.
    releases: dict[tuple[str, str], EngineLayer] = field(default_factory=dict)
    # rules/decode_choice.yaml: measured per-shape decode choices (policy/candidates.py decode_choice_for)
    decode_choices: tuple[DecodeChoiceEntry, ...] = ()

    def layer(self, name: str, version: Optional[str] = None) -> EngineLayer:
        """The engine layer of ``name`` at ``version``: the modelled release itself, or for a release the
        ``covers`` range takes but ``versions`` does not list (0.33.1), the newest listed one before it;
        None (or an engine without releases): the newest."""
        spec = self.engines[name]
        if version is None or not spec.versions:
            return spec
        hit = self.releases.get((name, version))
        if hit is not None:
            return hit
        return self.releases.get((name, release_for(spec, version)), spec)

    def family(self, backend: str) -> FamilySpec:
        """What the backend's family means for the plan (backends.yaml ``families:``)."""
        return self.families[self.backends[backend].family]

    def sizes(self, engine: Optional[str] = None) -> EngineSizesSpec:
        """The sizes ``engine`` plans with (backends.yaml ``engine_sizes``), else the default engine's."""
        spec = self.engine_sizes.get(engine or self.default_engine) or self.engine_sizes.get(self.default_engine)
        if spec is None:
            raise RulePackError("backends.yaml", f"engine_sizes.{self.default_engine} is missing")
        return spec

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for r in self.rules for c in r.checks)

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)  # a mapping-style lookup: ``rs.rule(id)`` misses as ``dict[id]`` does


def _load_yaml(path: Path) -> Any:
    """A pack's data and text. Read bounded and parsed with nesting, aliases and duplicate keys
    limited before the document is composed (attnplan/safeio.py): libyaml segfaults on deep flow
    nesting, an alias bomb takes minutes, and a duplicate ``require:`` would silently drop one."""
    from attnplan.safeio import parse_yaml, read_bounded

    from attnplan.errors import InvalidInputError

    try:
        text = read_bounded(path, what="rules", max_bytes=MAX_PACK_BYTES)
        return parse_yaml(text, what="rules", name=path.name), text
    except InvalidInputError as exc:
        msg = str(exc).removeprefix("rules: ").removeprefix(f"{path.name}: ").removeprefix(str(path)).lstrip(": ")
        raise RulePackError(str(path), msg) from None


def _pydantic_msg(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def _rule_at(data: Any, exc: ValidationError) -> str | None:
    for e in exc.errors():
        loc = e["loc"]
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            try:
                return str(data["rules"][loc[1]].get("id"))
            except Exception:  # noqa: BLE001 - best-effort naming only
                return None
    return None


def pack_paths_in(packs_dir: Path) -> list[Path]:
    """The packs (``*.yaml``) of a directory, or ``RulePackError`` naming it: missing, unreadable
    (a path too long for the OS included), empty, or over the count and total-size limits."""
    import os
    import stat

    from attnplan.rules import pack_files

    shown = str(packs_dir) if len(str(packs_dir)) <= 200 else str(packs_dir)[:200] + "..."
    try:
        if not stat.S_ISDIR(os.stat(packs_dir).st_mode):
            raise RulePackError(shown, "not a directory: give the directory holding the rule packs")
        found = pack_files(packs_dir)
    except FileNotFoundError:
        raise RulePackError(shown, "no such rule pack directory") from None
    except OSError as exc:
        raise RulePackError(shown, f"cannot read the rule pack directory: {(exc.strerror or str(exc)).lower()}") from None
    if not found:
        raise RulePackError(shown, "no rule packs (*.yaml) in this directory: refusing to plan with no rules")
    _check_totals(found, shown)
    return found


def _check_totals(paths: list[Path], where: str) -> None:
    import os

    if len(paths) > MAX_PACKS:
        raise RulePackError(where, f"{len(paths)} rule packs, over the limit of {MAX_PACKS}")
    total = 0
    for p in paths:
        try:
            total += os.stat(p).st_size
        except OSError:
            continue  # read_bounded names the file when it is read
        if total > MAX_DIR_BYTES:
            raise RulePackError(where, f"the rule packs hold over {MAX_DIR_BYTES} bytes in all (the limit; "
                                       f"each pack at most {MAX_PACK_BYTES})")


def release_for(spec: EngineLayer, version: str) -> str:
    """The modelled release whose data answers for ``version``: itself when listed, else the newest listed
    release not after it (a patch release inside ``covers`` behaves as its minor's last modelled one)."""
    from packaging.version import InvalidVersion, Version

    if version in spec.versions:
        return version
    try:
        v = Version(version)
    except InvalidVersion:
        return spec.versions[-1] if spec.versions else version
    older = [r for r in spec.versions if Version(r) <= v]
    return max(older, key=Version) if older else (spec.versions[0] if spec.versions else version)


def _for_release(obj: Any, release: Any, file: str, where: str) -> Any:
    """``obj`` as ``release`` sees it: list items (mappings) carrying ``versions: SPECIFIER`` are kept only when
    the release is in it, and lose the key. New objects throughout (YAML anchors share lists)."""
    from packaging.specifiers import SpecifierSet

    if isinstance(obj, list):
        out = []
        for i, item in enumerate(obj):
            if isinstance(item, dict) and isinstance(item.get("versions"), str):
                _specifier(file, item["versions"], f"{where}[{i}].versions")
                spec = SpecifierSet(item["versions"])
                if not spec.contains(release, prereleases=True):
                    continue
                item = {k: v for k, v in item.items() if k != "versions"}
            out.append(_for_release(item, release, file, f"{where}[{i}]"))
        return out
    if isinstance(obj, dict):
        return {k: _for_release(v, release, file, f"{where}.{k}") for k, v in obj.items()}
    return obj


def _release_layers(catalog_data: Any, file: str) -> tuple[Any, dict[tuple[str, str], Any]]:
    """Split each versioned engine's data per modelled release (issue 42): a row, refusal or candidate list
    that holds for some releases only says so with ``versions:``; each release's layer is validated like the
    newest's. Returns the catalog with every engine at its newest release, and the raw layer per release."""
    from packaging.version import InvalidVersion, Version

    if not isinstance(catalog_data, dict) or not isinstance(catalog_data.get("engines"), dict):
        return catalog_data, {}
    engines = dict(catalog_data["engines"])
    per_release: dict[tuple[str, str], Any] = {}
    for name, raw in engines.items():
        versions = raw.get("versions") if isinstance(raw, dict) else None
        if not isinstance(versions, list) or not versions:
            continue
        for v in versions:
            try:
                rel = Version(str(v))
            except InvalidVersion:
                raise RulePackError(file, f"engines.{name}.versions: {v!r} is not a version") from None
            layer = {k: (_for_release(x, rel, file, f"engines.{name}.{k}") if k not in ("versions", "releases") else x)
                     for k, x in raw.items()}
            per_release[(name, str(v))] = layer
        newest = max((str(v) for v in versions), key=Version)
        engines[name] = per_release[(name, newest)]
    return {**catalog_data, "engines": engines}, per_release


def _check_engine_layer(file: str, ename: str, eng: EngineLayer, known: set[str]) -> None:
    if eng.resolver is not None and not eng.resolver.startswith("attnplan."):
        raise RulePackError(file, f"engines.{ename}.resolver {eng.resolver!r}: only attnplan's own modules")
    for raw in ([eng.covers] if eng.covers else []):
        _specifier(file, raw, f"engines.{ename}.covers")
    if eng.releases and set(eng.releases) != set(eng.versions):
        raise RulePackError(file, f"engines.{ename}.releases names {sorted(eng.releases)}, versions {eng.versions}: "
                                  "one entry per modelled release")
    for kind, phases in eng.selection.items():
        for phase, rows in phases.items():
            for row in rows:
                for b in row.candidates:
                    if b not in known:
                        raise RulePackError(file, f"engines.{ename}.selection.{kind}.{phase} names unknown backend {b!r}")
    _check_engine_rows(file, ename, eng, known)
    if eng.adapter and (eng.versions or eng.covers):   # its release is the node's FlashInfer (policy/engines.py)
        raise RulePackError(file, f"engines.{ename}.adapter: an adapter layer has no versions/covers of its own")
    judge = eng.own_backends_judged_by
    if judge == "verdict" and eng.engine_backend is None:
        raise RulePackError(file, f"engines.{ename}.own_backends_judged_by: verdict needs engines.{ename}.engine_backend")
    if judge == "resolver" and eng.resolver is None:
        raise RulePackError(file, f"engines.{ename}.own_backends_judged_by: resolver needs engines.{ename}.resolver")


def load_ruleset(pack_paths: list[Path], backends_path: Path) -> RuleSet:
    """Load and compile; all or nothing. No packs, or a pack without rules, is an error: an empty
    rule set would accept everything (fail open). The packs' count and total size are bounded
    before any is parsed."""
    if not pack_paths:
        raise RulePackError("rule packs", "no rule packs (*.yaml) given: refusing to plan with no rules")
    _check_totals(list(pack_paths), "rule packs")
    catalog_data, catalog_text = _load_yaml(backends_path)
    catalog_data, raw_releases = _release_layers(catalog_data, str(backends_path))
    try:
        catalog = BackendCatalogSpec.model_validate(catalog_data)
    except ValidationError as exc:
        raise RulePackError(str(backends_path), _pydantic_msg(exc)) from None
    known = set(catalog.backends)
    if catalog.default_engine not in catalog.engines:
        raise RulePackError(str(backends_path), f"default_engine {catalog.default_engine!r} has no engines entry")
    releases: dict[tuple[str, str], EngineLayer] = {}
    for (ename, version), raw in raw_releases.items():
        if raw is catalog_data["engines"][ename]:   # the newest release: the catalog's own layer, one object
            releases[(ename, version)] = catalog.engines[ename]
            continue
        try:
            releases[(ename, version)] = EngineLayer.model_validate(raw)
        except ValidationError as exc:
            raise RulePackError(str(backends_path), f"engines.{ename} at {version}: {_pydantic_msg(exc)}") from None
    for ename, eng in catalog.engines.items():
        _check_engine_layer(str(backends_path), ename, eng, known)
    for (ename, version), eng in releases.items():
        if eng is catalog.engines[ename]:
            continue
        _check_engine_layer(str(backends_path), f"{ename} (release {version})", eng, known)
    for name, spec in catalog.backends.items():
        for phase in spec.phases:
            if phase not in spec.calls:
                raise RulePackError(str(backends_path), f"backend {name!r} lists phase {phase} but has no call for it")
        if spec.family not in catalog.families:
            raise RulePackError(str(backends_path), f"backend {name!r}: family {spec.family!r} has no families entry")
        for table in (spec.calls, spec.mla_calls, spec.sink_calls):
            for c in table.values():
                if c.call not in catalog.calls:
                    raise RulePackError(str(backends_path), f"backend {name!r}: call {c.call!r} has no calls entry")
    for fname, fam in catalog.families.items():
        for b in fam.tensor_core_decode_backends:
            if b not in known:
                raise RulePackError(str(backends_path), f"families.{fname}.tensor_core_decode_backends names unknown backend {b!r}")
    for ename in catalog.engine_sizes:
        if ename not in catalog.engines:
            raise RulePackError(str(backends_path), f"engine_sizes.{ename}: no such engine")
    if catalog.default_engine not in catalog.engine_sizes:
        raise RulePackError(str(backends_path), f"engine_sizes has no entry for the default engine {catalog.default_engine!r}")
    check = catalog.cubins.artifactory_check if catalog.cubins else None
    if check is not None:
        try:
            compile_condition(check.when)
        except ConditionError as exc:
            raise RulePackError(str(backends_path), f"cubins.artifactory_check.when: {exc}") from None
    for kind, table in catalog.force.items():
        for name, per_phase in table.items():
            for b in per_phase.values():
                if b not in known:
                    raise RulePackError(str(backends_path), f"force.{kind}.{name} names unknown backend {b!r}")

    decode_choices, choice_text = _load_decode_choices(backends_path, catalog)
    digest = hashlib.sha256(catalog_text.encode())
    if choice_text:
        digest.update(DECODE_CHOICE_FILE.encode() + b"\0" + choice_text.encode())
    read = 0
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in sorted(pack_paths):
        data, text = _load_yaml(path)
        read += len(text)
        if read > MAX_DIR_BYTES:  # grown since they were measured
            raise RulePackError(str(path), f"the rule packs hold over {MAX_DIR_BYTES} bytes in all (the limit)")
        digest.update(path.name.encode() + b"\0" + text.encode())
        try:
            pack = PackSpec.model_validate(data)
        except ValidationError as exc:
            raise RulePackError(str(path), _pydantic_msg(exc), rule=_rule_at(data, exc)) from None
        if not pack.rules:
            raise RulePackError(str(path), "the pack holds no rules")
        for spec in pack.rules:
            if not RULE_ID.match(spec.id):
                raise RulePackError(str(path), "rule ids are lower-case words joined by '.' or '-'", rule=spec.id)
            if spec.id in seen:
                raise RulePackError(str(path), f"duplicate rule id (also in {seen[spec.id]})", rule=spec.id)
            seen[spec.id] = str(path)
            if spec.fixed_in is not None:
                from packaging.version import InvalidVersion, Version

                try:
                    Version(spec.fixed_in)
                except InvalidVersion:
                    raise RulePackError(str(path), f"fixed_in {spec.fixed_in!r} is not a version", rule=spec.id) from None
            engine = spec.engine or (pack.engine if spec.layer == "engine" else None)
            versions = spec.versions or (pack.versions if spec.layer == "engine" and spec.vllm is None else None)
            if engine is not None and engine not in catalog.engines:
                raise RulePackError(str(path), f"engine {engine!r} has no engines entry in {backends_path.name}", rule=spec.id)
            if spec.applied_by == "resolver" and (engine is None or catalog.engines[engine].resolver is None):
                raise RulePackError(str(path), "applied_by: resolver needs an engine with a resolver", rule=spec.id)
            for key, raw in (("flashinfer", spec.flashinfer), ("vllm", spec.vllm), ("versions", versions)):
                if raw is not None:
                    _specifier(str(path), raw, key, rule=spec.id)
            rule = Rule(spec.id, spec.title, spec.reason, spec.source, spec.fix, spec.fixed_in, pack.pack, str(path),
                        layer=spec.layer, flashinfer=spec.flashinfer, vllm=spec.vllm, verified=spec.verified,
                        engine=engine, versions=versions, applied_by=spec.applied_by, outcome=spec.outcome)
            checks = []
            for i, c in enumerate(spec.checks):
                for b in c.backends or ():
                    if b not in known:
                        raise RulePackError(str(path), f"check {i} names unknown backend {b!r}", rule=spec.id)
                if c.scope == "pair" and (c.backends or c.phases):
                    raise RulePackError(str(path), f"check {i}: a pair-scope check has no backends/phases", rule=spec.id)
                try:
                    when = compile_condition(c.when) if c.when is not None else None
                    require = compile_condition(c.require)
                except ConditionError as exc:
                    raise RulePackError(str(path), f"check {i}: {exc}", rule=spec.id) from None
                checks.append(Check(rule, i, c.scope,
                                    frozenset(c.backends) if c.backends else None,
                                    frozenset(c.phases) if c.phases else None,
                                    when, require, c.message))
            object.__setattr__(rule, "checks", tuple(checks))
            rules.append(rule)
    default_sel = catalog.engines[catalog.default_engine].selection
    return RuleSet(
        rules=tuple(rules),
        backends=dict(catalog.backends),
        selection={k: {p: list(v) for p, v in ph.items()} for k, ph in default_sel.items()},
        force={k: {n: dict(m) for n, m in t.items()} for k, t in catalog.force.items()},
        revision=digest.hexdigest()[:12],
        files=tuple(str(p) for p in sorted(pack_paths)),
        engines=dict(catalog.engines),
        default_engine=catalog.default_engine,
        cubins=catalog.cubins,
        families=dict(catalog.families),
        calls=dict(catalog.calls),
        mla_modules=dict(catalog.mla_modules),
        engine_sizes=dict(catalog.engine_sizes),
        releases=releases,
        decode_choices=decode_choices,
    )


def _check_engine_rows(file: str, ename: str, eng: EngineLayer, known: set[str]) -> None:
    """``engines.<name>.query_dtype`` and ``engine_backend`` against their schema, every condition
    compiled and every backend named known: a typo there loaded and then failed every plan of the
    engine at run time (issue 40 #3). The rows stay data (policy/engine_rows.py reads them)."""
    from .dtypes import KV_DTYPES, QUERY_DTYPES

    where = f"engines.{ename}"
    for i, raw in enumerate(eng.query_dtype):
        try:
            row = QueryDtypeRow.model_validate(raw)
        except ValidationError as exc:
            raise RulePackError(file, f"{where}.query_dtype[{i}]: {_pydantic_msg(exc)}") from None
        allowed = ("model", "kv", *QUERY_DTYPES, *KV_DTYPES)
        if row.dtype not in allowed:
            raise RulePackError(file, f"{where}.query_dtype[{i}].dtype {row.dtype!r} is not one of {', '.join(allowed)}")
        for b in row.backends or ():
            if b not in known:
                raise RulePackError(file, f"{where}.query_dtype[{i}] names unknown backend {b!r}")
        _compiles(file, f"{where}.query_dtype[{i}].when", row.when)
    for i, raw in enumerate(eng.decode_tensor_cores):
        try:
            tc = TensorCoreRow.model_validate(raw)
        except ValidationError as exc:
            raise RulePackError(file, f"{where}.decode_tensor_cores[{i}]: {_pydantic_msg(exc)}") from None
        _compiles(file, f"{where}.decode_tensor_cores[{i}].when", tc.when)
    if eng.engine_backend is not None:
        try:
            eb = EngineBackendSpec.model_validate(eng.engine_backend)
        except ValidationError as exc:
            raise RulePackError(file, f"{where}.engine_backend: {_pydantic_msg(exc)}") from None
        for kind, rows in (("standard", eb.standard), ("mla", eb.mla), ("mla_prefill", eb.mla_prefill)):
            for i, row in enumerate(rows):
                _compiles(file, f"{where}.engine_backend.{kind}[{i}] ({row.name}).when", row.when)
                for j, ref in enumerate(row.refused_when):
                    _compiles(file, f"{where}.engine_backend.{kind}[{i}] ({row.name}).refused_when[{j}].when", ref.when)


def _compiles(file: str, where: str, cond: Any) -> None:
    if cond is None:
        return
    try:
        compile_condition(cond)
    except ConditionError as exc:
        raise RulePackError(file, f"{where}: {exc}") from None


# -- the rule set as a whole (issue 40 #3) ------------------------------------------------------
# The rule ids an engine's resolver code names itself (its input-vocabulary checks), per resolver
# (backends.yaml ``engines.<name>.resolver``). Every other SGLang decision is a row of
# ``engines.sglang.native`` naming its rule (``rule:``), which check_whole checks at load: a pack set
# without one fails to load naming the id, never a KeyError at plan time. tests/test_rules_load_whole.py
# reads the ids out of attnplan/sglang/*.py and checks that this list holds every one of them (it lives
# here because policy must not import sglang).
RESOLVER_RULES: dict[str, frozenset[str]] = {
    "attnplan.sglang.resolve:engine_resolution": frozenset({"sglang.backend-names", "sglang.kv-names"}),
}
# The rule ids the verdict names for an engine are data: backends.yaml engines.<name>.verdict_rules.
# The function that validates an engine's native tables (``engines.<name>.native``) against a rule set,
# per resolver: called at load (by name, like the resolver itself: policy/engines.py).
RESOLVER_TABLES: dict[str, str] = {
    "attnplan.sglang.resolve:engine_resolution": "attnplan.sglang.data:native",
}


def _named_rules(data: Any, path: str = "") -> list[tuple[str, str]]:
    """Every ``rule: ID`` held anywhere in a catalog table, with where."""
    out: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            here = f"{path}.{k}" if path else str(k)
            if k == "rule" and isinstance(v, str):
                out.append((path, v))
            else:
                out += _named_rules(v, here)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _named_rules(v, f"{path}[{i}]")
    return out


def check_whole(rs: RuleSet, backends_file: str, packs_where: str) -> None:
    """The rule set as a whole, or ``RulePackError`` naming the file and the entry: every rule id the
    code (``RESOLVER_RULES``) or an engine's native tables name is held by a pack (a call's
    ``jit_name.rule`` is the catalog's own entry, listed by ``attnplan rules``, not a pack's), and every engine's native tables validate. ``load_ruleset`` checks one
    pack set's own consistency; the directory loaders (policy/shipped.py) call this as well, so a
    rule set that loads is one every command can plan with."""
    import importlib

    ids = {r.id for r in rs.rules}
    for ename, eng in rs.engines.items():
        for rid in sorted(set(eng.verdict_rules) - ids):
            raise RulePackError(packs_where, f"missing: the verdict of every {ename} answer may name this rule",
                                rule=rid)
    for ename, eng in rs.engines.items():
        if eng.resolver is None:
            continue
        needed = RESOLVER_RULES.get(eng.resolver)
        if needed is None:
            raise RulePackError(backends_file, f"engines.{ename}.resolver {eng.resolver!r}: a resolver attnplan "
                                               f"does not know (policy/rulepack.py RESOLVER_RULES)")
        for rid in sorted(needed - ids):
            raise RulePackError(packs_where, f"missing: engines.{ename}.resolver ({eng.resolver}) looks this rule "
                                             f"up, so every {ename} plan needs it", rule=rid)
    for ename, eng in rs.engines.items():
        for where, rid in _named_rules(eng.native or {}):
            if rid not in ids:
                raise RulePackError(backends_file, f"engines.{ename}.native.{where}.rule names rule {rid!r}, "
                                                   "which no pack holds")
        target = RESOLVER_TABLES.get(eng.resolver or "")
        if target is not None:
            module, _, fn = target.partition(":")
            try:
                getattr(importlib.import_module(module), fn)(rs, ename)
            except RulePackError as exc:
                msg = str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)
                raise RulePackError(backends_file, msg) from None


def _specifier(file: str, raw: str, what: str, rule: str | None = None) -> Any:
    """``raw`` parsed (a packaging SpecifierSet), or a RulePackError naming it."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(raw)
    except InvalidSpecifier:
        raise RulePackError(file, f"{what} {raw!r} is not a version specifier", rule=rule) from None
