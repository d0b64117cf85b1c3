"""The verdict's sentence (docs/contract.md "The verdict"): written here from the data the planner puts in
``Verdict.says`` (policy/answer.py VerdictSays); the planner decides, this module only words it.

``verdict_message`` is the one wording of every verdict kind; ``finish`` fills ``Verdict.message`` (the JSON
contract's text) on an answer, a model answer or anything carrying verdicts, for the surfaces that finish an
answer above the planner (attnplan/lines.py). A verdict read back from JSON (a preflight HTTP node) carries no
``says``: its ``message`` is already the text.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from attnplan.policy.answer import Verdict, VerdictSays

# The engine as the user knows it; attnplan's own adapter (--engine flashinfer) has no release of its own.
WHO = {"vllm": "vLLM", "sglang": "SGLang", "flashinfer": "attnplan's FlashInfer adapter"}
# An outcome as a verb phrase after the engine's name.
OUTCOME_WORDS = {"fails-at-startup": "fails at startup",
                 "fails-at-graph-capture": "fails at CUDA-graph capture (startup)",
                 "fails-at-first-request": "fails at the first request",
                 "wrong-output": "runs but computes wrong output", "runs": "runs"}


def who(s: VerdictSays) -> str:
    """``vLLM 0.33.0``, ``SGLang 0.5.23``, ``attnplan's FlashInfer adapter``."""
    version = s.version if s.engine != "flashinfer" else None
    return " ".join(x for x in (WHO.get(s.engine, s.engine), version) if x)


def _pair(prefill: Optional[str], decode: Optional[str]) -> str:
    return str(prefill) if prefill == decode else f"{prefill} / {decode}"


def _no_valid_backend(s: VerdictSays) -> str:
    why = "; ".join(f"{r.backend}: {', '.join(r.reasons)}" for r in s.refusals)
    return f"{who(s)} refuses at startup: No valid attention backend found ({why})"


def _backend_refused(s: VerdictSays) -> str:
    # vLLM's own words (vllm/attention/selector.py: "Selected backend ... Reason: [...]", the reasons as a list)
    return (f"{who(s)} refuses at startup: Selected backend {s.backend} is not valid for this configuration. "
            f"Reason: {list(s.reasons)}")


def _engine_backend_runs(s: VerdictSays) -> str:
    checked = "its own validation passes" if s.validated else "its validation is not modelled"
    return f"{who(s)} runs {s.backend} here ({checked}; attnplan does not model its kernels)"


def _runs(s: VerdictSays) -> str:
    where = (" (" + " and ".join(s.unmodelled) + " on the engine's own kernels, not modelled)") if s.unmodelled else ""
    return f"{who(s)} runs {_pair(s.prefill, s.decode)} here{where}"


def _runs_unjudged(s: VerdictSays) -> str:
    return (f"{who(s)} runs {s.prefill} / {s.decode} here; the FlashInfer phases it runs are valid; the others run "
            f"on the engine's own kernels (not modelled)")


def _fails(s: VerdictSays) -> str:
    # an engine's own refusal already says who refuses and when ("SGLang 0.5.23 refuses at startup: ...")
    detail = s.detail or ""
    if detail.startswith(who(s)):
        return f"[{s.rule}] {detail}"
    return f"{who(s)} {OUTCOME_WORDS[s.outcome]}: [{s.rule}] {detail}"


def _model_fails(s: VerdictSays) -> str:
    engine = f"{s.engine}=={s.version}" if s.version else s.engine
    return f"{engine}: the model {OUTCOME_WORDS[s.outcome]}: [{s.rule}] {s.detail}"


def _layout_refused(s: VerdictSays) -> str:
    return f"{WHO.get(s.engine, 'vLLM')} {s.version} refuses at startup: {s.detail}"


_SAY: dict[str, Callable[[VerdictSays], str]] = {
    "no-valid-backend": _no_valid_backend, "backend-refused": _backend_refused,
    "engine-backend-runs": _engine_backend_runs, "runs": _runs, "runs-unjudged": _runs_unjudged,
    "fails": _fails, "model-fails": _model_fails, "layout-refused": _layout_refused,
}


def says_message(s: VerdictSays) -> str:
    """The sentence for one verdict's data (a failing layer group named first on a model of several)."""
    text = _SAY[s.kind](s)
    return f"{s.group}: {text}" if s.group else text


def verdict_message(v: Verdict) -> str:
    """The verdict's sentence: written from its data, or its ``message`` as read back from JSON."""
    return says_message(v.says) if v.says is not None else v.message


def finish_verdict(v: Optional[Verdict]) -> Optional[Verdict]:
    """``v`` with ``message`` written from its data (unchanged when it carries none, or already says it)."""
    if v is None or v.says is None:
        return v
    text = says_message(v.says)
    return v if text == v.message else v.model_copy(update={"message": text})


def finish(answer: Any) -> Any:
    """A verdict, or an answer (PlanAnswer, ModelPlanAnswer, or any pydantic answer with ``verdict``,
    ``layer_groups`` or ``answer``) with every verdict's ``message`` written here; answers are frozen, so a copy where it changes."""
    if isinstance(answer, Verdict):
        return finish_verdict(answer)
    if answer is None or not hasattr(answer, "model_copy"):
        return answer
    update: dict[str, Any] = {}
    v = getattr(answer, "verdict", None)
    if isinstance(v, Verdict):
        done = finish_verdict(v)
        if done is not v:
            update["verdict"] = done
    inner = getattr(answer, "answer", None)
    if inner is not None and hasattr(inner, "model_copy"):
        done_inner = finish(inner)
        if done_inner is not inner:
            update["answer"] = done_inner
    groups = getattr(answer, "layer_groups", None)
    if isinstance(groups, tuple) and groups and hasattr(groups[0], "model_copy"):
        done_groups = tuple(finish(g) for g in groups)
        if any(a is not b for a, b in zip(done_groups, groups)):
            update["layer_groups"] = done_groups
    return answer.model_copy(update=update) if update else answer
