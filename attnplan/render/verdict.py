"""The verdict's sentence (docs/contract.md "The verdict"): written here from the data the planner puts in
``Verdict.says`` (policy/answer.py VerdictSays); the planner decides, this module only words it.

``verdict_message`` is the one wording of every verdict kind; ``finish`` writes every text field of an answer
(the verdict's ``message``, and through render/notes.py its notes, the engine's note, suggestions and the
violations built in code; through render/trace.py its trace's page inputs) from its data, on an answer, a model
answer or anything carrying them, for the surfaces that finish an answer above the planner (attnplan/lines.py,
attnplan/embedded.py). A verdict or note read back from JSON without its data (an older preflight HTTP node) keeps
its text: it is all there is.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pydantic import BaseModel

from attnplan.policy.answer import EngineBackend, EngineName, Fix, PlanAnswer, Suggestion, Verdict, VerdictSays, Violation

from .notes import all_notes_text, engine_words, note_text, notes_text, violation_text
from .trace import finish_trace

# An outcome as a verb phrase after the engine's name.
OUTCOME_WORDS = {"fails-at-startup": "fails at startup",
                 "fails-at-graph-capture": "fails at CUDA-graph capture (startup)",
                 "fails-at-first-request": "fails at the first request",
                 "wrong-output": "runs but computes wrong output", "runs": "runs"}


def who(s: VerdictSays) -> str:
    """``vLLM 0.33.0``, ``SGLang 0.5.23``, ``attnplan's FlashInfer adapter``: the display name the answer carries
    (backends.yaml engines.<name>.display), the engine's rule-set name where it carries none."""
    return engine_words(EngineName(name=s.engine, display=s.display or s.engine, version=s.version, adapter=s.adapter))


def _detail(s: VerdictSays) -> str:
    """The deciding violation's message: its text, or written from its data (render/notes.py)."""
    if s.detail is None and s.detail_says is not None:
        return note_text(s.detail_says)
    return s.detail or ""


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
    detail = _detail(s)
    if detail.startswith(who(s)):
        return f"[{s.rule}] {detail}"
    return f"{who(s)} {OUTCOME_WORDS[s.outcome]}: [{s.rule}] {detail}"


def _model_fails(s: VerdictSays) -> str:
    engine = f"{s.engine}=={s.version}" if s.version else s.engine
    return f"{engine}: the model {OUTCOME_WORDS[s.outcome]}: [{s.rule}] {_detail(s)}"


def _layout_refused(s: VerdictSays) -> str:
    return f"{who(s)} refuses at startup: {s.detail}"


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


# Fields that hold no sentence: not walked by ``finish`` (an answer's node, plan, config and trace are most of it).
_NO_TEXT = frozenset({"node", "plan", "config", "trace", "attention", "prefill", "decode", "kv_cache", "metadata",
                      "chunked_local", "selected", "coercions", "layers", "groups", "engine",
                      "says", "notes_says", "detail_says"})


def _finish_one(m: BaseModel) -> dict[str, Any]:
    """The text fields of one model written from its own data (empty: nothing to write)."""
    update: dict[str, Any] = {}
    if isinstance(m, Verdict):
        if m.says is not None:
            update["message"] = says_message(m.says)
    elif isinstance(m, Violation):
        if m.says is not None:
            update.update(violation_text(m.says))
    elif isinstance(m, Suggestion):
        if m.says is not None:
            update["message"] = note_text(m.says)
    elif isinstance(m, Fix):
        if m.says is not None:
            update["change"] = note_text(m.says)
    elif isinstance(m, EngineBackend):
        if m.says is not None:
            update["note"] = note_text(m.says)
    says = getattr(m, "notes_says", None)
    if says:
        update["notes"] = notes_text(says)
    if "all_notes_text" in type(m).model_fields:     # a model's notes and its groups' (model/plan.py all_notes_says)
        update["all_notes_text"] = all_notes_text(m)
    return {k: v for k, v in update.items() if getattr(m, k) != v}


def _finish_value(v: Any) -> Any:
    if isinstance(v, BaseModel):
        return finish(v)
    if isinstance(v, tuple) and v and isinstance(v[0], BaseModel):
        done = tuple(finish(x) for x in v)
        return v if all(a is b for a, b in zip(done, v)) else done
    if isinstance(v, dict) and v and any(isinstance(x, BaseModel) for x in v.values()):
        done_d = {k: finish(x) for k, x in v.items()}
        return v if all(done_d[k] is v[k] for k in v) else done_d
    return v


def finish(answer: Any) -> Any:
    """A verdict, or an answer (PlanAnswer, ModelPlanAnswer, or any pydantic answer carrying them: ``answer``,
    ``model``, ``layer_groups``) with every text field written here from its data (the verdict's ``message``, the
    notes, the engine's note, suggestions, violations built in code); answers are frozen, so a copy where it
    changes, the same object where nothing does."""
    if answer is None or not isinstance(answer, BaseModel):
        return answer
    update = _finish_one(answer)
    for name in type(answer).model_fields:
        if name == "trace" and isinstance(answer, PlanAnswer):   # a page input judged over pages (render/trace.py)
            worded = finish_trace(answer.trace)
            if worded is not answer.trace:
                update["trace"] = worded
            continue
        if name in _NO_TEXT or name in update:
            continue
        value = getattr(answer, name)
        done = _finish_value(value)
        if done is not value:
            update[name] = done
    return answer.model_copy(update=update) if update else answer
