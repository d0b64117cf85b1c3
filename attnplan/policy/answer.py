"""The answer contract (docs/contract.md, The plan): status, node, config, plan, violations, suggestions, notes, trace."""

# No ``from __future__ import annotations``: pydantic would evaluate every field's annotation string (~200 here)
# as it builds each model class, ~2 ms of this module's ~17 ms import (issue 36 item 6; the rest is the models).
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from .config import AttentionConfig
from .facts import NodeFacts

# The plan JSON's version: REST, the CLI's --json and preflight's reader agree on it (a node whose
# answer carries another is an error row in preflight, never a pass).
ANSWER_SCHEMA_VERSION = "1"

PhaseOrBoth = Literal["prefill", "decode", "both"]
Layer = Literal["kernel", "engine"]
# How the adapter calls a phase's kernel (one calling convention each; the adapter dispatches on
# this, never on a backend's name). The FlashInfer entry point is named beside it in the plan.
Call = Literal[
    "paged_prefill",      # flashinfer.BatchPrefillWithPagedKVCacheWrapper(backend=...)
    "paged_decode",       # flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores, backend=...)
    "sink",               # flashinfer.BatchAttentionWithAttentionSinkWrapper (prefill and decode)
    "xqa_decode",         # flashinfer.decode.trtllm_batch_decode_with_kv_cache(backend="xqa")
    "trtllm_context",     # flashinfer.prefill.trtllm_batch_context_with_kv_cache
    "trtllm_decode",      # flashinfer.decode.trtllm_batch_decode_with_kv_cache(backend="trtllm-gen")
    "mla_paged_decode",   # flashinfer.mla.BatchMLAPagedAttentionWrapper(backend=...)
    "trtllm_mla_decode",  # flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla
    "ragged_prefill",     # flashinfer.BatchPrefillWithRaggedKVCacheWrapper(backend=...)
    "trtllm_ragged",      # flashinfer.prefill.trtllm_ragged_attention_deepseek
]


NoteKind = Literal[
    "text",                 # a line written by code outside the planner's data (the engine layer's resolver,
                            # attnplan/sglang/resolve.py): ``text`` is all there is
    "no-candidate",         # a phase with no backend candidate on this device (``phase``)
    "block-size",           # the kernels read the largest kernel page dividing the engine's block (``block``, ``page``)
    "fallback",             # a preferred backend skipped (``phase``, ``backend``, ``used``, ``why``: (rule, message) pairs)
    "page-size-chosen",     # the smallest page both phases take (``page``, ``prefill``, ``decode``)
    "engine-selects",       # the engine's own pick without --attention-backend (``engine``, ``backend``, ``runs_flashinfer``,
                            # ``ok``: the plan was made, ``flashinfer_backend``: its name for FlashInfer's backend)
    "mla-prefill",          # the engine's MLA prefill pick (``engine``, ``backend``, ``runs_flashinfer``, ``flashinfer_backend``,
                            # ``args``: the flags that run FlashInfer's prefill where the engine's own is not)
    "hybrid-kv-cache",      # the attention block raised to hold the recurrent state (``block``, ``page_bytes``, ``state_bytes``, ``page``)
    "not-served",           # a layer group FlashInfer attention does not serve (``layers``, ``group_kind``, ``mixer``)
    "group-not-served",     # a layer group's own note: a recurrent mixer, its state paged beside the KV cache
    "no-attention",         # a model with no attention layer
    "page-size-clash",      # violation: no page size both phases take (``prefill``, ``decode``, ``prefill_pages``, ``decode_pages``)
    "model-page-size",      # violation: no page size every layer group takes (``sizes``: (first layer, sizes) pairs)
    "chunked-block",        # violation: the KV block does not divide the chunk size (``chunk``, ``block``)
    "jit-name-clash",       # violation: one FlashInfer module name compiled two ways (``call``, ``name``, ``named_by``,
                            # ``differ``, ``builds``: (groups, values) pairs, ``source``)
    "layer-types-overridden",  # config.json's layer_types contradicts the engine's model code (``source``), which wins
    "parallel-mixer",       # every layer runs attention and a recurrent mixer in parallel (``name``: model type, ``mixer``)
    "multimodal",           # a multimodal config: its text_config is planned
    "ignored-fields",       # config fields that do not change attention (``named_by``: the fields)
    "nope-temperature",     # llama4's NoPE layers scale q by position before the kernel (``source``)
    "suggestion",           # a verified single-field change (``field``, ``value``, ``prefill``, ``decode``; cubins:
                            # ``on_pypi``, ``wheel_index``, ``pypi_max``)
    "config-class-refused",  # transformers' config class of ``name`` refused the file (``value``: its error's first
                             # line); attnplan's own parser read it
    "unread-fields",        # config fields attnplan's own parser did not read (``source``: the file, ``named_by``)
    "release-pin",          # the engine release pins another flashinfer-python than the node has (``engine``,
                            # ``pin``, ``installed``, ``source``: where the pin was read)
    "run-backend",          # fix: run the engine's own backend (``engine``: its display name, ``backend``)
    "trtllm-off",           # fix: keep the engine's FlashInfer off trtllm-gen / XQA (``engine``)
]


