"""SGLang 0.5.23's attention resolution, as a pure function over (flags, model, platform, tables).

Every decision is a row of rules/backends.yaml ``engines.sglang.native`` (issue 39): ``pipeline`` in the order
of sglang/srt/arg_groups/pipeline.py ``run_resolution_pipeline`` (deprecated names -> model overrides and
model_hook.py's asserts -> deterministic inference -> NVFP4 -> ``handle_attention_backend_compatibility``
(cutedsl_mla's fill included) -> FP4 KV checks -> page size default -> speculative_hook.py
``_handle_eagle_family``), then ``build_phase`` per phase and ``build`` - the backend factories of
layers/attention/attention_registry.py and its ``attn_backend_wrapper``. Each row names its rule
(rules/packs/sglang.yaml) and the SGLang function that decides it; its condition is the rule packs' condition
language, read by the one evaluator (policy/conditions.py) over the facts of sglang/facts.py. This module runs
the rows and holds no decision of its own: SGLang raises at its first failure, so a refusal row stops the
resolution (one refusal, with the phase at which SGLang fails: ``outcome``); other rows change the resolved
arguments and say SGLang's silent changes as coercions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from attnplan.policy.answer import Coercion, EngineBackend, EngineRef, Violation
from attnplan.policy.conditions import Pred, compile_condition
from attnplan.policy.config import AttentionConfig
from attnplan.policy.engines import EngineResolution
from attnplan.policy.facts import NodeFacts
from attnplan.policy.rulepack import RuleSet, SelectionRow

from .data import ChoiceRow, NativeSpec, Row, native
from .facts import names as fact_names
from .flags import KV_DTYPES, SglangEngine, SglangFlags
# The model's half of the request, beside the resolver backends.yaml names (engines.sglang.resolver): a model
# plan hands config.json to it so SGLang's model overrides see the architecture (issue 39).
from .flags import request_for_model as request_for_model

PHASES = ("prefill", "decode")
# When the node's torch CUDA is unknown (a simulated node): assumed, not read - every Blackwell path
# of SGLang needs >= 12.8, and the answer says it assumed it.
ASSUMED_CUDA = (12, 8)


@dataclass(frozen=True)
class Platform:
    capability: int                  # M*10+m
    cuda: tuple[int, int]
    cuda_known: bool = True

    @property
    def major(self) -> int:
        return self.capability // 10


@dataclass(frozen=True)
class ModelFacts:
    """What SGLang's ModelConfig tells the resolution (configs/model_config.py)."""

    is_mla: bool = False
    sinks: bool = False
    asymmetric_kv: bool = False      # has_asymmetric_kv: head_dim != v_head_dim (standard attention)
    group_size: int = 1              # query heads per KV head on one rank
    architecture: Optional[str] = None

    @classmethod
    def from_config(cls, c: AttentionConfig, architecture: Optional[str] = None) -> "ModelFacts":
        return cls(is_mla=c.is_mla, sinks=bool(c.sinks), asymmetric_kv=(not c.is_mla and c.qk_head_dim != c.vo_head_dim),
                   group_size=c.group_size if c.num_qo_heads % c.kv_heads == 0 else 1, architecture=architecture)


@dataclass(frozen=True)
class Refusal:
    rule: str
    outcome: str                     # startup | backend-build
    phase: str                       # prefill | decode | both
    backend: Optional[str]
    message: str


@dataclass
class Resolution:
    """What SGLang runs: its backend per phase (its vocabulary), the page size, what it changed silently."""

    prefill: Optional[str] = None
    decode: Optional[str] = None
    attention_backend: Optional[str] = None
    page_size: Optional[int] = None
    kv_cache_dtype: Optional[str] = None             # what SGLang runs (an alias may set it)
    coercions: list[Coercion] = field(default_factory=list)
    refusal: Optional[Refusal] = None
    steps: list[str] = field(default_factory=list)    # rule ids applied, in order

    @property
    def ok(self) -> bool:
        return self.refusal is None


class _Refused(Exception):
    def __init__(self, refusal: Refusal):
        self.refusal = refusal


def platform_of(node: NodeFacts) -> Optional[Platform]:
    """SGLang's platform view of the node; None when the capability is unknown (no device)."""
    cap = node.capability.value
    if not isinstance(cap, int):
        return None
    raw = node.torch_cuda_version.value
    if raw:
        try:
            parts = tuple(int(x) for x in str(raw).split(".")[:2])
            return Platform(cap, (parts + (0,))[:2] if len(parts) == 1 else parts)  # type: ignore[arg-type]
        except ValueError:
            pass
    return Platform(cap, ASSUMED_CUDA, cuda_known=False)


