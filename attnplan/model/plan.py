"""Plan a whole model: every attention layer group evaluated by the rules, one KV cache for all.

``plan_model(config.json, node)`` reads the layer groups (``layers.py``), builds one
AttentionConfig per attention group (its window, chunk size, soft-cap, sinks and softmax scale
included) and asks ``plan_for`` for each, so a group can be refused while another passes; the
model is ok only when every attention group is. Each group's ``Plan.attention`` is the rules'
plan of that config: nothing here re-decides a scalar. vLLM plans FlashInfer once per KV-cache group with that group's window,
soft-cap and scale (``v1/attention/backends/flashinfer.py`` FlashInferMetadataBuilder.__init__:
``get_per_layer_parameters`` over the group's layers), which is what a layer group is here.
The KV cache is laid out as vLLM 0.33 lays out its KV-cache groups
(``vllm/v1/core/kv_cache_planning.py``, ``vllm/platforms/interface.py``): one block size and one
physical page for every group, the attention block raised to hold a recurrent layer's state.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..policy.answer import (ANSWER_SCHEMA_VERSION, AttentionPlan, EngineBackend, EngineRef, Fallback, KVCachePlan, MetadataPlan,
                     Note, PhasePlan, PlanAnswer, Suggestion, Verdict, Violation, drop_empty_says, node_json)
from ..policy.explain import Explanation, explain
from ..policy.api import plan_for
from ..policy.config import AttentionConfig
from ..policy.parallel import per_rank_fields, startup_errors
from ..policy.dtypes import ELEMENT_BYTES
from attnplan.errors import InvalidInputError, ModelConfigError
from ..policy.facts import NodeFacts
from ..policy.config import make_config
from .hfconfig import fields_from_hf, read_model_config
from ..policy.jit_names import clashes
from .layers import LayerGroup, ModelLayers, compact_layers, read_layers, text_config
from ..policy.engines import engine_request_for_model, parse_engine
from ..policy.rulepack import RuleSet
from ..policy.shipped import default_ruleset
from ..policy.verdict import combine, violation_outcome, with_group

# The model decides these per group; an override would silently re-shape one group as another.
PER_GROUP_FIELDS = ("sliding_window", "logits_soft_cap", "sinks", "sm_scale", "attention_chunk_size")


class ChunkedLocalPlan(BaseModel):
    """How vLLM runs chunked local attention on an ordinary causal kernel."""

    model_config = ConfigDict(frozen=True)

    chunk_size: int
    virtual_requests: bool = Field(True, description="each request is split into one virtual request per chunk")
    cudagraph: Literal["never"] = "never"
    source: str = ("vllm/v1/attention/backends/utils.py make_local_attention_virtual_batches; "
                   "model_executor/layers/attention/chunked_local_attention.py (cudagraph NEVER)")


class GroupPlan(LayerGroup):
    """One layer group, with its own verdict and, when served and ok, its executable phases."""

    status: Literal["ok", "rejected", "not_served"]
    config: Optional[AttentionConfig] = None
    attention: Optional[AttentionPlan] = None
    prefill: Optional[PhasePlan] = None
    decode: Optional[PhasePlan] = None
    kv_cache: Optional[KVCachePlan] = None
    metadata: Optional[MetadataPlan] = None
    chunked_local: Optional[ChunkedLocalPlan] = None
    violations: tuple[Violation, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()
    fallbacks: tuple[Fallback, ...] = ()
    notes: tuple[str, ...] = ()
    notes_says: tuple[Note, ...] = Field((), repr=False, description="what the notes say, as data (render/notes.py)")
    answer: Optional[PlanAnswer] = Field(None, exclude=True, description="the rule answer (its trace, for explain)")


class KVCacheGroup(BaseModel):
    """One of vLLM's KV-cache groups: layers sharing a block table."""

    model_config = ConfigDict(frozen=True)

    kind: str
    layers: tuple[int, ...]
    padding_layers: int = 0
    block_size: int
    page_bytes: int
    padded: bool = Field(False, description="page padded up to the shared page (not a multiple of it)")


class KVCacheGroupsPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    kernel_page_size: int = Field(description="tokens per page the attention kernels see (the plans' page_size)")
    block_size: int = Field(description="tokens per KV-cache block (vLLM cache_config.block_size)")
    page_bytes: int = Field(description="bytes of one block, the same for every group")
    layers_per_group: int
    groups: tuple[KVCacheGroup, ...]
    recurrent_state_bytes: Optional[int] = Field(None, description="one request's recurrent state (MambaSpec page)")
    raised_attention_page_bytes: Optional[int] = Field(
        None, description="hybrid models: the attention page once its block was raised to hold one request's "
                          "recurrent state (None: not raised); render/notes.py words its note from it")
    notes: tuple[str, ...] = ()
    notes_says: tuple[Note, ...] = Field((), repr=False, description="what the notes say, as data (render/notes.py)")


class ModelPlanAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: Literal["ok", "rejected"]
    model_type: str
    num_layers: int
    node: NodeFacts
    layer_groups: tuple[GroupPlan, ...]
    kv_cache_groups: Optional[KVCacheGroupsPlan] = None
    violations: tuple[Violation, ...] = Field((), description="model-level violations (no block size fits every group)")
    engine: EngineRef = EngineRef()
    engine_backend: Optional[EngineBackend] = Field(
        None, description="what the engine selects without --attention-backend, for the first attention layer group "
                          "(each group's answer carries its own)")
    notes: tuple[str, ...] = ()
    notes_says: tuple[Note, ...] = Field((), repr=False, description="what the notes say, as data (render/notes.py)")
    rules_revision: str = ""
    verdict: Optional[Verdict] = Field(None, description="the command's verdict: its attention groups' worst, with the "
                                                        "model-level violations (policy/verdict.py)")
    # ``all_notes_says`` worded (render/notes.py all_notes_text), written where the answer is finished
    # (render/verdict.py finish): the layered JSON's ``notes`` (to_json) and preflight's read it.
    all_notes_text: tuple[str, ...] = Field((), exclude=True, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def attention_groups(self) -> tuple[GroupPlan, ...]:
        return tuple(g for g in self.layer_groups if g.is_attention)

    @property
    def uniform(self) -> bool:
        """One attention group (other groups, if any, are not attention): today's PlanAnswer
        describes every attention layer of the model."""
        return len(self.attention_groups) == 1

    def all_notes_says(self) -> tuple[Note, ...]:
        """The model's notes, then each attention group's, as data: a note every attention group has once, another
        one with its group's layers (``Note.group_layers``; render/notes.py names them before the note)."""
        out = list(_says(self))
        attn = self.attention_groups
        for g in attn:
            for n in _says(g):
                said = n if all(n in _says(h) for h in attn) else \
                    n.model_copy(update={"group_layers": compact_layers(g.layers, self.num_layers)})
                if said not in out:
                    out.append(said)
        return tuple(out)

    def all_notes(self) -> tuple[str, ...]:
        """``all_notes_says`` as a finished answer words it (render/verdict.py finish); () before it is finished."""
        return self.all_notes_text

    def answer(self) -> Optional[PlanAnswer]:
        """For a uniform model, the one attention group's PlanAnswer with the model's verdict and notes."""
        if not self.uniform:
            return None
        g = self.attention_groups[0]
        a = g.answer
        assert a is not None
        extra = tuple(v for v in g.violations if v not in a.violations) + self.violations
        if extra:
            a = a.model_copy(update={"status": "rejected", "plan": None, "violations": a.violations + extra})
        said = _says(a) + tuple(n for n in _says(self) if n not in _says(a))
        return a.model_copy(update={"notes": a.notes + tuple(n for n in self.notes if n not in a.notes),
                                    "notes_says": said})

    def to_json(self, *, trace: bool = True) -> dict[str, Any]:
        """The JSON contract (docs/contract.md, "Layer groups"): ``layer_groups`` and ``kv_cache_groups``
        always; a uniform model keeps today's top-level fields (its one attention group's plan); a layered
        model's top level has ``plan: null`` (no one plan serves every layer), the first attention group's
        ``config``, and every group's violations, suggestions and fallbacks, each naming its ``group``."""
        groups = []
        for g in self.layer_groups:
            d = drop_empty_says(g.model_dump(mode="json", exclude={"answer"}))
            if g.answer is not None:   # the engine layer's own pick per group (SGLang), as a uniform answer carries it
                d.update({k: v for k, v in g.answer.to_json(trace=False).items()
                          if k in ("engine_backend", "engine_phases", "coercions") and v not in (None, [])})
            if trace and not self.uniform and g.answer is not None:
                d["trace"] = g.answer.to_json()["trace"]
            groups.append(d)
        kv = drop_empty_says(self.kv_cache_groups.model_dump(mode="json")) if self.kv_cache_groups else None
        one = self.answer()
        if one is not None:
            data = one.to_json(trace=trace)
        else:
            attn = self.attention_groups
            tagged = {key: [x.model_copy(update={"group": i}).model_dump(mode="json")
                            for i, g in enumerate(self.layer_groups) for x in getattr(g, key)]
                      for key in ("violations", "suggestions", "fallbacks")}
            tagged["violations"] += [v.model_dump(mode="json") for v in self.violations]
            data = drop_empty_says({
                "status": self.status, "engine": self.engine.model_dump(mode="json"), "node": node_json(self.node),
                "config": attn[0].config.model_dump(mode="json") if attn and attn[0].config else None,
                "plan": None, **tagged, "notes": list(self.all_notes()), "rules_revision": self.rules_revision})
        data.update(model_type=self.model_type, num_layers=self.num_layers, layer_groups=groups, kv_cache_groups=kv)
        data = {"schema_version": data.pop("schema_version", ANSWER_SCHEMA_VERSION),
                "verdict": self.verdict.model_dump(mode="json") if self.verdict is not None else None, **data}
        return data


def explain_groups(a: ModelPlanAnswer, ruleset: Optional[RuleSet] = None, *,
                   engine: Optional[str] = None) -> tuple[Optional[Explanation], ...]:
    """``explain`` for each layer group (None for a group FlashInfer attention does not serve)."""
    return tuple(explain(g.config, a.node, ruleset, engine=engine) if g.config is not None else None
                 for g in a.layer_groups)


# -- planning -----------------------------------------------------------------------------
def _plan(cfg: AttentionConfig, node: Optional[NodeFacts], ruleset: Optional[RuleSet], engine: Any) -> PlanAnswer:
    return plan_for(cfg, node, ruleset=ruleset, engine=engine)


def _group_config(base: Mapping[str, Any], g: LayerGroup, overrides: Mapping[str, Any], tp: int = 1) -> AttentionConfig:
    fields = {k: v for k, v in base.items() if k not in PER_GROUP_FIELDS}
    fields.update(num_qo_heads=g.num_qo_heads, num_kv_heads=g.num_kv_heads)
    if g.mla is None:
        fields["head_dim"] = g.head_dim_qk
        if g.head_dim_vo != g.head_dim_qk:
            fields["head_dim_vo"] = g.head_dim_vo
    if g.kind == "sliding":
        fields["sliding_window"] = g.sliding_window
    if g.logits_soft_cap is not None:
        fields["logits_soft_cap"] = g.logits_soft_cap
    fields["sinks"] = g.sinks
    # The default head_dim^-0.5 stays None, so that a uniform model's config is today's.
    qk = g.head_dim_qk or 0
    if g.sm_scale is not None and not (qk and math.isclose(g.sm_scale, qk ** -0.5, rel_tol=1e-12)):
        fields["sm_scale"] = g.sm_scale
    if g.kind == "chunked_local" and g.chunk_size is not None:
        fields["attention_chunk_size"] = g.chunk_size
    fields.update(overrides)
    if tp > 1:  # one tensor-parallel rank's heads, as vLLM splits them (policy/parallel.py)
        fields = per_rank_fields(fields, tp)
    return make_config(fields)


def _field_value(name: str, value: Any) -> Any:
    """One override validated by its AttentionConfig field's own type and bounds (strict: "x", a list, a bool
    where an int belongs are refused), or InvalidInputError naming the field (issue 40 #6)."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    field = AttentionConfig.model_fields.get(name)
    if field is None:
        raise InvalidInputError(name, "unknown field", tuple(AttentionConfig.model_fields))
    try:
        typ = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        return TypeAdapter(typ).validate_python(value)
    except (ValidationError, ValueError, TypeError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
        raise InvalidInputError(name, first) from None


def _check_overrides(overrides: Optional[Mapping[str, Any]], model: ModelLayers) -> dict[str, Any]:
    if overrides is not None and not isinstance(overrides, Mapping):
        raise InvalidInputError("overrides", f"a mapping of attention config fields, not {type(overrides).__name__}")
    # the config's own normalisation runs later (make_config): here only what the field's type refuses outright
    for k, v in (overrides or {}).items():
        if v is not None and k not in ("dtype", "kv_cache_dtype", "attention_backend", "engine_attention_backend"):
            _field_value(str(k), v)
    out = {k: v for k, v in (overrides or {}).items() if v is not None}
    if len(model.attention_groups) == 1:
        return out  # one attention group: an override re-shapes exactly the layers it names
    for k in PER_GROUP_FIELDS:
        if k in out:
            raise InvalidInputError(k, f"set per layer group by the model config ({len(model.attention_groups)} "
                                    "attention groups); it cannot be overridden for the whole model")
    return out


def plan_model(hf: Mapping[str, Any] | str | Path, node: Optional[NodeFacts] = None, *,
               overrides: Optional[Mapping[str, Any]] = None, ruleset: Optional[RuleSet] = None,
               engine: Any = None, tensor_parallel_size: int = 1) -> ModelPlanAnswer:
    """Plan every attention layer group of a model (config.json dict or path) on ``node``; with
    ``tensor_parallel_size`` each group is planned for one rank (vLLM's per-rank heads), and a
    split vLLM refuses at startup is an ``InvalidInputError``."""
    where = "config.json" if isinstance(hf, Mapping) else str(hf)
    data = hf if isinstance(hf, Mapping) else read_model_config(hf)
    if not isinstance(data, Mapping):
        raise ModelConfigError(where, "a config.json holds a JSON object")
    try:
        base = fields_from_hf(text_config(data), where)  # with the config class's defaults, as vLLM sees it
        model = read_layers(data)
    except ModelConfigError as exc:
        if exc.path == where:
            raise
        # read_layers names "config.json": name the file the caller gave instead.
        raise ModelConfigError(where, str(exc).removeprefix(f"model_config: {exc.path}: ")) from None
    over = _check_overrides(overrides, model)
    attn = model.attention_groups
    if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int):
        raise InvalidInputError("tensor_parallel_size", f"an integer, not {type(tensor_parallel_size).__name__}")
    tp = tensor_parallel_size
    if tp < 1:
        raise InvalidInputError("tensor_parallel_size", f"must be at least 1, got {tp}")
    for g in attn:
        errs = startup_errors(int(over.get("num_qo_heads") or g.num_qo_heads),
                              int(over.get("num_kv_heads") or g.num_kv_heads or g.num_qo_heads), tp,
                              int(over.get("dcp_world_size") or 1), mla=g.mla is not None)
        if errs:
            raise InvalidInputError("tensor_parallel_size", "vLLM refuses this at startup: " + errs[0])
    rs = ruleset if ruleset is not None else default_ruleset()
    engine = engine_request_for_model(rs, parse_engine(engine, rs), data, where)  # once for every group
    answers = {i: _plan(_group_config(base, g, over, tp), node, rs, engine)
               for i, g in enumerate(model.groups) if g.is_attention}
    violations: list[Violation] = []
    # Every note as data, in order (render/notes.py words them): the config reader's first.
    notes: list[Note] = list(model.notes_says)

    # One KV block size for every group (vLLM's cache_config.block_size): the smallest page size
    # every ok group takes, each group re-planned with it when it chose another.
    page = over.get("page_size")
    ok_answers = [a for a in answers.values() if a.ok and a.plan is not None]
    if page is None and ok_answers:
        common = set.intersection(*(set(a.plan.kv_cache.page_valid_sizes) for a in ok_answers))  # type: ignore[union-attr]
        if common:
            page = min(common)
            for i, a in answers.items():
                if a.ok and a.plan is not None and a.plan.kv_cache.page_size != page:
                    answers[i] = _plan(_group_config(base, model.groups[i], {**over, "page_size": page}), node, rs, engine)
        else:
            sizes = tuple((g.layers[0], tuple(sorted(answers[i].plan.kv_cache.page_valid_sizes)))  # type: ignore[union-attr]
                          for i, g in enumerate(model.groups) if i in answers and answers[i].ok)
            violations.append(Violation(
                rule="page-size", phase="both", fact="page_size", observed=None, layer="engine",
                message="", says=Note(kind="model-page-size", sizes=sizes)))
    kv = (_kv_cache_groups(model, answers, page, rs)
          if page is not None and not violations else None)
    if kv is not None:
        notes.extend(kv.notes_says)

    out: list[GroupPlan] = []
    # The notes are data (render/notes.py words them where the answer is finished: render/verdict.py finish).
    for i, g in enumerate(model.groups):
        if not g.is_attention:
            notes.append(Note(kind="not-served", layers=compact_layers(g.layers, model.num_layers), group_kind=g.kind,
                              mixer=g.recurrent.mixer if g.recurrent is not None else g.kind))
            out.append(GroupPlan(**g.model_dump(), status="not_served", notes_says=(Note(kind="group-not-served"),)))
            continue
        a = answers[i]
        gv = list(a.violations)
        chunked = ChunkedLocalPlan(chunk_size=g.chunk_size) if g.kind == "chunked_local" and g.chunk_size else None
        if chunked is not None and kv is not None and g.chunk_size % kv.block_size:  # type: ignore[operator]
            # make_local_attention_virtual_batches: assert attn_chunk_size % block_size == 0.
            gv.append(Violation(
                rule="chunked-local.block-size", phase="both", fact="page_size", observed=kv.block_size, layer="engine",
                message="", says=Note(kind="chunked-block", chunk=g.chunk_size, block=kv.block_size,
                                      source="vllm/v1/attention/backends/utils.py make_local_attention_virtual_batches")))
        ok = a.ok and not gv and a.plan is not None
        p = a.plan
        out.append(GroupPlan(
            **g.model_dump(), status="ok" if ok else "rejected", config=a.config,
            attention=p.attention if ok and p else None,
            prefill=p.prefill if ok and p else None, decode=p.decode if ok and p else None,
            kv_cache=p.kv_cache if ok and p else None, metadata=p.metadata if ok and p else None,
            chunked_local=chunked, violations=tuple(gv), suggestions=a.suggestions, fallbacks=a.fallbacks,
            notes=a.notes, notes_says=a.notes_says, answer=a))
    # Modules FlashInfer names alike across groups (backends.yaml calls.<c>.jit_name): one process
    # would load one library for both (policy/jit_names.py).
    violations.extend(clashes(rs, [(i, pp) for i, g in enumerate(out) if g.status == "ok"
                                   for pp in (g.prefill, g.decode) if pp is not None]))
    first = next(iter(answers.values()), None)
    status = "ok" if attn and all(g.status == "ok" for g in out if g.is_attention) and not violations else "rejected"
    if not attn:
        notes.append(Note(kind="no-attention"))
    n = first.node if first is not None else node
    if n is None:
        from ..node.probe import local_node

        n = local_node()
    labels = {i: f"{model.groups[i].kind} layers {compact_layers(model.groups[i].layers, model.num_layers)}"
              for i in answers}
    verdict = model_verdict([a for a in answers.values() if a.verdict is not None],
                            [v for g in out for v in g.violations if g.answer is not None and v not in g.answer.violations]
                            + violations, rs, [labels[i] for i, a in answers.items() if a.verdict is not None])
    return ModelPlanAnswer(
        verdict=verdict, status=status, model_type=model.model_type, num_layers=model.num_layers, node=n,
        layer_groups=tuple(out), kv_cache_groups=kv, violations=tuple(violations),
        engine=first.engine if first is not None else EngineRef(),
        engine_backend=first.engine_backend if first is not None else None, notes_says=tuple(dict.fromkeys(notes)),
        rules_revision=first.rules_revision if first is not None else "")


# -- vLLM's KV-cache groups ---------------------------------------------------------------
def _token_bytes(cfg: AttentionConfig) -> Fraction:
    """AttentionSpec.page_size_bytes for one token: K and V of every KV head (MLA: one latent row)."""
    e = ELEMENT_BYTES[cfg.kv_dtype]
    if cfg.is_mla:
        return (int(cfg.kv_lora_rank) + int(cfg.qk_rope_head_dim)) * e  # type: ignore[arg-type]
    return cfg.kv_heads * (cfg.qk_head_dim + cfg.vo_head_dim) * e


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _says(a: Any) -> tuple[Note, ...]:
    """An answer's notes as data: its ``notes_says``, or its text notes as they are (an answer read back from JSON)."""
    return a.notes_says or tuple(Note(kind="text", text=n) for n in a.notes)


def _kv_cache_groups(model: ModelLayers, answers: Mapping[int, PlanAnswer], page: int, rs: RuleSet) -> KVCacheGroupsPlan:
    notes: list[Note] = []
    specs = {i: (model.groups[i], _token_bytes(a.config)) for i, a in answers.items()}
    block = page
    state_bytes = None
    raised: Optional[int] = None
    recurrent = [g for g in model.groups if g.recurrent is not None]
    if recurrent and specs:
        # platforms/interface.py _align_hybrid_block_size: the attention block grows until its page
        # holds one request's recurrent state (mamba_cache_dtype auto = model dtype); the state's
        # page is then padded up to the attention page.
        dtype = next(iter(answers.values())).config.dtype
        state_bytes = max(int(g.recurrent.page_bytes(int(ELEMENT_BYTES[dtype]))) for g in recurrent)  # type: ignore[union-attr]
        tok = max(t for _, t in specs.values())
        # the answering engine's block arithmetic (backends.yaml engine_sizes); one without its own is
        # planned with the default engine's, the hybrid planning modelled here (vLLM's)
        blocks = rs.sizes(next(iter(answers.values())).engine.name)
        align = max(blocks.kernel_block_min, block)
        if any(g.mla for g, _ in specs.values()):
            align = max(align, blocks.mla_hybrid_align)
        need = align * _cdiv(state_bytes, int(align * tok))
        need = blocks.kernel_block_min * _cdiv(need, blocks.kernel_block_min)
        if need > block:
            raised = int(need * tok)
            notes.append(Note(kind="hybrid-kv-cache", block=need, page_bytes=raised, state_bytes=state_bytes, page=page))
            block = need
    # kv_cache_planning.py unify_kv_cache_spec_page_size: smaller pages grow their block size by
    # the ratio to the largest page, or are padded when the ratio is not whole.
    pages = {i: int(block * t) for i, (_, t) in specs.items()}
    top = max(pages.values(), default=0)
    if recurrent and state_bytes is not None:
        top = max(top, state_bytes)
    buckets: list[tuple[str, list[int], int, bool]] = []
    for i, g in enumerate(model.groups):
        if g.is_attention:
            p = pages[i]
            bs, padded = (block * (top // p), False) if top % p == 0 else (block, True)
            buckets.append((g.kind, list(g.layers), bs, padded))
        else:
            buckets.append((g.kind, list(g.layers), block, state_bytes != top))
    if len(buckets) == 1 or (not recurrent and len({b[0] for b in buckets}) == 1):
        # is_kv_cache_spec_uniform / UniformTypeKVCacheSpecs: one group, one block table.
        layers = tuple(sorted(x for b in buckets for x in b[1]))
        groups = (KVCacheGroup(kind=buckets[0][0], layers=layers, block_size=buckets[0][2], page_bytes=top),)
        per = len(layers)
    else:
        # _get_kv_cache_groups_uniform_page_size: equal-sized groups of the fewest layers of a kind
        # (or of the most, when that pads less than half), layers[i::n] each, short ones padded.
        counts = [len(b[1]) for b in buckets]
        per = min(counts)
        if max(counts) < per * 1.5:
            per = max(counts)
        out = []
        for kind, layers, bs, padded in buckets:
            n = _cdiv(len(layers), per)
            for k in range(n):
                sub = tuple(layers[k::n])
                out.append(KVCacheGroup(kind=kind, layers=sub, padding_layers=per - len(sub), block_size=bs,
                                        page_bytes=top, padded=padded))
        groups = tuple(out)
    return KVCacheGroupsPlan(kernel_page_size=page, block_size=block, page_bytes=top, layers_per_group=per,
                             groups=groups, recurrent_state_bytes=state_bytes, raised_attention_page_bytes=raised,
                             notes_says=tuple(notes))


def model_verdict(answers: list[PlanAnswer], extra: list[Violation], rs: RuleSet,
                  labels: Optional[list[str]] = None) -> Optional[Verdict]:
    """The model's verdict: its attention groups' worst, and the model-level violations (one block size for
    every group, module-name clashes, chunk vs block) where every group runs the FlashInfer plan they judge.
    ``labels``: each group's layers, named in a failing group's message when the model has several."""
    vs = [a.verdict for a in answers if a.verdict is not None]
    if not vs:
        return None
    if labels and len(vs) > 1:
        vs = [v if v.runs else with_group(v, label) for v, label in zip(vs, labels)]
    eng = answers[0].engine.name
    counted = [(v, violation_outcome(v, rs, eng)) for v in extra] if all(v.flashinfer_plan == "command" for v in vs) \
        else [(v, violation_outcome(v, rs, eng)) for v in extra if v.rule.startswith("chunked-local")]
    return combine(vs, counted)