class EngineName(BaseModel):
    """An engine as a sentence names it: the rule set's ``engines.<name>.display`` (backends.yaml) and release;
    ``adapter``: attnplan's own FlashInfer adapter, which has no release of its own."""

    model_config = ConfigDict(frozen=True)

    name: str
    display: str
    version: Optional[str] = None
    adapter: bool = False


class Note(BaseModel):
    """What a note, a violation's text or a suggestion's text says, as data: its kind and what it names
    (issue 36 item 6: answers carry data; render/notes.py writes the sentence). Fields unused by a kind stay empty."""

    model_config = ConfigDict(frozen=True)

    kind: NoteKind
    text: Optional[str] = Field(None, description="kind text: the line as written")
    phase: Optional[str] = None
    backend: Optional[str] = None
    used: Optional[str] = None
    why: tuple[tuple[str, str], ...] = Field((), description="fallback: the (rule, message) pairs that skipped it")
    page: Optional[int] = None
    block: Optional[int] = None
    prefill: Optional[str] = None
    decode: Optional[str] = None
    prefill_pages: tuple[int, ...] = ()
    decode_pages: tuple[int, ...] = ()
    engine: Optional[EngineName] = None
    runs_flashinfer: Optional[bool] = None
    ok: Optional[bool] = None
    flashinfer_backend: Optional[str] = None
    page_bytes: Optional[int] = None
    state_bytes: Optional[int] = None
    layers: Optional[str] = Field(None, description="layers, compacted (model/layers.py compact_layers)")
    group_kind: Optional[str] = None
    mixer: Optional[str] = None
    sizes: tuple[tuple[int, tuple[int, ...]], ...] = ()
    chunk: Optional[int] = None
    call: Optional[str] = None
    name: Optional[str] = None
    named_by: tuple[str, ...] = ()
    differ: tuple[str, ...] = ()
    builds: tuple[tuple[tuple[int, ...], tuple[Any, ...]], ...] = Field(
        (), description="jit-name-clash: (groups, the differing values in ``differ``'s order) per build")
    source: Optional[str] = None
    args: Optional[str] = Field(None, description="mla-prefill: the flags that run FlashInfer's prefill instead")
    field: Optional[str] = None
    value: Any = None
    on_pypi: Optional[bool] = None
    wheel_index: Optional[str] = None
    pypi_max: Optional[str] = None
    pin: Optional[str] = Field(None, description="release-pin: the flashinfer-python the engine release pins")
    installed: Optional[str] = Field(None, description="release-pin: the flashinfer-python the node has")
    group_layers: Optional[str] = Field(
        None, description="one layer group's note on a model of several: that group's layers, compacted "
                          "(model/plan.py all_notes_says); render/notes.py names them before the note")

    @model_serializer(mode="wrap")
    def _said(self, handler: Any) -> dict[str, Any]:
        # the JSON names what the note says, not every field another kind uses (read back, they default)
        return {k: v for k, v in handler(self).items() if k == "kind" or v not in (None, (), [])}


def _drop_says(data: Any) -> Any:
    """A dumped model without ``says: null``: a text written without data reads as it always did."""
    if isinstance(data, dict) and "says" in data and data["says"] is None:
        data.pop("says")
    return data


