"""The verdict of the command as given (docs/contract.md "The verdict"): what the engine itself selects for
the config as typed, and what then happens - it runs, it fails (at startup, at CUDA-graph capture, at the
first request), or it runs and computes something other than the model defines (``wrong-output``).

The FlashInfer plan of an answer says what FlashInfer would run; the verdict says what the *command* does.
They differ where the engine runs a backend that is not FlashInfer's (vLLM's FLASH_ATTN on an H100,
SGLang's fa3): the command then runs on the engine's own kernels (``modelled: false``: attnplan does not
model them beyond the engine's own validation), and the FlashInfer plan beneath is labelled "if forced".

Pure functions over an answer: nothing here re-decides a rule. Which rule makes which outcome is data
(each rule's ``outcome`` in rules/packs/*.yaml); a rule without one fails where its phase first runs
(``PHASE_OUTCOME``).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .answer import BackendRefusal, Outcome, PlanAnswer, Selected, Verdict, VerdictSays, Violation
from .rulepack import RuleSet

OUTCOMES: tuple[str, ...] = ("runs", "wrong-output", "fails-at-first-request", "fails-at-graph-capture",
                             "fails-at-startup")
# The command's outcome is what happens first: a refusal at startup means nothing else is ever seen, a
# crash at graph capture comes before any request, a wrong answer needs a request that runs.
_RANK = {o: i for i, o in enumerate(OUTCOMES)}

# A rule's own outcome (rulepack.RuleSpec.outcome) -> the command's outcome.
RULE_OUTCOME = {"startup": "fails-at-startup", "backend-build": "fails-at-startup",
                "first-request": "fails-at-first-request", "silent-wrong": "wrong-output"}
# A kernel that refuses fails where its phase first runs in a serving engine: decode batches are captured
# into CUDA graphs at startup (vLLM v1/worker/gpu_model_runner.py capture_model, SGLang cuda_graph_runner.py),
# a prefill kernel first runs on a request; a config no phase can take fails when the backend is built.
PHASE_OUTCOME = {"prefill": "fails-at-first-request", "decode": "fails-at-graph-capture", "both": "fails-at-startup"}

def worst(outcomes: Iterable[str]) -> Outcome:
    return max(outcomes, key=_RANK.__getitem__, default="runs")  # type: ignore[return-value]


def violation_outcome(v: Violation, rs: RuleSet, engine: str) -> Outcome:
    """When the engine meets this violation (its rule's ``outcome``, else its phase's)."""
    if rs.engines[engine].adapter:  # attnplan's adapter refuses the plan at engine init (policy/api.py require_plan)
        return "fails-at-startup"
    own = v.outcome
    if own is None:
        try:
            own = rs.rule(v.rule).outcome
        except KeyError:  # a violation of no pack rule (the cross-phase page-size check): no outcome of its own
            own = None
    if own in RULE_OUTCOME:
        return RULE_OUTCOME[own]  # type: ignore[return-value]
    return PHASE_OUTCOME.get(v.phase, "fails-at-startup")  # type: ignore[return-value]


# -- the engine's selection ------------------------------------------------------------------------
def _vllm_name_of(backend: str, is_mla: bool) -> str:
    """A FlashInfer-vocabulary choice typed under vLLM, named as vLLM's backend that runs it."""
    from .backend_names import VLLM_TO_ATTNPLAN

    for k, v in VLLM_TO_ATTNPLAN.items():
        if v == backend:
            return k
    return "FLASHINFER_MLA" if is_mla else "FLASHINFER"


