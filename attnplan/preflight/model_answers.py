"""A node's answer for a whole model (``ModelRequest``): every attention layer group, judged.

What a node sends (HTTP ``POST /v1/plan`` with ``model``, a Ray task, or the simulation through
the same JSON) is ``attnplan vllm serve --json``'s answer (``attnplan.request.answer_json``). It
counts only when it answers the request that was sent (``request`` echoed), names the engine
asked for, and is coherent: every layer group parses as ``GroupPlan``, each attention group as a
``PlanAnswer`` that ``answers.incoherence`` accepts, and the model's status agrees with its
groups (ok exactly when every attention group is ok and nothing model-wide is violated). The node
passes only when every group passes; the cell names the first failing group and its rule.
"""

from __future__ import annotations

from typing import Any, Optional

from attnplan.policy import EngineRef, Fallback, NodeFacts, PlanAnswer, Suggestion, Violation
from attnplan.model import GroupPlan, KVCacheGroupsPlan, compact_layers

from attnplan.render.verdict import verdict_message

from .answers import BadAnswer, incoherence
from .model import STARTUP, Cell, CommandVerdict, GroupAnswer, LayerGroupCell, ModelAnswer, NamedConfig

# A real model has a handful of groups and at most thousands of layers; more is not an answer.
MAX_GROUPS = 256
MAX_LAYERS = 100_000


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def model_answer(data: Any, nc: NamedConfig) -> ModelAnswer:
    """A decoded answer (HTTP body, Ray task result, simulation) for ``nc``'s request, or ``BadAnswer``."""
    from pydantic import ValidationError

    assert nc.request is not None
    if not isinstance(data, dict):
        raise BadAnswer(f"schema-invalid answer: expected a JSON object, got {type(data).__name__}")
    sent = nc.request.echo()
    got = data.get("request")
    if got != sent:
        if not isinstance(got, dict):
            raise BadAnswer("schema-invalid answer: no request echoed (the node runs an older attnplan: upgrade it)")
        diff = next((k for k in sorted(set(sent) | set(got)) if sent.get(k) != got.get(k)), "?")
        raise BadAnswer(f"answered for another request ({diff}: sent {_short(sent.get(diff))}, got {_short(got.get(diff))})")
    try:
        node = NodeFacts.model_validate(data.get("node"))
    except (ValidationError, ValueError, TypeError) as exc:
        raise BadAnswer(f"schema-invalid answer: node: {str(exc).splitlines()[0][:160]}") from None
    status = data.get("status")
    verdict = None
    if data.get("verdict") is not None:
        try:
            verdict = CommandVerdict.model_validate(data["verdict"])
        except (ValidationError, ValueError, TypeError) as exc:
            raise BadAnswer(f"schema-invalid answer: verdict: {str(exc).splitlines()[0][:160]}") from None
    revision = data.get("rules_revision")
    if not isinstance(revision, str) or len(revision) > 256:
        raise BadAnswer("schema-invalid answer: rules_revision is not a revision")
    if status == "startup_error":
        err = data.get("startup_error")
        if not isinstance(err, str) or not err or data.get("per_rank") is not None:
            raise BadAnswer("schema-invalid answer: startup_error without its message (or with a plan)")
        # The node facts are checked as in any answer: a stand-in rejection carrying them.
        problem = incoherence(PlanAnswer(status="rejected", node=node, config={"head_dim": 128, "num_qo_heads": 1},
                                         violations=(Violation(rule=STARTUP, phase="both", message=err),)))
        if problem:
            raise BadAnswer(f"schema-invalid answer: {problem}")
        return ModelAnswer(status="rejected", node=node, engine=EngineRef(), rules_revision=revision, model_type="",
                           num_layers=0, groups=(), startup_error=err[:2000], verdict=verdict)
    if status not in ("ok", "rejected"):
        raise BadAnswer(f"schema-invalid answer: status {_short(status)}")
    per = data.get("per_rank")
    if not isinstance(per, dict) or not isinstance(per.get("layer_groups"), list) or not per["layer_groups"]:
        raise BadAnswer("schema-invalid answer: per_rank.layer_groups missing (the node runs an older attnplan)")
    if len(per["layer_groups"]) > MAX_GROUPS or sum(len(g.get("layers") or ()) if isinstance(g, dict) else 0
                                                   for g in per["layer_groups"]) > MAX_LAYERS:
        raise BadAnswer(f"schema-invalid answer: more than {MAX_GROUPS} layer groups or {MAX_LAYERS} layers")
    try:
        engine = EngineRef.model_validate(per.get("engine") or {})
        groups_in = [GroupPlan.model_validate({k: v for k, v in g.items() if k != "trace"}) if isinstance(g, dict)
                     else GroupPlan.model_validate(g) for g in per["layer_groups"]]
        top = [Violation.model_validate(v) for v in per.get("violations") or ()]
        kv = KVCacheGroupsPlan.model_validate(per["kv_cache_groups"]) if per.get("kv_cache_groups") else None
        num_layers = int(per.get("num_layers") or 0)
    except (ValidationError, ValueError, TypeError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = ".".join(str(p) for p in first.get("loc", ())) if first else ""
        msg = first.get("msg") if first else str(exc).splitlines()[0][:160]
        raise BadAnswer(f"schema-invalid answer: per_rank: {where}: {msg}".replace(": : ", ": ")) from None
    if nc.engine is not None and not nc.engine.matches(engine):
        raise BadAnswer(f"answered for another engine (sent {str(nc.engine)!r}, got "
                        f"{engine.name + ('==' + engine.version if engine.version else '')!r})")
    groups: list[GroupAnswer] = []
    tagged: list[Violation] = []
    suggestions: list[Suggestion] = []
    fallbacks: list[Fallback] = []
    for i, g in enumerate(groups_in):
        label = compact_layers(g.layers, num_layers or None)
        if g.status == "not_served":
            if g.is_attention:
                raise BadAnswer(f"schema-invalid answer: attention layers {label} not served")
            groups.append(GroupAnswer(i, g.kind, g.layers, label, "not_served", None))
            continue
        if g.config is None:
            raise BadAnswer(f"schema-invalid answer: layer group {i} ({g.kind}) without its config")
        ok = g.status == "ok"
        if ok and (g.prefill is None or g.decode is None or g.kv_cache is None or g.attention is None
                   or g.metadata is None):
            raise BadAnswer(f"schema-invalid answer: layer group {i} ({g.kind}) ok without a plan")
        try:
            plan = ({"attention": g.attention, "prefill": g.prefill, "decode": g.decode, "kv_cache": g.kv_cache,
                     "metadata": g.metadata} if ok else None)
            a = PlanAnswer(status=g.status, node=node, config=g.config, plan=plan, violations=g.violations,
                           suggestions=g.suggestions, fallbacks=g.fallbacks, engine=engine, notes=g.notes,
                           rules_revision=revision)
        except (ValidationError, ValueError, TypeError) as exc:
            raise BadAnswer(f"schema-invalid answer: layer group {i}: {str(exc).splitlines()[0][:160]}") from None
        problem = incoherence(a)
        if problem:
            raise BadAnswer(f"schema-invalid answer: layer group {i} ({g.kind}): {problem}")
        groups.append(GroupAnswer(i, g.kind, g.layers, label, g.status, a))
        tagged += [v.model_copy(update={"group": i}) for v in g.violations]
        suggestions += [s.model_copy(update={"group": i}) for s in g.suggestions]
        fallbacks += [f.model_copy(update={"group": i}) for f in g.fallbacks]
    in_groups = {(v.rule, v.phase, v.backend, v.message) for g in groups_in for v in g.violations}
    model_level = [v.model_copy(update={"group": None}) for v in top if v.group is None
                   and (v.rule, v.phase, v.backend, v.message) not in in_groups]
    attn = [g for g in groups if g.status != "not_served"]
    coherent = bool(attn) and all(g.status == "ok" for g in attn) and not model_level
    if (status == "ok") != coherent:
        raise BadAnswer(f"schema-invalid answer: status {status} but "
                        + ("every layer group ok" if coherent else "a layer group or the model is rejected"))
    notes = tuple(str(n)[:500] for n in (per.get("notes") or ()) if isinstance(n, str))
    return ModelAnswer(status=status, node=node, engine=engine, rules_revision=revision,
                       model_type=str(per.get("model_type") or "")[:64], num_layers=num_layers, groups=tuple(groups),
                       violations=tuple(tagged + model_level), suggestions=tuple(suggestions),
                       fallbacks=tuple(fallbacks), notes=notes, kv_cache_groups=kv, verdict=verdict)


def served_model_answer(sa: Any, node: NodeFacts, revision: str) -> ModelAnswer:
    """The ``ModelAnswer`` of a request planned here (``attnplan.request.plan_request``'s ServeAnswer): the object a
    node's JSON parses into (``model_answer``), built from the planned objects themselves - a simulated node is
    judged exactly as a remote one without a JSON round trip."""
    if sa.startup_error is not None:  # vLLM's own refusal: no plan, the node it was asked for
        return ModelAnswer(status="rejected", node=node, engine=EngineRef(), rules_revision=revision, model_type="",
                           num_layers=0, groups=(), startup_error=sa.startup_error[:2000], verdict=sa.verdict)
    m = sa.model
    groups: list[GroupAnswer] = []
    tagged: list[Violation] = []
    suggestions: list[Suggestion] = []
    fallbacks: list[Fallback] = []
    for i, g in enumerate(m.layer_groups):
        label = compact_layers(g.layers, m.num_layers or None)
        if g.status == "not_served":
            groups.append(GroupAnswer(i, g.kind, g.layers, label, "not_served", None))
            continue
        a = g.answer.model_copy(update={"status": g.status, "plan": g.answer.plan if g.status == "ok" else None,
                                        "violations": g.violations, "trace": ()})
        groups.append(GroupAnswer(i, g.kind, g.layers, label, g.status, a))
        tagged += [v.model_copy(update={"group": i}) for v in g.violations]
        suggestions += [s.model_copy(update={"group": i}) for s in g.suggestions]
        fallbacks += [f.model_copy(update={"group": i}) for f in g.fallbacks]
    one = m.answer()
    notes = one.notes if one is not None else m.all_notes()
    return ModelAnswer(status=m.status, node=m.node, engine=m.engine, rules_revision=m.rules_revision or revision,
                       model_type=m.model_type[:64], num_layers=m.num_layers, groups=tuple(groups),
                       violations=tuple(tagged) + tuple(v.model_copy(update={"group": None}) for v in m.violations),
                       suggestions=tuple(suggestions), fallbacks=tuple(fallbacks),
                       notes=tuple(str(n)[:500] for n in notes), kv_cache_groups=m.kv_cache_groups, verdict=m.verdict)


_SEEN: "dict[tuple[int, bytes], tuple[NamedConfig, ModelAnswer]]" = {}
_SEEN_MAX = 64


def parse_model_answer(body: bytes, nc: NamedConfig) -> ModelAnswer:
    """An HTTP body for ``nc``'s model request (bounded, schema_version checked), or ``BadAnswer``.
    Identical nodes send identical bytes: each distinct body is validated once per request and
    the (immutable) answer shared, as a simulation shares one answer per device."""
    key = (id(nc), body)
    got = _SEEN.get(key)
    if got is not None and got[0] is nc:
        return got[1]
    answer = _parse_model_answer(body, nc)
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.clear()
    _SEEN[key] = (nc, answer)
    return answer


def _parse_model_answer(body: bytes, nc: NamedConfig) -> ModelAnswer:
    from attnplan.policy import ANSWER_SCHEMA_VERSION

    from .answers import answer_object

    data = answer_object(body)
    version = data.get("schema_version")
    if version != ANSWER_SCHEMA_VERSION:
        raise BadAnswer(f"schema-invalid answer: schema_version {str(version)[:20]!r}, "
                        f"this preflight reads {ANSWER_SCHEMA_VERSION!r}")
    return model_answer(data, nc)


def _joined(values: list[Optional[str]]) -> Optional[str]:
    seen = list(dict.fromkeys(v for v in values if v))
    return "|".join(seen) if seen else None


def verdict_cell(i: int, v: Any, plan: Any, rules: list[str], **extra: Any) -> Cell:
    """A cell judged by the command's verdict (policy/verdict.py): pass exactly when the command runs. ``plan``:
    the FlashInfer plan the command runs (None where the engine runs its own backend, or fails)."""
    sel = v.selected
    common = dict(config=i, outcome=v.outcome, modelled=v.modelled,
                  engine_backend=sel.decode if sel.prefill == sel.decode else f"{sel.prefill}/{sel.decode}", **extra)
    if v.outcome == "runs":
        if plan is not None:
            kv = plan.kv_cache
            return Cell(verdict="pass", status="ok", prefill=plan.prefill.backend, decode=plan.decode.backend,
                        kv_layout=kv.layout, page_size=kv.page_size, kv_view_dtype=kv.kv_view_dtype, violations=[],
                        **common)
        return Cell(verdict="pass", status="ok", prefill=sel.prefill, decode=sel.decode, violations=[],
                    reason=None if v.modelled else f"{sel.decode}: not FlashInfer (not modelled)", **common)
    return Cell(verdict="fail", status="rejected", violations=list(v.rules) or rules,
                reason=f"{v.outcome}: {verdict_message(v)}", **common)


def model_cell(i: int, a: ModelAnswer) -> Cell:
    """One node x one model: pass only when every layer group passes."""
    rows = []
    for g in a.groups:
        p = g.answer.plan if g.answer is not None else None
        rows.append(LayerGroupCell(
            index=g.index, kind=g.kind, layers=g.label, count=len(g.layers), status=g.status,
            prefill=p.prefill.backend if p else None, decode=p.decode.backend if p else None,
            violations=list(dict.fromkeys(v.rule for v in g.answer.violations)) if g.answer else []))
    rules = list(dict.fromkeys(v.rule for v in a.violations))
    first = a.first_failure()
    if a.verdict is not None:
        plan = None
        if a.ok and a.verdict.flashinfer_plan == "command":
            plans = [g.answer.plan for g in a.attention_groups if g.answer is not None and g.answer.plan is not None]
            plan = plans[0] if plans else None
        cell = verdict_cell(i, a.verdict, plan, rules, layer_groups=rows,
                            first_failing=(a.verdict.rules[0] if a.verdict.rules else None) if not a.verdict.runs else None)
        if plan is not None:  # every group's kernels, as before
            cell = cell.model_copy(update={"prefill": _joined([g.answer.plan.prefill.backend for g in a.attention_groups
                                                               if g.answer is not None and g.answer.plan is not None]),
                                           "decode": _joined([g.answer.plan.decode.backend for g in a.attention_groups
                                                              if g.answer is not None and g.answer.plan is not None])})
        return cell
    if a.ok:
        plans = [g.answer.plan for g in a.attention_groups if g.answer is not None and g.answer.plan is not None]
        kv = plans[0].kv_cache
        return Cell(config=i, verdict="pass", status="ok", prefill=_joined([p.prefill.backend for p in plans]),
                    decode=_joined([p.decode.backend for p in plans]), kv_layout=kv.layout, page_size=kv.page_size,
                    kv_view_dtype=kv.kv_view_dtype, violations=rules, layer_groups=rows)
    if a.startup_error is not None:
        reason = f"vLLM refuses at startup: {a.startup_error}"
        rules = [STARTUP]
    else:
        where, rule = first if first is not None else ("model", "rejected")
        reason = f"{where}: violates {rule}"
    return Cell(config=i, verdict="fail", status="rejected", violations=rules, reason=reason, layer_groups=rows,
                first_failing=first[1] if first else None)