class Violation(BaseModel):
    """One rule that failed, with what failed (pydantic-error style, docs/contract.md, Errors and exit codes)."""

    model_config = ConfigDict(frozen=True)

    rule: str
    phase: PhaseOrBoth
    backend: Optional[str] = None
    fact: Optional[str] = Field(None, description="the fact(s) that failed")
    observed: Any = Field(None, description="the fact's value")
    required: str = Field("", description="what the rule wants")
    message: str
    fix: Optional[str] = None
    layer: Layer = Field("kernel", description="kernel: what FlashInfer can run; engine: what the serving engine adds")
    group: Optional[int] = Field(None, description="layered models: the index in layer_groups this came from")
    outcome: Optional[Literal["startup", "backend-build", "first-request", "silent-wrong"]] = Field(
        None, description="engine refusals: when the engine fails (docs/contract.md, Engines and versions); absent for rule checks")
    # A violation built in code (not from a rule pack's reason) carries its facts here; render/notes.py writes its
    # ``message`` and ``required`` from them (render/verdict.py finish). None: ``message`` is the text (a pack's).
    says: Optional[Note] = Field(None, repr=False, description="what message and required say, as data (render/notes.py)")

    @model_serializer(mode="wrap")
    def _without_empty_says(self, handler: Any) -> dict[str, Any]:
        return _drop_says(handler(self))


class Fallback(BaseModel):
    """A preferred backend skipped for a phase, the rules that skipped it, and what ran instead."""

    model_config = ConfigDict(frozen=True)

    phase: Literal["prefill", "decode"]
    skipped: str
    rules: tuple[str, ...]
    used: str
    group: Optional[int] = Field(None, description="layered models: the index in layer_groups this came from")


class EngineRef(BaseModel):
    """The engine layer an answer was made for (docs/contract.md, Engines and versions)."""

    model_config = ConfigDict(frozen=True)

    # one of the rule set's engines (backends.yaml engines:), checked where the answer is built (policy/engines.py
    # parse_engine / resolve_engine); the default is the adapter layer's, for an answer made with no engine at all
    name: str = "flashinfer"
    version: Optional[str] = None