def engine_validation(rs: RuleSet, engine: str, name: str, ctx: dict[str, Any], is_mla: bool,
                      version: Optional[str] = None) -> Optional[list[str]]:
    """The reasons the engine's own validation refuses backend ``name`` (backends.yaml engines.<e>.engine_backend,
    each backend's ``refused_when``); [] when it accepts; None when the data does not model that backend."""
    from .engine_rows import _cond

    spec = rs.layer(engine, version) if engine in rs.engines else None
    eb = (spec.engine_backend or {}) if spec is not None else {}
    rows = [r for r in eb.get("mla" if is_mla else "standard", []) if r.get("name") == name]
    if not rows:
        # a backend of the other kind: an MLA backend for a standard model, or the reverse (validate_configuration:
        # "MLA not supported" / "non-MLA not supported")
        if any(r.get("name") == name for r in eb.get("standard" if is_mla else "mla", [])):
            return ["MLA not supported" if is_mla else "non-MLA not supported"]
        return None
    return [r["reason"] for r in rows[0].get("refused_when", []) if _cond(r["when"]).test(ctx)]


def engine_backend_names(rs: RuleSet, engine: str, is_mla: bool, version: Optional[str] = None) -> list[str]:
    """The engine's backends of this kind in its own priority order (backends.yaml engine_backend)."""
    spec = rs.layer(engine, version) if engine in rs.engines else None
    eb = (spec.engine_backend or {}) if spec is not None else {}
    return list(dict.fromkeys(r["name"] for r in eb.get("mla" if is_mla else "standard", [])))


def _selected(a: PlanAnswer, rs: RuleSet) -> tuple[Selected, dict[str, bool], Optional[list[str]]]:
    """(the selection, whether each phase runs FlashInfer, the engine's own refusal reasons of a typed backend
    that is not FlashInfer's: None when there is none to judge)."""
    eng, cfg = a.engine.name, a.config
    layer = rs.engines[eng]
    judged = layer.own_backends_judged_by == "verdict"   # vLLM: its own backends are judged here
    if layer.adapter:
        p, d = a.backends()
        if p is None:
            p = d = cfg.attention_backend
        src = "attnplan: backends.yaml engines.flashinfer.selection (FlashInfer's kernels, attnplan's order)"
        return Selected(prefill=str(p), decode=str(d), runs_flashinfer=True, source=src), \
            {"prefill": True, "decode": True}, None
    typed = cfg.engine_attention_backend if judged else None
    if typed is not None:  # vLLM's --attention-backend naming one of its own non-FlashInfer backends
        src = "vllm/platforms/cuda.py get_attn_backend_cls (the selected backend's validate_configuration)"
        return Selected(prefill=typed, decode=typed, runs_flashinfer=False, source=src), \
            {"prefill": False, "decode": False}, []
    if a.engine_phases:  # an engine that picks per phase (SGLang; vLLM's MLA prefill, picked apart)
        ph = a.engine_phases
        runs = {k: ph[k].runs_flashinfer for k in ("prefill", "decode") if k in ph}
        src = a.engine_backend.source if a.engine_backend is not None else ""
        return Selected(prefill=ph["prefill"].name, decode=ph["decode"].name, runs_flashinfer=all(runs.values()),
                        source=src), runs, None
    eb = a.engine_backend
    if cfg.attention_backend != "auto" or eb is None:  # a FlashInfer backend asked for by name
        name = _vllm_name_of(cfg.attention_backend, cfg.is_mla) if judged else cfg.attention_backend
        src = eb.source if eb is not None else ""
        return Selected(prefill=name, decode=name, runs_flashinfer=True, source=src), \
            {"prefill": True, "decode": True}, None
    return Selected(prefill=eb.name, decode=eb.name, runs_flashinfer=eb.runs_flashinfer, source=eb.source), \
        {"prefill": eb.runs_flashinfer, "decode": eb.runs_flashinfer}, None