def _is(p: Platform, tables: NativeSpec, name: str) -> bool:
    """utils/common.py _check_cuda_device_version: the capability major and the minimum CUDA."""
    spec = tables.platform[name]
    return p.major in spec.majors and p.cuda >= tuple(int(x) for x in spec.cuda.split("."))


def resolve(flags: SglangFlags, model: ModelFacts, p: Platform, t: NativeSpec, *, build: bool = True) -> Resolution:
    """SGLang's resolution of these flags for this model on this platform (see the module doc);
    ``build=False`` stops after the argument pipeline (before the backend factories)."""
    r = Resolution(page_size=flags.page_size)
    run = _Run(flags, model, p, t, r)
    try:
        run.rows(t.pipeline)
        r.page_size = run.ctx[_F + "page_size"]
        if build:
            for phase in PHASES:
                run.ctx[_F + "phase"], run.ctx[_F + "phase_backend"] = phase, run.ctx[_F + phase]
                run.rows(t.build_phase)
            run.rows(t.build)
    except _Refused as exc:
        r.refusal = exc.refusal
    run.mark()
    # A page the user gave that is the page that runs was not coerced, whatever steps passed through on the way
    # (a model override's page, then a backend's constraint giving the user's own back).
    if flags.page_size is not None and r.page_size == flags.page_size:
        r.coercions = [c for c in r.coercions if c.field != "page_size"]
    return r


_PREDS: dict[int, tuple[Any, Optional[Pred]]] = {}


def _pred(key: Any, raw: Callable[[], Optional[dict[str, Any]]], known: Callable[[], frozenset[str]]) -> Optional[Pred]:
    """A row's condition, compiled once by the one evaluator (policy/conditions.py) over SGLang's facts
    (keyed by the row object, which the cached tables keep alive; ``raw`` is read on the first use only)."""
    hit = _PREDS.get(id(key))
    if hit is None or hit[0] is not key:
        cond = raw()
        hit = (key, compile_condition(cond, known()) if cond else None)
        _PREDS[id(key)] = hit
    return hit[1]


class _Fmt(dict):  # type: ignore[type-arg]
    """A message's values: an unset one reads "unset" (no architecture: "this model")."""

    def __getitem__(self, key: str) -> Any:
        v = super().__getitem__(key)
        return ("this model" if key == "architecture" else "unset") if v is None else v


_F = "sglang."   # the prefix of every fact a row reads (attnplan/sglang/facts.py)