class EngineBackend(BaseModel):
    """The serving engine's own attention-backend choice for this node and config when none is asked
    for, in the engine's vocabulary (vLLM: FLASH_ATTN, FLASHINFER, FLASHINFER_MLA, TRITON_MLA, ...;
    SGLang: fa3, trtllm_mha, flashinfer, triton, ...). Generic over engines: vLLM's is read from
    backends.yaml engines.vllm.engine_backend, SGLang's from its resolver (attnplan/sglang/resolve.py);
    ``None`` on an answer for an engine layer without one."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="the engine's backend name, or 'none' when it finds no valid backend")
    runs_flashinfer: bool = Field(description="whether that backend runs the FlashInfer kernels this plan describes")
    source: str = Field("", description="the engine code the choice is read from")
    note: str = Field("", description="one line for the user: what the engine picks and what the plan below is "
                                      "(written by render/notes.py from ``says``; the planner leaves it empty)")
    flashinfer_backend_name: Optional[str] = Field(
        None, description="the engine's name for its FlashInfer backend (what --attention-backend takes to run this plan)")
    says: Optional[Note] = Field(None, repr=False, description="what ``note`` says, as data (render/notes.py)")

    @model_serializer(mode="wrap")
    def _without_empty_says(self, handler: Any) -> dict[str, Any]:
        return _drop_says(handler(self))


class Coercion(BaseModel):
    """A value the engine silently replaces (docs/contract.md, Engines and versions): what the user gave and what the engine runs."""

    model_config = ConfigDict(frozen=True)

    field: str
    given: Any
    runs: Any
    rule: str
    message: str


class Suggestion(BaseModel):
    """A single-field change verified, by re-evaluating every rule, to make the config valid here."""

    model_config = ConfigDict(frozen=True)

    field: str
    value: Any
    target: Literal["config", "node"] = "config"
    message: str
    prefill: Optional[str] = Field(None, description="prefill backend with this change")
    decode: Optional[str] = Field(None, description="decode backend with this change")
    group: Optional[int] = Field(None, description="layered models: the index in layer_groups this came from")
    says: Optional[Note] = Field(None, repr=False, description="what ``message`` says, as data (render/notes.py)")

    @model_serializer(mode="wrap")
    def _without_empty_says(self, handler: Any) -> dict[str, Any]:
        return _drop_says(handler(self))


Outcome = Literal["runs", "wrong-output", "fails-at-first-request", "fails-at-graph-capture", "fails-at-startup"]


class Selected(BaseModel):
    """The engine's own backend per phase for the command as typed, in the engine's vocabulary."""

    model_config = ConfigDict(frozen=True)

    prefill: str
    decode: str
    runs_flashinfer: bool = Field(description="every phase runs FlashInfer kernels (the plan beneath is the command's)")
    source: str = Field("", description="the engine code the choice is read from")


class Fix(BaseModel):
    """A change the same command accepts, re-evaluated: the outcome it gives."""

    model_config = ConfigDict(frozen=True)

    args: Optional[str] = Field(None, description="the flags to add or change (None: a change on the node)")
    change: str = Field(description="what changes, for people")
    outcome: Outcome
    selected: str = Field("", description="the engine's backend with this change")
    says: Optional["Note"] = Field(None, repr=False, description="what ``change`` says, as data (render/notes.py)")

    @model_serializer(mode="wrap")
    def _without_empty_says(self, handler: Any) -> dict[str, Any]:
        return _drop_says(handler(self))


SaysKind = Literal[
    "no-valid-backend",     # the engine finds no backend its own validation accepts (``refusals``)
    "backend-refused",      # the engine's own validation refuses the backend it selected (``backend``, ``reasons``)
    "engine-backend-runs",  # the engine runs a backend of its own, not FlashInfer's (``backend``, ``validated``)
    "runs",                 # the command runs (``prefill``/``decode``; ``unmodelled``: phases on the engine's kernels)
    "runs-unjudged",        # it runs; the violations are all on phases that do not run FlashInfer
    "fails",                # the first violation decides (``rule``, ``detail``)
    "model-fails",          # a model-level violation decides (``rule``, ``detail``)
    "layout-refused",       # the engine refuses the parallel layout before selecting anything (``detail``: its error)
]


class BackendRefusal(BaseModel):
    """One backend the engine's own validation refuses, with its reasons in the engine's words."""

    model_config = ConfigDict(frozen=True)

    backend: str
    reasons: tuple[str, ...]


class VerdictSays(BaseModel):
    """What a verdict's message says, as data: the kind of message and what it names. The sentence is
    written by render/verdict.py ``verdict_message`` (issue 36 item 6: answers carry data, ``render/`` writes
    the sentences); ``Verdict.message`` keeps the contract's text."""

    model_config = ConfigDict(frozen=True)

    kind: SaysKind
    engine: str = Field(description="the engine the message speaks for: one of the rule set's engines (backends.yaml)")
    version: Optional[str] = None
    outcome: Outcome
    backend: Optional[str] = Field(None, description="the engine's backend the message is about")
    prefill: Optional[str] = None
    decode: Optional[str] = None
    validated: Optional[bool] = Field(
        None, description="engine-backend-runs: the engine's own validation is modelled (and passes)")
    reasons: tuple[str, ...] = Field((), description="backend-refused: the engine's own validation reasons")
    refusals: tuple[BackendRefusal, ...] = Field((), description="no-valid-backend: each backend's reasons")
    unmodelled: tuple[str, ...] = Field((), description="runs: the phases on the engine's own kernels")
    rule: Optional[str] = Field(None, description="the rule that decides (fails, model-fails)")
    detail: Optional[str] = Field(
        None, description="the deciding violation's message (rule data, formatted) or the engine's own error")
    group: Optional[str] = Field(None, description="a failing layer group's layers, on a model of several")
    display: Optional[str] = Field(None, description="the engine's display name (backends.yaml engines.<name>.display)")
    adapter: bool = Field(False, description="attnplan's own FlashInfer adapter (backends.yaml engines.<name>.adapter)")
    detail_says: Optional[Note] = Field(
        None, description="the deciding violation's data, where its message is written by render/notes.py")


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    engine: str = Field(description="the engine and release the verdict speaks for, e.g. vllm==0.33.0")
    selected: Selected
    outcome: Outcome
    modelled: bool = Field(description="attnplan plans and checks the kernels that run (FlashInfer's)")
    rules: tuple[str, ...] = Field((), description="the rules that decide a non-runs outcome")
    message: str = ""
    # The data ``message`` is written from (render/verdict.py), in the JSON too: an answer read back from JSON
    # (a preflight HTTP node) is the local one, and a client can word it itself. None: ``message`` is all there is.
    says: Optional[VerdictSays] = Field(None, repr=False, description="what the message says, as data (render/verdict.py)")
    fixes: tuple[Fix, ...] = ()
    flashinfer_plan: Literal["command", "if-forced"] = Field(
        "command", description="the FlashInfer plan beneath is what the command runs, or what it would run if forced")
    forced_with: Optional[str] = Field(None, description="the flag that runs the FlashInfer plan ('if-forced')")

    @property
    def runs(self) -> bool:
        return self.outcome == "runs"

    def exit_code(self, *, require_flashinfer: bool = False) -> int:
        """0 runs, 1 any other outcome (``require_flashinfer``: also when the engine runs no FlashInfer kernel)."""
        return 0 if self.runs and (self.modelled or not require_flashinfer) else 1


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One check's verdict and the facts it read. A slotted dataclass, not a model: an answer
    carries ~70 of them and memoised answers would otherwise cost ~60 KiB each."""

    rule: str
    check: int
    phase: PhaseOrBoth
    backend: Optional[str]
    verdict: Literal["pass", "fail", "skip"]
    inputs: dict[str, Any]
    required: str
    layer: str = "kernel"


class JitModule(BaseModel):
    """A kernel to compile (JIT) or load (cubin) at warm-up, with the parameters that select it."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["jit", "cubin"]
    phase: Literal["prefill", "decode"]
    backend: str
    params: dict[str, Any]