def verdict_for(a: PlanAnswer, rs: RuleSet, ctx: Optional[dict[str, Any]] = None) -> Verdict:
    """The verdict of ``a``'s command (no fixes: ``with_fixes`` adds them). ``ctx``: the facts the engine's own
    validation reads (facts_catalog.base_context of the answer's config and node), computed when not given.
    What its message says is data (``Verdict.says``); render/verdict.py writes the sentence."""
    eng = a.engine.name
    engine = f"{eng}=={a.engine.version}" if a.engine.version else eng
    layer = rs.engines[eng]
    says = {"engine": eng, "version": a.engine.version, "display": layer.display, "adapter": layer.adapter}
    sel, runs_fi, _ = _selected(a, rs)
    judged = layer.own_backends_judged_by == "verdict"   # vLLM: its own backends are judged here
    typed = a.config.engine_attention_backend if judged else None
    forced = None
    force = layer.flags.force_flashinfer   # backends.yaml engines.<name>.flags (None: the adapter, FlashInfer only)
    if not any(runs_fi.values()) and force is not None:
        own = a.engine_backend.flashinfer_backend_name if judged and a.engine_backend is not None else None
        forced = f"--attention-backend {own or force['mla' if a.config.is_mla else 'standard']}"

    def verdict(outcome: Outcome, modelled: bool, kind: str, rules: tuple[str, ...] = (), **what: Any) -> Verdict:
        s = VerdictSays(kind=kind, outcome=outcome, **says, **what)
        return Verdict(engine=engine, selected=sel, outcome=outcome, modelled=modelled, rules=rules,
                       says=s,
                       flashinfer_plan="command" if modelled else "if-forced", forced_with=forced)

    # The engine's own refusal of its selection (vLLM's validate_configuration of its pick, or no backend at all).
    if judged and not any(runs_fi.values()):
        if ctx is None:
            from .facts_catalog import base_context
            ctx = base_context(a.config, a.node)
        name = typed or sel.decode
        if name == "none":
            refusals = tuple(BackendRefusal(backend=b, reasons=tuple(r))
                             for b in engine_backend_names(rs, eng, a.config.is_mla, a.engine.version)
                             if (r := engine_validation(rs, eng, b, ctx, a.config.is_mla, a.engine.version)))
            # FlashInfer's own refusal here is an engine rule of the plan beneath: it decides too
            own = tuple(dict.fromkeys(v.rule for v in a.violations if v.layer == "engine"))
            return verdict("fails-at-startup", False, "no-valid-backend", ("vllm.engine-backend", *own),
                           refusals=refusals)
        reasons = engine_validation(rs, eng, name, ctx, a.config.is_mla, a.engine.version)
        if reasons:
            return verdict("fails-at-startup", False, "backend-refused", ("vllm.engine-backend",),
                           backend=name, reasons=tuple(reasons))
        return verdict("runs", False, "engine-backend-runs", backend=name, validated=reasons is not None)

    counted: list[tuple[Violation, str]] = []
    for v in a.violations:
        engine_refusal = v.layer == "engine" and v.outcome is not None  # the engine's own refusal of the command
        phases = ("prefill", "decode") if v.phase == "both" else (v.phase,)
        if engine_refusal or any(runs_fi.get(p, True) for p in phases):
            counted.append((v, violation_outcome(v, rs, eng)))
    # An engine gate (an engine rule with no outcome of its own: vllm.trtllm-gate, vllm.use-trtllm-attention) only
    # steers the engine to its next kernel; where that kernel fails too, the failure is the kernel's, not the gate's.
    def _gate(v: Violation) -> bool:
        try:
            return v.layer == "engine" and v.backend is not None and rs.rule(v.rule).outcome is None
        except KeyError:
            return False
    gated = {(v.phase, v.backend) for v, _ in counted if _gate(v)}
    ran = {v.phase for v, _ in counted if (v.phase, v.backend) not in gated}
    counted = [(v, o) for v, o in counted if not ((v.phase, v.backend) in gated and v.phase in ran)] or counted
    # modelled: FlashInfer runs in the command (a phase the engine runs elsewhere, vLLM's MLA prefill on its own
    # FLASH_ATTN, is named in ``selected`` and not judged here)
    modelled = any(runs_fi.values())
    if not counted:
        if a.ok or not a.violations:
            unmodelled = () if modelled else tuple(p for p, r in runs_fi.items() if not r)
            return verdict("runs", modelled, "runs", prefill=sel.prefill, decode=sel.decode, unmodelled=unmodelled)
        # every violation is on a phase the engine does not run on FlashInfer
        return verdict("runs", False, "runs-unjudged", prefill=sel.prefill, decode=sel.decode)
    outcome = worst(o for _, o in counted)
    rules = tuple(dict.fromkeys(v.rule for v, o in counted if o == outcome))
    first = next(v for v, o in counted if o == outcome)
    return verdict(outcome, modelled, "fails", rules, rule=first.rule, **_detail(first))