class _Run:
    """One resolution: the facts the rows read (attnplan/sglang/facts.py), changed as the rows apply."""

    def __init__(self, f: SglangFlags, m: ModelFacts, p: Platform, t: NativeSpec, r: Resolution):
        self.t, self.r = t, r
        algo = str(f.speculative_algorithm).upper() if f.speculative_algorithm else None
        given = {"attention_backend": f.attention_backend, "prefill_attention_backend": f.prefill_attention_backend,
                 "decode_attention_backend": f.decode_attention_backend, "kv_cache_dtype": f.kv_cache_dtype,
                 "page_size": f.page_size, "speculative_eagle_topk": f.speculative_eagle_topk}
        self.ctx: dict[str, Any] = {
            **{_F + "flag." + k: v for k, v in given.items()}, **{_F + k: v for k, v in given.items()},
            _F + "flag.speculative_num_steps": f.speculative_num_steps, _F + "speculative_algorithm": algo,
            _F + "flag.enable_deterministic_inference": bool(f.enable_deterministic_inference), _F + "architecture": m.architecture,
            _F + "is_mla": m.is_mla, _F + "sinks": m.sinks, _F + "asymmetric_kv": m.asymmetric_kv,
            _F + "group_size": m.group_size, _F + "capability_major": p.major,
            **{_F + name: _is(p, t, name) for name in t.platform},
            _F + "phase": None, _F + "phase_backend": None, _F + "default_backend": None}
        self._phases()
        if "default" in t.choices:
            self.ctx[_F + "default_backend"] = self.choose("default")

    def _phases(self) -> None:  # model_override_base.py attention_backends_of
        c = self.ctx
        c[_F + "prefill"] = c[_F + "prefill_attention_backend"] or c[_F + "attention_backend"]
        c[_F + "decode"] = c[_F + "decode_attention_backend"] or c[_F + "attention_backend"]

    def mark(self) -> None:
        """The resolved arguments as they stand (a refusal names the backends resolved so far)."""
        c, r = self.ctx, self.r
        r.attention_backend, r.prefill, r.decode = c[_F + "attention_backend"], c[_F + "prefill"], c[_F + "decode"]
        r.kv_cache_dtype = c[_F + "kv_cache_dtype"]

    def known(self) -> frozenset[str]:
        return fact_names(list(self.t.platform))

    def holds(self, key: Any, raw: Callable[[], Optional[dict[str, Any]]], ctx: Optional[dict[str, Any]] = None) -> bool:
        pred = _pred(key, raw, self.known)
        return pred is None or pred.test(self.ctx if ctx is None else ctx)

    def choose(self, which: Any) -> Any:
        """The first choice row that holds: a named choice (``native.choices``) or a row's own list."""
        rows = self.t.choices[which] if isinstance(which, str) else _choice_rows(which)
        return next((c.value for c in rows if self.holds(c, lambda: c.when)), None)

    def value(self, var: str, raw: Any) -> Any:
        if isinstance(raw, dict) and set(raw) == {"fact"}:
            return self.ctx[raw["fact"]]
        if isinstance(raw, dict) and set(raw) == {"choose"}:
            return self.choose(raw["choose"])
        if isinstance(raw, dict) and set(raw) == {"map"}:
            old = self.ctx[_F + var]
            return raw["map"].get(old, old)
        return raw

    def values(self, **extra: Any) -> _Fmt:
        """What a message template reads: the facts by their short names, and the row's own values."""
        out = _Fmt({k[len(_F):]: v for k, v in self.ctx.items()})
        out.update(extra)
        return out

    def rows(self, rows: list[Row]) -> None:
        ctx = self.ctx
        for row, pred in _compiled(rows, self.known):
            if pred is not None and not pred.test(ctx):
                continue
            if row.refuse is not None:
                self.mark()
                rf, v = row.refuse, self.values()
                raise _Refused(Refusal(row.rule, rf.outcome, rf.phase.format_map(v),
                                       rf.backend.format_map(v) if rf.backend else None, rf.message.format_map(v)))
            before = dict(self.ctx)
            new = {var: self.value(var, raw) for var, raw in row.set.items()}   # each read before any is written
            for var, v in new.items():
                self.ctx[_F + var] = v
            self._phases()
            if row.step:
                self.r.steps.append(row.rule)
            for c in row.coerce:
                if c.var is not None:
                    given, runs = before[_F + c.var], self.ctx[_F + c.var]
                    if given == runs or not self.holds(c, lambda: c.when, before):
                        continue
                else:
                    given, runs = c.given, c.runs
                self.r.coercions.append(Coercion(field=c.field, given=given, runs=runs, rule=row.rule,
                                                 message=c.message.format_map(self.values(given=given, runs=runs))))
                self.r.steps.append(row.rule)
            self.mark()


_ROWS: dict[int, tuple[Any, list[tuple[Row, Optional[Pred]]]]] = {}


def _compiled(rows: list[Row], known: Callable[[], frozenset[str]]) -> list[tuple[Row, Optional[Pred]]]:
    """A list of rows with their conditions compiled (once per list object, which the cached tables keep alive)."""
    hit = _ROWS.get(id(rows))
    if hit is None or hit[0] is not rows:
        hit = (rows, [(row, _pred(row, row.condition, known)) for row in rows])
        _ROWS[id(rows)] = hit
    return hit[1]


_CHOICES: dict[int, tuple[Any, list[ChoiceRow]]] = {}


def _choice_rows(rows: list[Any]) -> list[ChoiceRow]:
    """A row's own choice list, validated once (keyed by the list object, which the cached tables keep alive)."""
    hit = _CHOICES.get(id(rows))
    if hit is None or hit[0] is not rows:
        hit = (rows, [ChoiceRow.model_validate(c) for c in rows])
        _CHOICES[id(rows)] = hit
    return hit[1]


