"""What an upgrade changes (issue 42 item 3): the same request answered under two releases, compared.

``attnplan upgrade --from vllm==0.32.0 --to vllm==0.33.0 MODEL`` plans the same model (or ``vllm serve`` /
``sglang.launch_server`` line) on the same GPUs twice - once under each release's layer of the rules - and
this module compares the two answers, per deployment (model x GPU) and attention layer group: the
verdict's outcome, the engine's selected backend, the FlashInfer backend and kernel per phase, the page
size, the query dtype, the FlashInfer plan newly refused or accepted, silent coercions and silent-output
changes. Each change names the rules that cause it: the rules one answer involves and the other does
not, and those whose version range covers one release and not the other (``Rule.applies``), with their
``source`` (the engine code or release note they were read from).

Two kinds of side: engine releases (``vllm==0.32.0`` -> ``vllm==0.33.0``, ``sglang==...``; parsed by
``engines.parse_engine``, which refuses an unmodelled release naming the modelled ones), or FlashInfer
releases (``flashinfer==0.6.7`` -> ``flashinfer==0.7.2.post1``): the node's flashinfer (and its cubin
wheel, when the node's was the same release) declared per side, under one engine layer.

Pure functions over answers: the planning happens in the callers' planner (cli/upgrade.py,
rest/upgrade_routes.py), nothing here re-decides a rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Optional, Sequence, get_args

from pydantic import BaseModel, ConfigDict, Field

from .policy.answer import Outcome, PlanAnswer, Verdict
from .policy.engines import EngineSpec, engine_names, parse_engine
from .policy.errors import InvalidInputError
from .policy.facts import Fact, NodeFacts
from .policy.rulepack import RuleSet
from .render.verdict import finish, verdict_message

UPGRADE_SCHEMA_VERSION = "1"

# How bad an outcome is for a deployment, best first (issue 42: "exit 1 when any deployment gets worse"):
# running is best; a failure seen at the first request is found later than one at graph capture or at startup,
# and a silently wrong output is never seen at all. The values are the Verdict model's own (answer.Outcome),
# checked here at import so that a new outcome cannot go unranked.
SEVERITY: tuple[str, ...] = ("runs", "fails-at-startup", "fails-at-graph-capture", "fails-at-first-request",
                             "wrong-output")
assert set(SEVERITY) == set(get_args(Outcome)) and len(SEVERITY) == len(get_args(Outcome)), \
    "attnplan/upgrade.py SEVERITY must rank every answer.Outcome"
_SEV = {o: i for i, o in enumerate(SEVERITY)}


def severity(outcome: Optional[str]) -> int:
    """The rank of an outcome in SEVERITY (no verdict: nothing runs attention, as good as runs)."""
    return _SEV[outcome or "runs"]


def worse(before: Optional[str], after: Optional[str]) -> bool:
    return severity(after) > severity(before)


# -- the two sides -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    """One side of an upgrade: the engine layer the command is planned under and, for a FlashInfer upgrade,
    the flashinfer release declared on the node (None: the node's own)."""

    engine: EngineSpec
    flashinfer: Optional[str] = None

    @property
    def label(self) -> str:
        return f"flashinfer=={self.flashinfer}" if self.flashinfer is not None else str(self.engine)

    def node(self, node: NodeFacts) -> NodeFacts:
        """``node`` as this side runs it. An engine release is installed on the node (``vllm_version``: what
        ``resolve_engine`` reads for an unpinned vllm, so a serve line plans with it too); a FlashInfer release
        replaces the node's flashinfer, and its cubin and jit-cache wheels where the node's were the same release
        (installed together; a node whose wheel already disagreed keeps its own, and is told at plan time). (A declared device's flashinfer is
        then the engine release's pin: engines.release_node, at evaluation.)"""
        if self.flashinfer is not None:
            facts = {"flashinfer_version": Fact.declared(self.flashinfer, "upgrade side")}
            for wheel in ("flashinfer_cubin_version", "flashinfer_jit_cache_version"):  # FlashInfer's companion wheels
                have = getattr(node, wheel, None)
                if have is not None and have.value is not None and str(have.value) == str(node.flashinfer_version.value):
                    facts[wheel] = Fact.declared(self.flashinfer, "upgrade side: installed with flashinfer")
            return node.with_fact(**facts)
        fact = f"{self.engine.name}_version"   # vllm_version, sglang_version: what resolve_engine reads unpinned
        if self.engine.version is not None and fact in NodeFacts.model_fields:
            return node.with_fact(**{fact: Fact.declared(self.engine.version, "upgrade side")})
        return node

    def flashinfer_on(self, node: NodeFacts, rs: RuleSet) -> Optional[str]:
        """The flashinfer release this side runs on ``node``: the declared one of a FlashInfer side, else the
        node's as the engine release sees it (a declared device gets the release's pinned flashinfer:
        engines.release_node), which is what the kernel rules' flashinfer ranges are read against."""
        n = self.node(node)
        if self.flashinfer is None and self.engine.version is not None:
            from .policy.answer import EngineRef
            from .policy.engines import release_node

            n, _ = release_node(rs, EngineRef(name=self.engine.name, version=self.engine.version), n)  # type: ignore[arg-type]
        v = n.flashinfer_version.value
        return str(v) if v is not None else None

    def applies(self, rule: Any, flashinfer: Optional[str] = None) -> bool:
        """Whether ``rule`` speaks for this side (``Rule.applies``) on a node running ``flashinfer`` (a FlashInfer
        side: its own release)."""
        return bool(rule.applies(self.engine.name, self.engine.version, self.flashinfer or flashinfer))


def _version(text: str, field: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        raise InvalidInputError(field, "the release after '==' is not a version (PEP 440), e.g. flashinfer==0.7.2.post1") from None
    return text


def _same_version(a: Optional[str], b: Optional[str]) -> bool:
    from packaging.version import Version

    return a is not None and b is not None and Version(a) == Version(b)


def parse_sides(frm: Any, to: Any, rs: RuleSet, engine: Any = None) -> tuple[Side, Side]:
    """``--from`` and ``--to`` as two sides of one upgrade, or InvalidInputError (exit 2 / 422) naming the field:
    each side an engine release the rules model (``engine==X``: ``parse_engine`` names the modelled ones) of the
    same engine, or both a FlashInfer release (``flashinfer==X``) under ``engine`` (default: the default engine,
    at the node's release); the two releases differ."""
    if not isinstance(frm, str) or not frm.strip():
        raise InvalidInputError("from", "name the release upgraded from, e.g. vllm==0.32.0", engine_names(rs))
    if not isinstance(to, str) or not to.strip():
        raise InvalidInputError("to", "name the release upgraded to, e.g. vllm==0.33.0", engine_names(rs))
    raw = {"from": frm.strip().lower(), "to": to.strip().lower()}
    fi = {k: v.partition("==")[0].strip() == "flashinfer" for k, v in raw.items()}
    if fi["from"] != fi["to"]:
        raise InvalidInputError("to", f"upgrade one thing at a time: {frm!r} and {to!r} name different layers "
                                "(an engine release, or flashinfer==X on both sides)")
    if fi["from"]:
        base = parse_engine(engine, rs)
        if base.name == "flashinfer":
            raise InvalidInputError("engine", "a FlashInfer upgrade is planned under a serving engine "
                                    "(vllm, sglang, vllm==X): give --engine", engine_names(rs))
        versions = {}
        for k, v in raw.items():
            _, sep, ver = v.partition("==")
            if not sep or not ver.strip():
                raise InvalidInputError(k, f"{v!r} names no flashinfer release (e.g. flashinfer==0.7.2.post1)")
            versions[k] = _version(ver.strip(), k)
        sides = Side(base, versions["from"]), Side(base, versions["to"])
    else:
        specs = {}
        for k, v in raw.items():
            try:
                s = parse_engine(v, rs)
            except InvalidInputError as exc:
                raise InvalidInputError(k, exc.message, exc.allowed) from None
            if s.version is None:
                raise InvalidInputError(k, f"{v!r} names no release: give engine==X (e.g. {s.name}=="
                                        f"{(rs.engines[s.name].versions or ['X'])[-1]})", engine_names(rs))
            specs[k] = s
        if specs["from"].name != specs["to"].name:
            raise InvalidInputError("to", f"an upgrade is between two releases of one engine, not "
                                    f"{specs['from'].name} -> {specs['to'].name} (attnplan compare sets engines side by side)")
        sides = Side(specs["from"]), Side(specs["to"])
        if engine is not None and parse_engine(engine, rs).name != specs["from"].name:
            raise InvalidInputError("engine", f"the releases are {specs['from'].name}'s; the engine is named by them "
                                    "(--engine is a FlashInfer upgrade's)", engine_names(rs))
    a, b = sides
    if _same_version(a.flashinfer, b.flashinfer) or (a.flashinfer is None and _same_version(a.engine.version, b.engine.version)):
        raise InvalidInputError("to", f"--from and --to name the same release ({a.label}): nothing to compare")
    return sides


# -- the report ----------------------------------------------------------------------------------
class RuleRef(BaseModel):
    """A rule a change is caused by: where it applies and where it was read from."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str = ""
    source: str = Field("", description="the engine code, kernel source or release note the rule was read from")
    applies_before: bool = Field(description="the rule speaks for the release upgraded from")
    applies_after: bool = Field(description="the rule speaks for the release upgraded to")
    range: Optional[str] = Field(None, description="the rule's version range (vllm / versions / flashinfer)")
    fixed_in: Optional[str] = None


Effect = Literal["newly-refused", "newly-accepted", "silent-output", "worse", "better", "changed"]
What = Literal["outcome", "selected", "flashinfer-backend", "kernel", "page-size", "query-dtype", "plan", "coercion",
               "kv-block", "note"]


class Change(BaseModel):
    model_config = ConfigDict(frozen=True)

    what: What
    phase: Optional[Literal["prefill", "decode"]] = None
    before: Any = None
    after: Any = None
    effect: Effect = "changed"
    rules: tuple[RuleRef, ...] = ()
    message: str = ""


class GroupDiff(BaseModel):
    model_config = ConfigDict(frozen=True)

    group: str = Field(description="the attention layer group (kind and layers), or 'all layers'")
    flashinfer_plan: Optional[Literal["command", "if-forced"]] = Field(
        None, description="after the upgrade, the FlashInfer plan compared is what the command runs, or what it would "
                          "run if forced (the engine runs its own kernels: verdict.flashinfer_plan)")
    outcome_before: Optional[str] = None
    outcome_after: Optional[str] = None
    changes: tuple[Change, ...] = ()


class DeploymentDiff(BaseModel):
    """One deployment (a model or line on one GPU / node): its verdict under each release and what changed."""

    model_config = ConfigDict(frozen=True)

    deployment: str = Field(description="what is deployed (model or line)")
    device: str = Field(description="the GPU or node it is deployed on")
    capability: Optional[str] = None
    flashinfer_before: Optional[str] = Field(None, description="the flashinfer release the node runs before (the "
                                                               "declared one, the release's pin on a declared device, "
                                                               "or the node's own)")
    flashinfer_after: Optional[str] = None
    before: Optional[Verdict] = None
    after: Optional[Verdict] = None
    worse: bool = Field(description="the deployment's outcome, or one of its layer groups', ranks worse after (SEVERITY)")
    changes: tuple[Change, ...] = Field((), description="the deployment's own changes (its verdict, its KV block)")
    groups: tuple[GroupDiff, ...] = ()
    error: Optional[str] = Field(None, description="a side that could not be planned (the engine's own refusal of the input)")

    @property
    def changed(self) -> bool:
        return bool(self.changes) or any(g.changes for g in self.groups)


class UpgradeReport(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    schema_version: str = UPGRADE_SCHEMA_VERSION
    from_: str = Field(alias="from", description="the release upgraded from")
    to: str
    engine: str = Field(description="the engine layer both sides plan under")
    severity: tuple[str, ...] = Field(SEVERITY, description="outcomes best first: 'worse' ranks later here")
    rules_changed: tuple[RuleRef, ...] = Field((), description="every rule that speaks for one release and not the other "
                                                              "(on some deployment's node: a kernel rule's flashinfer "
                                                              "range is read against the flashinfer each side runs)")
    deployments: tuple[DeploymentDiff, ...] = ()
    rules_revision: str = ""

    @property
    def worse(self) -> bool:
        return any(d.worse for d in self.deployments)

    def exit_code(self) -> int:
        """0: no deployment gets worse; 1: some deployment gets worse (its outcome, or a layer group's)."""
        return 1 if self.worse else 0

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        data["worse"] = self.worse
        for d, dd in zip(data["deployments"], self.deployments):
            d["changed"] = dd.changed
        return data


# -- the rules that differ --------------------------------------------------------------------------
def _range(rule: Any) -> Optional[str]:
    return rule.versions or rule.vllm or rule.flashinfer


def rule_ref(rs: RuleSet, rule_id: str, a: Side, b: Side, fa: Optional[str] = None, fb: Optional[str] = None) -> RuleRef:
    """``rule_id`` with where it applies: side ``a`` on flashinfer ``fa``, side ``b`` on ``fb``."""
    try:
        r = rs.rule(rule_id)
    except KeyError:  # a check of no pack rule (plan_model's cross-group page size): it applies wherever it runs
        return RuleRef(id=rule_id, applies_before=True, applies_after=True)
    return RuleRef(id=r.id, title=r.title, source=r.source, applies_before=a.applies(r, fa), applies_after=b.applies(r, fb),
                   range=_range(r), fixed_in=r.fixed_in)


def rules_changed(rs: RuleSet, a: Side, b: Side, fa: Optional[str] = None, fb: Optional[str] = None) -> tuple[RuleRef, ...]:
    """Every rule of the set that speaks for one side and not the other (its version range), each side on the
    flashinfer it runs (``fa``, ``fb``: Side.flashinfer_on; None: a FlashInfer range does not narrow it)."""
    return tuple(rule_ref(rs, r.id, a, b, fa, fb) for r in rs.rules if a.applies(r, fa) != b.applies(r, fb))


def involved(a: Optional[PlanAnswer]) -> dict[str, set[str]]:
    """The rules an answer involves, each with the phases it touches: its verdict's, its violations', its
    fallbacks', its coercions', and every failing check of its trace."""
    out: dict[str, set[str]] = {}

    def add(rule: str, phase: Optional[str]) -> None:
        out.setdefault(rule, set()).update(("prefill", "decode") if phase in (None, "both") else (phase,))

    if a is None:
        return out
    if a.verdict is not None:
        for r in a.verdict.rules:
            add(r, None)
    for v in a.violations:
        add(v.rule, v.phase)
    for f in a.fallbacks:
        for r in f.rules:
            add(r, f.phase)
    for c in a.coercions:
        add(c.rule, None)
    for t in a.trace:
        if t.verdict == "fail":
            add(t.rule, t.phase)
    return out


def _causes(rs: RuleSet, a: Side, b: Side, before: dict[str, set[str]], after: dict[str, set[str]],
            changed: set[str], phase: Optional[str], fa: Optional[str] = None, fb: Optional[str] = None
            ) -> tuple[RuleRef, ...]:
    """The rules behind a change: involved by one answer and not the other, or involved and of differing range;
    for a phase's change, those touching that phase first (all of them when none does)."""
    ids = (set(before) ^ set(after)) | ((set(before) | set(after)) & changed)
    if phase is not None:
        touching = {r for r in ids if phase in before.get(r, set()) | after.get(r, set())}
        ids = touching or ids
    ordered = [r for r in (*before, *after) if r in ids]
    return tuple(rule_ref(rs, r, a, b, fa, fb) for r in dict.fromkeys(ordered))


# -- comparing answers ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupView:
    """One attention layer group of a side's answer (``answer`` None: the group was not planned)."""

    label: str
    answer: Optional[PlanAnswer]
    verdict: Optional[Verdict]


@dataclass(frozen=True)
class DeploymentView:
    """A side's answer for one deployment, as compared: the deployment's verdict, its groups, its KV block."""

    verdict: Optional[Verdict]
    groups: tuple[GroupView, ...] = ()
    block_size: Optional[int] = None


def view(answer: Any) -> DeploymentView:
    """A ``ModelPlanAnswer``, a ``PlanAnswer``, or a line's answer (``ServeAnswer`` / ``LaunchAnswer``: a
    ``verdict``, an optional ``model`` and ``answer``) as a DeploymentView."""
    from .model.layers import compact_layers
    from .model.plan import ModelPlanAnswer

    if isinstance(answer, PlanAnswer):
        return DeploymentView(answer.verdict, (GroupView("all layers", answer, answer.verdict),))
    if isinstance(answer, ModelPlanAnswer):
        groups = tuple(GroupView(f"{g.kind} layers {compact_layers(g.layers, answer.num_layers)}", g.answer,
                                 g.answer.verdict if g.answer is not None else None)
                       for g in answer.attention_groups)
        kv = answer.kv_cache_groups
        return DeploymentView(answer.verdict, groups, kv.block_size if kv is not None else None)
    # a line's answer (vllm/serve.py ServeAnswer, sglang/launch.py LaunchAnswer), or a node's answer for a model
    # as preflight reads it (preflight/model.py ModelAnswer: groups of GroupAnswer, each labelled compact)
    if getattr(answer, "startup_error", None):
        return DeploymentView(answer.verdict)
    if hasattr(answer, "groups") and hasattr(answer, "num_layers"):
        kv = getattr(answer, "kv_cache_groups", None)
        return DeploymentView(answer.verdict, tuple(
            GroupView(f"{g.kind} layers {g.label}", g.answer, g.answer.verdict if g.answer is not None else None)
            for g in answer.groups if g.status != "not_served"), kv.block_size if kv is not None else None)
    model = getattr(answer, "model", None)
    if model is not None:
        return DeploymentView(answer.verdict, view(model).groups, view(model).block_size)
    one = getattr(answer, "answer", None)
    return DeploymentView(answer.verdict, (GroupView("all layers", one, one.verdict if one is not None else None),)
                          if one is not None else ())


def _effect(before: Optional[str], after: Optional[str]) -> Effect:
    b, a = before or "runs", after or "runs"
    if "wrong-output" in (a, b):
        return "silent-output"
    if b == "runs":
        return "newly-refused"
    if a == "runs":
        return "newly-accepted"
    return "worse" if worse(b, a) else "better"


def _phase_facts(a: Optional[PlanAnswer], phase: str) -> dict[str, Any]:
    pp = getattr(a.plan, phase) if a is not None and a.plan is not None else None
    sel = getattr(a.verdict.selected, phase) if a is not None and a.verdict is not None else None
    return {"selected": sel,
            "flashinfer-backend": pp.backend if pp is not None else None,
            "kernel": {"kernel": pp.kernel, "table": pp.kernel_table, "cubins": [c.file for c in pp.cubins]}
            if pp is not None else None,
            "query-dtype": pp.query_dtype if pp is not None else None}


def _loads(k: Any) -> Any:
    return (k.get("kernel"), tuple(k.get("cubins") or ())) if isinstance(k, dict) else k


def _coercions(a: Optional[PlanAnswer]) -> dict[str, tuple[Any, Any, str]]:
    return {c.field: (c.given, c.runs, c.rule) for c in (a.coercions if a is not None else ())}


def diff_group(rs: RuleSet, a: Side, b: Side, before: GroupView, after: GroupView, changed: set[str],
               fa: Optional[str] = None, fb: Optional[str] = None) -> GroupDiff:
    """What changed in one attention layer group between the two sides (on flashinfer ``fa`` and ``fb``)."""
    inv_b, inv_a = involved(before.answer), involved(after.answer)

    def causes(phase: Optional[str]) -> tuple[RuleRef, ...]:
        return _causes(rs, a, b, inv_b, inv_a, changed, phase, fa, fb)

    out: list[Change] = []
    ob = before.verdict.outcome if before.verdict is not None else None
    oa = after.verdict.outcome if after.verdict is not None else None
    if ob != oa:
        msg = verdict_message(after.verdict) if after.verdict is not None and oa != "runs" else \
            (verdict_message(before.verdict) if before.verdict is not None else "")
        out.append(Change(what="outcome", before=ob, after=oa, effect=_effect(ob, oa), rules=causes(None),
                          message=msg))
    # a plan refused after says so once ("plan": newly refused), not as every phase fact gone; a plan accepted
    # after (or changed) shows what now runs
    planned = after.answer is not None and after.answer.plan is not None
    for phase in ("prefill", "decode"):
        fb, fa = _phase_facts(before.answer, phase), _phase_facts(after.answer, phase)
        for what in ("selected", "flashinfer-backend", "kernel", "query-dtype"):
            # a kernel changes when what loads changes (function, cubins), not the provenance that decided it
            same = _loads(fb[what]) == _loads(fa[what]) if what == "kernel" else fb[what] == fa[what]
            if not same and (planned or what == "selected"):
                out.append(Change(what=what, phase=phase, before=fb[what], after=fa[what],  # type: ignore[arg-type]
                                  rules=causes(phase)))
    pb = before.answer.plan.kv_cache.page_size if before.answer is not None and before.answer.plan is not None else None
    pa = after.answer.plan.kv_cache.page_size if after.answer is not None and after.answer.plan is not None else None
    if pb != pa and planned:
        out.append(Change(what="page-size", before=pb, after=pa, rules=causes(None)))
    sb = before.answer.status if before.answer is not None else None
    sa = after.answer.status if after.answer is not None else None
    if sb != sa:
        # the FlashInfer plan beneath the verdict: newly refused or newly accepted by the kernel and engine rules
        eff: Effect = "newly-refused" if sa == "rejected" else "newly-accepted" if sb == "rejected" else "changed"
        out.append(Change(what="plan", before=sb, after=sa, effect=eff, rules=causes(None)))
    cb, ca = _coercions(before.answer), _coercions(after.answer)
    for f in dict.fromkeys([*cb, *ca]):
        if cb.get(f, (None, None))[:2] != ca.get(f, (None, None))[:2]:
            out.append(Change(what="coercion", before=cb[f][1] if f in cb else None, after=ca[f][1] if f in ca else None,
                              rules=causes(None), message=f"{f}: the value the engine runs in place of the given one"))
    v = after.verdict or before.verdict
    nb = before.answer.notes if before.answer is not None else ()
    na = after.answer.notes if after.answer is not None else ()
    for n in nb if planned else ():
        if n not in na:
            out.append(Change(what="note", before=n, after=None, message="a note of the answer before, gone after"))
    for n in na:
        if n not in nb:
            out.append(Change(what="note", before=None, after=n, message="a note of the answer after, new"))
    return GroupDiff(group=after.label or before.label, flashinfer_plan=v.flashinfer_plan if v is not None else None,
                     outcome_before=ob, outcome_after=oa, changes=tuple(out))


def diff_deployment(rs: RuleSet, a: Side, b: Side, before: Any, after: Any, *, deployment: str, device: str,
                    capability: Optional[str] = None, fa: Optional[str] = None, fb: Optional[str] = None) -> DeploymentDiff:
    """The two answers of one deployment (a ModelPlanAnswer, PlanAnswer or line answer per side) compared; ``fa``
    and ``fb``: the flashinfer each side runs on the deployment's node (Side.flashinfer_on)."""
    changed = {r.id for r in rules_changed(rs, a, b, fa, fb)}
    vb, va = view(before), view(after)
    ob = vb.verdict.outcome if vb.verdict is not None else None
    oa = va.verdict.outcome if va.verdict is not None else None
    out: list[Change] = []
    if ob != oa:
        rules = tuple(dict.fromkeys((*(vb.verdict.rules if vb.verdict else ()), *(va.verdict.rules if va.verdict else ()))))
        refs = tuple(rule_ref(rs, r, a, b, fa, fb) for r in rules
                     if r in changed or r not in (vb.verdict.rules if vb.verdict else ())
                     or r not in (va.verdict.rules if va.verdict else ()))
        msg = verdict_message(va.verdict) if va.verdict is not None and oa != "runs" else \
            (verdict_message(vb.verdict) if vb.verdict else "")
        out.append(Change(what="outcome", before=ob, after=oa, effect=_effect(ob, oa), rules=refs, message=msg))
    if vb.block_size != va.block_size and None not in (vb.block_size, va.block_size):
        out.append(Change(what="kv-block", before=vb.block_size, after=va.block_size,
                          message="the KV block size shared by every layer group (vLLM cache_config.block_size)"))
    groups: list[GroupDiff] = []
    after_by = {g.label: g for g in va.groups}
    before_by = {g.label: g for g in vb.groups}
    for label in dict.fromkeys([*before_by, *after_by]):
        gb = before_by.get(label, GroupView(label, None, None))
        ga = after_by.get(label, GroupView(label, None, None))
        groups.append(diff_group(rs, a, b, gb, ga, changed, fa, fb))
    if len(groups) > 1:
        # a note every group gains or loses (the release's FlashInfer pin, say) is the deployment's, said once
        common = [c for c in groups[0].changes if c.what == "note" and all(c in g.changes for g in groups[1:])]
        if common:
            out += common
            groups = [g.model_copy(update={"changes": tuple(c for c in g.changes if c not in common)}) for g in groups]
    bad = worse(ob, oa) or any(worse(g.outcome_before, g.outcome_after) for g in groups)
    return DeploymentDiff(deployment=deployment, device=device, capability=capability, flashinfer_before=fa,
                          flashinfer_after=fb, before=finish(vb.verdict), after=finish(va.verdict), worse=bad, changes=tuple(out),
                          groups=tuple(groups))


def model_planner(model: Any, rs: RuleSet, *, overrides: Optional[Mapping[str, Any]] = None,
                  tensor_parallel_size: int = 1) -> "Planner":
    """A whole model (config.json dict or path) planned as ``attnplan plan --model M --engine E`` plans it
    (``plan_model``: every attention layer group, one KV block for all), under each side's engine layer."""
    from .model.plan import plan_model

    def plan(node: NodeFacts, side: Side) -> Any:
        return plan_model(model, node, overrides=overrides, ruleset=rs, engine=side.engine,
                          tensor_parallel_size=tensor_parallel_size)

    return plan


# -- one call over deployments ---------------------------------------------------------------------
# A planner answers one deployment on one node under one side: (node as the side runs it, side) -> answer.
Planner = Callable[[NodeFacts, Side], Any]


@dataclass(frozen=True)
class Target:
    """A node a deployment runs on: its label (the device or host) and its facts."""

    label: str
    node: NodeFacts


def upgrade(rs: RuleSet, a: Side, b: Side, deployments: Mapping[str, Planner], targets: Sequence[Target]) -> UpgradeReport:
    """Every deployment on every target planned under each side (``planner(side.node(node), side)``) and compared.
    A side the planner refuses (InvalidInputError: the input is bad under that release) is the deployment's
    ``error``; when both sides refuse the same way the input is bad for both, and the error is raised."""
    out: list[DeploymentDiff] = []
    changed: dict[str, RuleRef] = {}
    for name, planner in deployments.items():
        for t in targets:
            fa, fb = a.flashinfer_on(t.node, rs), b.flashinfer_on(t.node, rs)
            for r in rules_changed(rs, a, b, fa, fb):
                changed.setdefault(r.id, r)
            answers: list[Any] = []
            errors: list[Optional[InvalidInputError]] = []
            for side in (a, b):
                try:
                    answers.append(planner(side.node(t.node), side))
                    errors.append(None)
                except InvalidInputError as exc:
                    answers.append(None)
                    errors.append(exc)
            first = errors[0]
            if first is not None and errors[1] is not None:
                raise first
            if any(errors):
                which = a if errors[0] is not None else b
                err = errors[0] or errors[1]
                out.append(DeploymentDiff(deployment=name, device=t.label, capability=t.node.capability_str,
                                          flashinfer_before=fa, flashinfer_after=fb,
                                          before=finish(_verdict(answers[0])), after=finish(_verdict(answers[1])),
                                          worse=errors[1] is not None, error=f"{which.label}: {err}"))
                continue
            out.append(diff_deployment(rs, a, b, answers[0], answers[1], deployment=name, device=t.label,
                                       capability=t.node.capability_str, fa=fa, fb=fb))
    return UpgradeReport.model_validate({
        "from": a.label, "to": b.label, "engine": str(a.engine) if a.flashinfer is not None else a.engine.name,
        "rules_changed": tuple(changed.values()), "deployments": tuple(out), "rules_revision": rs.revision})


def _verdict(answer: Any) -> Optional[Verdict]:
    return view(answer).verdict if answer is not None else None


def changes_text(d: DeploymentDiff) -> Iterable[str]:
    """One line per change of a deployment, for people (cli/upgrade.py prints them under its table): the rules
    by id (their sources are listed once, and in --json); a change every layer group has, once."""
    def rules(c: Change) -> str:
        if not c.rules:
            return ""
        parts = []
        for r in c.rules:
            where = ("" if r.applies_before and r.applies_after else
                     " before only" if r.applies_before else " after only" if r.applies_after else "")
            parts.append(f"{r.id}{where}")
        return "  [" + ", ".join(parts) + "]"

    def one(c: Change, where: str) -> str:
        ph = f" {c.phase}" if c.phase else ""
        eff = "" if c.effect == "changed" else f" ({c.effect})"
        return f"{where}{c.what}{ph}: {_short(c.before)} -> {_short(c.after)}{eff}{rules(c)}"

    def key(c: Change) -> tuple[Any, ...]:
        return (c.what, c.phase, repr(c.before), repr(c.after))

    if d.error:
        yield f"error: {d.error}"
    for c in d.changes:
        yield one(c, "")
        if c.message and c.what == "outcome" and c.after != "runs":
            yield f"  {c.message}"
    top = {key(c) for c in d.changes if c.what == "outcome"}
    many = len(d.groups) > 1
    common = [c for c in d.groups[0].changes if all(key(c) in {key(x) for x in g.changes} for g in d.groups[1:])] \
        if many else []
    shared = {key(c) for c in common}
    for c in common:
        if key(c) not in top:
            yield one(c, "[every layer group] ")
    for g in d.groups:
        for c in g.changes:
            if key(c) in top or key(c) in shared:
                continue  # said for the deployment, or for every group at once
            yield one(c, f"[{g.group}] " if many else "")


def _short(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, dict) and "kernel" in v:
        n = len(v.get("cubins", ()))
        extra = ", ".join(x for x in ((f"{n} cubin{'s' if n > 1 else ''}" if n else ""), v.get("table") or "") if x)
        return f"{v['kernel']}" + (f" ({extra})" if extra else "")
    return str(v)
