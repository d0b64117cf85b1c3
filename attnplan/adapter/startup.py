"""The startup check (docs/contract.md, Errors and exit codes): does the plan still hold on the device it is about to run on?

The adapter never re-decides what the rules decide. It re-reads the live node's facts, runs the
same rules over them (``policy.evaluate``) and compares the result with the plan it was given.
Any difference is a ``PlanMismatchError`` that names the rules, raised before a byte of device
memory is allocated or a kernel compiled.
"""

from __future__ import annotations

from typing import Optional

from attnplan.errors import StartupMismatchError
from attnplan.policy import (EngineSpec, NodeFacts, PlanAnswer, RuleSet, UnsupportedConfigurationError, Violation, evaluate)
from attnplan.node import probe_node
from attnplan.render.verdict import finish, verdict_message

# Facts a plan depends on, shown side by side when the plan does not hold here (the rules decide;
# this only tells the operator what changed between planning and startup).
COMPARED_FACTS = ("gpu_name", "capability", "flashinfer_version", "flashinfer_cubin_version",
                  "cubin_dir_has_cubins", "artifactory_reachable", "batch_invariant_env")


def fact_diffs(planned: NodeFacts, live: NodeFacts) -> list[str]:
    out = []
    for name in COMPARED_FACTS:
        a, b = planned.value(name), live.value(name)
        if a != b:
            if name == "capability":
                a, b = planned.capability_str, live.capability_str
            out.append(f"{name}: plan {a!r}, here {b!r} ({getattr(live, name).source.value})")
    return out


def engine_of(answer: PlanAnswer) -> EngineSpec:
    """The engine layer the answer was made for, as a value ``evaluate`` takes: the startup check
    re-runs the same layers (a kernel-truth plan is not held to vLLM's gates, nor the reverse)."""
    return EngineSpec.of(answer.engine)


def _phase_violations(answer: PlanAnswer, node: NodeFacts, phase: str, backend: str,
                      ruleset: Optional[RuleSet], engine: EngineSpec) -> list[Violation]:
    """Every rule that refuses ``backend`` for ``phase`` on ``node``: the rules, forced to that
    backend (docs/contract.md, Selection: a forced backend that violates a rule is a rejection naming the rules)."""
    forced = evaluate(answer.config.replace(attention_backend=backend), node, ruleset, trace=False, suggest=False,
                      engine=engine)
    return [v for v in forced.violations if v.phase == phase and v.backend == backend]


def refuse_foreign_engine_backend(answer: PlanAnswer) -> None:
    """An engine whose own pick runs no FlashInfer kernel in a phase (SGLang's fa3 is sgl-kernel's
    FlashAttention-3; triton, fa4, flashmla...): the plan there is only what the engine would run when
    asked for FlashInfer, so the adapter refuses it by the engine backend's name (issue 26)."""
    phases = answer.engine_phases or {}
    off = [(ph, eb) for ph, eb in phases.items() if not eb.runs_flashinfer]
    if not off:
        return
    rule = f"{answer.engine.name}.not-flashinfer"
    vs = tuple(Violation(rule=rule, phase=ph, backend=eb.name, fact="engine_backend", observed=eb.name,  # type: ignore[arg-type]
                         required="an engine backend that runs FlashInfer kernels", layer="engine", outcome="startup",
                         message=f"{answer.engine.name} runs {eb.name} for {ph} ({finish(eb).note}): the adapter runs FlashInfer "
                                 f"plans only; launch with the engine's FlashInfer backend (e.g. --attention-backend flashinfer)")
               for ph, eb in off)
    raise UnsupportedConfigurationError(answer.model_copy(update={"status": "rejected", "plan": None, "violations": vs}))


def check_plan(answer: PlanAnswer, node: Optional[NodeFacts] = None, *, ruleset: Optional[RuleSet] = None,
               strict_selection: bool = True) -> PlanAnswer:
    """The live answer when ``answer``'s plan holds on ``node`` (default: this machine, probed
    now); else ``PlanMismatchError`` naming every rule that refuses it.

    ``strict_selection``: also refuse a plan whose backends are valid here but are not the ones
    the rules pick here (a plan made for another GPU); off, such a plan may run.
    """
    if answer.plan is None:
        raise UnsupportedConfigurationError(answer, verdict_message(answer.verdict) if answer.verdict is not None else None)
    refuse_foreign_engine_backend(answer)
    live_node = node if node is not None else probe_node()
    engine = engine_of(answer)  # the layer the plan was made for, carried as a value
    live = evaluate(answer.config, live_node, ruleset, engine=engine)
    plan = answer.plan

    violations: list[Violation] = [v for v in live.violations if v.phase == "both" and v.backend is None]
    for phase in ("prefill", "decode"):
        backend = getattr(plan, phase).backend
        for v in _phase_violations(answer, live_node, phase, backend, ruleset, engine):
            if v not in violations:
                violations.append(v)

    if not violations and live.plan is not None:
        for phase in ("prefill", "decode"):
            planned_b, live_b = getattr(plan, phase).backend, getattr(live.plan, phase).backend
            if planned_b != live_b and strict_selection:
                violations.append(Violation(
                    rule="selection", phase=phase, backend=planned_b, fact="backend", observed=planned_b,
                    required=live_b,
                    message=f"the plan runs {phase} on {planned_b}, but on this node the rules choose {live_b} "
                            f"(the plan was made for other facts); re-plan here"))
        if not violations and live.backends() == answer.backends() and live.plan != plan:
            differing = [f for f in ("prefill", "decode", "kv_cache", "metadata")
                         if getattr(live.plan, f) != getattr(plan, f)]
            violations.append(Violation(
                rule="plan", phase="both", fact="plan", observed=", ".join(differing),
                required="the plan the rules derive on this node",
                message=f"the plan's {', '.join(differing)} differ from what the rules derive here "
                        f"(rules revision plan {answer.rules_revision[:12] or '?'}, here {live.rules_revision[:12]}); re-plan here"))

    if violations:
        rejected = PlanAnswer(status="rejected", node=live_node, config=answer.config, plan=None,
                              violations=tuple(violations), suggestions=live.suggestions,
                              notes=live.notes, notes_says=live.notes_says, trace=live.trace,
                              rules_revision=live.rules_revision)
        raise StartupMismatchError(rejected, fact_diffs(answer.node, live_node), answer)
    return live