class CubinRef(BaseModel):
    """A precompiled kernel a phase loads: its cubin file, function and sha256 (the table's checksums.txt)."""

    model_config = ConfigDict(frozen=True)

    file: str
    function: str
    sha256: str


class PhasePlan(BaseModel):
    """One phase, executable as it stands: what to call, with which FlashInfer backend argument."""

    model_config = ConfigDict(frozen=True)

    backend: str
    family: str = Field(description="the backend's family (rules/backends.yaml): native, trtllm-gen, xqa")
    flashinfer_backend: str = Field(description="the backend argument FlashInfer's own API takes")
    call: Call = Field(description="the adapter's calling convention for this phase")
    entry_point: str = Field(description="the FlashInfer wrapper or function that runs this phase")
    returns_lse: bool = Field(description="whether the kernel can return its log-sum-exp (needed to merge)")
    kernel: str
    query_dtype: str
    kv_storage_dtype: str
    kv_view_dtype: str
    output_dtype: str
    workspace_bytes: int
    zero_workspace: bool = False
    use_tensor_cores: Optional[bool] = None
    q_len_per_req: int = 1
    runs_on_prefill_kernel: bool = False
    modules: tuple[JitModule, ...] = ()
    # trtllm-gen phases: every cubin the serving shapes load, decided by FlashInfer's own selection over its
    # kernel table (attnplan/kernels/trtllm_gen), and which table and code decided (``kernel_table``)
    cubins: tuple[CubinRef, ...] = ()
    kernel_table: Optional[str] = None


class KVCachePlan(BaseModel):
    """The one paged KV cache both phases read (docs/contract.md, The plan)."""

    model_config = ConfigDict(frozen=True)

    layout: Literal["NHD", "HND"]
    page_size: int
    kv_storage_dtype: str
    kv_view_dtype: str
    num_kv_heads: int
    head_dim_k: int
    head_dim_v: int
    mla: bool = False
    nvfp4_scale_dtype: Optional[str] = None
    nvfp4_block_size: Optional[int] = None
    page_valid_sizes: tuple[int, ...] = ()
    block_size: Optional[int] = Field(
        None, description="the engine's KV block (vLLM --block-size) when it differs in kind from the kernel page: "
                          "page_size is then the largest kernel page dividing it")


class BatchMetadata(BaseModel):
    """What a step's metadata builder needs for one batch kind (seed 001)."""

    model_config = ConfigDict(frozen=True)

    all_uses_trtllm: bool
    needs_host_seq_lens: bool
    needs_paged_kv_indices: bool
    prefill_kv_indptr: Optional[Literal["device_cumsum"]] = None


class MetadataPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    prefill_only: BatchMetadata
    decode_only: BatchMetadata
    mixed: BatchMetadata


class AttentionPlan(BaseModel):
    """The scalar attention parameters every phase applies (from the model's own attention code)."""

    model_config = ConfigDict(frozen=True)

    sm_scale: float
    window_left: int = Field(-1, description="FlashInfer's inclusive left window (sliding_window - 1), -1 for none")
    logits_soft_cap: float = Field(0.0, description="0 for none")
    sinks: bool = False
    causal: bool = True
    split_kv: Literal["auto", "disabled", "fixed"] = "auto"
    fixed_split_size: Optional[int] = None