def _detail(v: Violation) -> dict[str, Any]:
    """The deciding violation as the verdict's data: its message (a rule pack's reason, formatted, or the engine's
    own words), or its data where render/notes.py writes its message (``Violation.says``)."""
    return {"detail_says": v.says} if v.says is not None and not v.message else {"detail": v.message}


def combine(verdicts: list[Verdict], extra: Iterable[tuple[Violation, Outcome]] = ()) -> Optional[Verdict]:
    """A model's verdict from its attention groups' (the worst group decides; ``extra``: model-level violations
    such as no block size fitting every group, with their outcomes)."""
    if not verdicts:
        return None
    extra = list(extra)
    outcome = worst([v.outcome for v in verdicts] + [o for _, o in extra])
    base = max(verdicts, key=lambda v: _RANK[v.outcome])
    if outcome == base.outcome and (not extra or _RANK[outcome] > max(_RANK[o] for _, o in extra)):
        rules = tuple(dict.fromkeys(r for v in verdicts if v.outcome == outcome for r in v.rules))
        return base.model_copy(update={"rules": rules, "modelled": all(v.modelled for v in verdicts)})
    v0, _ = next((v, o) for v, o in extra if o == outcome)
    name, _, version = base.engine.partition("==")
    says = VerdictSays(kind="model-fails", engine=name, version=version or None, outcome=outcome, rule=v0.rule,
                       display=base.says.display if base.says is not None else None,
                       adapter=base.says.adapter if base.says is not None else False, **_detail(v0))
    return base.model_copy(update={
        "outcome": outcome, "rules": tuple(dict.fromkeys(v.rule for v, o in extra if o == outcome)),
        "message": "", "says": says, "modelled": all(v.modelled for v in verdicts)})


def layout_refusal(engine: str, version: str, error: str, source: str, ruleset: Optional[RuleSet] = None) -> Verdict:
    """The verdict of a parallel layout the engine refuses before it selects anything (heads vs tensor
    parallelism, DCP limits: rule vllm.startup), quoting the engine's own error. The engine's display name is
    the rule set's (``ruleset``, else the shipped one)."""
    if ruleset is None:
        from .shipped import default_ruleset
        ruleset = default_ruleset()
    layer = ruleset.engines.get(engine)
    says = VerdictSays(kind="layout-refused", engine=engine, version=version, outcome="fails-at-startup", detail=error,
                       display=layer.display if layer is not None else None,
                       adapter=layer.adapter if layer is not None else False)
    return Verdict(engine=f"{engine}=={version}", outcome="fails-at-startup", modelled=False,
                   selected=Selected(prefill="none", decode="none", runs_flashinfer=False, source=source),
                   rules=("vllm.startup",), says=says)


def with_group(v: Verdict, group: str) -> Verdict:
    """A failing layer group's verdict, naming its layers (a model of several groups)."""
    if v.says is None:  # a verdict read back from JSON: its text is all there is
        return v.model_copy(update={"message": f"{group}: {v.message}"})
    says = v.says.model_copy(update={"group": group})
    return v.model_copy(update={"says": says, "message": ""})