# -- the FlashInfer side ------------------------------------------------------------------------
def phase_backend(name: Optional[str], kind: str, phase: str, major: int, t: NativeSpec) -> tuple[EngineBackend, Optional[list[str]]]:
    """SGLang's backend for one phase, said plainly, and the FlashInfer candidates it runs (None: none)."""
    if name is None:
        return EngineBackend(name="none", runs_flashinfer=False, note="no backend resolved"), None
    spec = t.backends.get(name)
    if spec is None:
        return EngineBackend(name=name, runs_flashinfer=False,
                             note=f"SGLang's {name} backend is not one attnplan models (no FlashInfer plan of its own)"), None
    if not spec.runs_flashinfer:
        return EngineBackend(name=name, runs_flashinfer=False, source=spec.source, note=spec.runs), None
    rows = (spec.mla if kind == "mla" else spec.standard).get(phase)  # type: ignore[call-overload]
    if not rows:
        return EngineBackend(name=name, runs_flashinfer=False, source=spec.source,
                             note=f"{name} does not serve {'MLA' if kind == 'mla' else 'standard'} attention"), None
    for row in rows:
        if row.capability_major is None or row.capability_major == major:
            if row.candidates:
                return EngineBackend(name=name, runs_flashinfer=True, source=spec.source,
                                     note=f"runs FlashInfer {', '.join(row.candidates)}"
                                          + (f"; {row.also}" if row.also else "")), list(row.candidates)
            return EngineBackend(name=name, runs_flashinfer=False, source=spec.source, note=row.runs or ""), None
    return EngineBackend(name=name, runs_flashinfer=False, source=spec.source, note="no row for this capability"), None