class DecodeChoice(BaseModel):
    """Two valid decode calls of one plan and the measured boundary between them (rules/decode_choice.yaml,
    issue 41 item 3): the adapter runs ``small`` for a decode batch that reads at most
    ``small_up_to_kv_tokens`` KV tokens, ``large`` otherwise; ``alternative`` is the phase plan of the one
    that is not ``plan.decode`` (both passed every rule for the config)."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="the measured entry in rules/decode_choice.yaml")
    small: str = Field(description="the decode backend of a batch that reads at most small_up_to_kv_tokens KV tokens")
    large: str = Field(description="the decode backend of any larger batch")
    small_up_to_kv_tokens: int = Field(gt=0)
    alternative: PhasePlan = Field(description="the phase plan of the decode call that is not plan.decode")
    verified: str = Field(description="where the threshold was measured: GPU, FlashInfer, command, log")


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    attention: AttentionPlan
    prefill: PhasePlan
    decode: PhasePlan
    kv_cache: KVCachePlan
    metadata: MetadataPlan
    # attnplan's own adapter on a GPU with a measured per-shape decode choice (--engine flashinfer): the
    # other valid decode call and the boundary; None elsewhere, and then left out of every dump (pydantic
    # >= 2.11 exclude_if), so vLLM / SGLang plans, uniform or per layer group, read as before
    decode_choice: Optional[DecodeChoice] = Field(None, exclude_if=lambda v: v is None)


class PlanAnswer(BaseModel):
    """What ``plan_for`` returns and the CLI/REST print (docs/contract.md, The plan)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["ok", "rejected"]
    node: NodeFacts
    config: AttentionConfig
    plan: Optional[Plan] = None
    violations: tuple[Violation, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()
    fallbacks: tuple[Fallback, ...] = ()
    engine: EngineRef = EngineRef()
    engine_backend: Optional[EngineBackend] = Field(
        None, description="what the engine selects for this node and config when no backend is asked for")
    notes: tuple[str, ...] = ()
    # The data ``notes`` is written from, in order (render/notes.py); empty: ``notes`` is all there is.
    notes_says: tuple[Note, ...] = Field((), repr=False, description="what the notes say, as data (render/notes.py)")
    trace: tuple[TraceEntry, ...] = ()
    rules_revision: str = ""
    # An engine that picks per phase (SGLang): its backend for each phase, and its silent coercions.
    engine_phases: Optional[dict[str, EngineBackend]] = None
    coercions: tuple[Coercion, ...] = ()
    # What the command as typed does (policy/verdict.py): the engine's own pick and its outcome; the plan
    # above is FlashInfer's, for the command itself or "if forced" (verdict.flashinfer_plan).
    verdict: Optional[Verdict] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def backends(self) -> tuple[Optional[str], Optional[str]]:
        if self.plan is None:
            return None, None
        return self.plan.prefill.backend, self.plan.decode.backend

    def to_json(self, *, trace: bool = True) -> dict[str, Any]:
        """The JSON contract; ``config`` is normalised (defaults filled, aliases resolved)."""
        dumped = self.model_dump(mode="json")
        # The verdict leads every answer (docs/contract.md "The verdict").
        data = {"schema_version": ANSWER_SCHEMA_VERSION, "verdict": dumped.pop("verdict"), **dumped}
        data["node"] = node_json(self.node)
        # Engine-layer fields appear only where an engine says something (vLLM answers stay as they were).
        for key, empty in (("engine_backend", None), ("engine_phases", None), ("coercions", [])):
            if data.get(key) == empty:
                data.pop(key, None)
        for v in data.get("violations", ()):
            if v.get("outcome") is None:
                v.pop("outcome", None)
        drop_empty_says(data)
        if not trace:
            data.pop("trace", None)
        return data


def drop_empty_says(data: dict[str, Any]) -> dict[str, Any]:
    """An answer's JSON without the data keys that say nothing (``says: null``, ``notes_says: []``): an answer
    whose text is all there is reads as it always did."""
    if not data.get("notes_says"):
        data.pop("notes_says", None)
    items = [*data.get("violations", ()), *data.get("suggestions", ())]
    items += [data.get("engine_backend")] + list((data.get("engine_phases") or {}).values())
    for item in items:
        if isinstance(item, dict) and "says" in item and item["says"] is None:
            item.pop("says")
    return data


def node_json(node: NodeFacts) -> dict[str, Any]:
    data = node.model_dump(mode="json")
    cap = data.get("capability", {})
    if isinstance(cap.get("value"), int):
        cap["value"] = node.capability_str
    return data