def engine_resolution(rs: RuleSet, ref: EngineRef, config: AttentionConfig, node: NodeFacts,
                      request: object = None) -> EngineResolution:
    """The resolver backends.yaml names for ``engines.sglang``: SGLang's flags (the request's, else the
    ones the attention config implies) resolved, and the FlashInfer candidates per phase."""
    t = native(rs, ref.name, ref.version)
    # SGLang's own flags (backend names, architecture, EAGLE top-k) come with the request; the values an
    # attention config also holds (KV dtype, page size, deterministic mode, speculation) are read from the
    # config, so a suggestion that changes one is re-resolved by SGLang's rules too.
    base_flags = getattr(request, "flags", None) or SglangFlags()
    flags = base_flags.with_(
        kv_cache_dtype={"fp8": "fp8_e4m3"}.get(config.kv_cache_dtype, config.kv_cache_dtype),
        page_size=config.page_size, enable_deterministic_inference=config.batch_invariant is True,
        speculative_algorithm=base_flags.speculative_algorithm or ("EAGLE" if config.num_speculative_tokens else None))
    p = platform_of(node)
    kind = "mla" if config.is_mla else "standard"
    if p is None:  # no device: the kernel rules refuse (device.cuda); SGLang picks nothing
        unknown = EngineBackend(name="unknown", runs_flashinfer=False, note="SGLang's pick needs the device capability")
        return EngineResolution(config=config, selection={kind: {ph: [SelectionRow(candidates=phase_backend(
            "flashinfer", kind, ph, 0, t)[1] or ["fa2"])] for ph in PHASES}}, engine_backend=unknown,
            engine_phases={ph: unknown for ph in PHASES}, notes=("sglang: no device capability, so no SGLang backend pick",))
    m = ModelFacts.from_config(config, flags.architecture)
    r = resolve(flags, m, p, t)
    notes: list[str] = []
    if not p.cuda_known:
        notes.append(f"sglang: the node's torch CUDA is unknown; assumed CUDA {p.cuda[0]}.{p.cuda[1]} for SGLang's platform checks")
    violations: tuple[Violation, ...] = ()
    phases: dict[str, EngineBackend] = {}
    selection: dict[str, dict[str, list[SelectionRow]]] = {kind: {}}
    fi_default = {ph: phase_backend("flashinfer", kind, ph, p.major, t)[1] or [] for ph in PHASES}
    elsewhere: dict[tuple[str, str], list[str]] = {}
    alt_refusal: Optional[Refusal] = None
    if r.ok and not all(phase_backend(n, kind, ph, p.major, t)[1] for ph, n in (("prefill", r.prefill), ("decode", r.decode))):
        # The FlashInfer plan stands for what SGLang runs when asked for flashinfer: say so when SGLang refuses that.
        alt_refusal = resolve(flags.with_(attention_backend="flashinfer", prefill_attention_backend=None,
                                          decode_attention_backend=None), m, p, t).refusal
    for ph, name in (("prefill", r.prefill), ("decode", r.decode)):
        eb, cands = phase_backend(name, kind, ph, p.major, t)
        if cands is None and alt_refusal is not None:
            eb = eb.model_copy(update={"note": f"{eb.note}; SGLang refuses --attention-backend flashinfer here at "
                                               f"{alt_refusal.outcome} [{alt_refusal.rule}]"})
        phases[ph] = eb
        if cands is None:
            cands = fi_default[ph]
            if name is not None:
                elsewhere.setdefault((name, eb.note), []).append(ph)
        selection[kind][ph] = [SelectionRow(candidates=cands)]
    for (name, what), phs in elsewhere.items():
        where = " and ".join(phs)
        notes.append(f"sglang: {where} run{'s' if len(phs) == 1 else ''} {name} ({what}); the FlashInfer plan for {where} "
                     f"is what SGLang runs with --attention-backend flashinfer")
    if config.attention_backend != "auto":
        rule = rs.rule("sglang.backend-names")
        violations += (Violation(rule=rule.id, phase="both", fact="config.attention_backend", observed=config.attention_backend,
                                 required="SGLang's own backend flags", layer="engine", fix=rule.fix,
                                 message=f"attention_backend={config.attention_backend} names a FlashInfer backend; SGLang "
                                         f"takes its own names (--attention-backend flashinfer, trtllm_mha, ...)"),)
    if flags.kv_cache_dtype not in KV_DTYPES:
        rule = rs.rule("sglang.kv-names")
        violations += (Violation(rule=rule.id, phase="both", fact="config.kv_cache_dtype", observed=flags.kv_cache_dtype,
                                 required=", ".join(KV_DTYPES), layer="engine", fix=rule.fix,
                                 message=f"SGLang has no --kv-cache-dtype {flags.kv_cache_dtype}"),)
    if r.refusal is not None:
        rf = r.refusal
        rule = rs.rule(rf.rule)
        violations += (Violation(rule=rf.rule, phase=rf.phase, backend=rf.backend,  # type: ignore[arg-type]
                                fact="sglang.attention_backend", observed=rf.backend,
                                required=rule.title, message=f"SGLang {ref.version} refuses at {rf.outcome}: {rf.message}",
                                fix=rule.fix, layer="engine", outcome=rf.outcome),)  # type: ignore[arg-type]
    for c in r.coercions:
        notes.append(f"sglang: [{c.rule}] {c.message} (silently)")
    same = r.prefill == r.decode
    name = (r.prefill or "none") if same else f"prefill={r.prefill},decode={r.decode}"
    runs = all(eb.runs_flashinfer for eb in phases.values())
    engine_backend = EngineBackend(
        name=name, runs_flashinfer=runs, source="sglang/srt/arg_groups/pipeline.py run_resolution_pipeline",
        note=(f"SGLang {ref.version} selects {name} here: the FlashInfer plan below is what it runs" if runs else
              f"SGLang {ref.version} selects {name} here, which runs kernels that are not FlashInfer's in "
              + " and ".join(ph for ph, eb in phases.items() if not eb.runs_flashinfer)
              + "; the FlashInfer plan there is what SGLang runs with --attention-backend flashinfer"))
    cfg = config.replace(page_size=r.page_size)
    if r.kv_cache_dtype is not None and r.kv_cache_dtype != flags.kv_cache_dtype:   # an alias's KV dtype (coerced)
        cfg = cfg.replace(kv_cache_dtype=KV_DTYPES.get(r.kv_cache_dtype, r.kv_cache_dtype))
    return EngineResolution(config=cfg, selection=selection, engine_backend=engine_backend, engine_phases=phases,
                            coercions=tuple(r.coercions), violations=violations, notes=tuple(notes))


def backend_alternatives(rs: RuleSet, spec: Any, is_mla: bool, selected: Any) -> list[tuple[str, str, Any]]:
    """SGLang's other backends of the model's kind (backends.yaml engines.sglang.native.backends.<name>.kinds) as
    its own ``--attention-backend`` flag, for the verdict's fixes (policy/api.py fixes_for re-evaluates each)."""
    from attnplan.policy import EngineSpec

    t = native(rs, spec.name, spec.version)
    kind = "mla" if is_mla else "standard"
    base = getattr(spec.request, "flags", None) or SglangFlags()
    out = []
    for name, row in t.backends.items():
        if kind not in row.kinds or (name == selected.decode and selected.prefill == name):
            continue
        request = SglangEngine(flags=base.with_(attention_backend=name), **({"version": spec.version} if spec.version else {}))
        own = "" if row.runs_flashinfer else " (its own kernels: only SGLang's checks are modelled)"
        out.append((f"--attention-backend {name}", f"run SGLang's {name}{own}", EngineSpec(spec.name, spec.version, request)))
    return out
