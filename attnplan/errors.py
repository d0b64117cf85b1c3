"""attnplan's one exception tree; every error attnplan raises on purpose is a class of it.

It sits at the bottom of the package (it imports nothing of attnplan), so that every layer, down to
``safeio``, raises the same classes; ``attnplan.policy.errors`` and ``attnplan.policy`` re-export them.
Every message names the rule or field, the fact that failed and the fix, in the spirit of
``packaging.specifiers.InvalidSpecifier``: callers can catch the precise class or the base::

    AttnplanError
    ├── InvalidInputError (ValueError)      bad input: a field, a flag, a file (CLI exit 2, REST 422)
    │   ├── UnknownDeviceError              a device name not in the catalog
    │   └── ModelConfigError                an unreadable or impossible model config.json
    ├── RulePackError                       a rule pack that does not load (fails closed)
    ├── RuleError (ValueError)              one rule that does not compile (the loader re-raises it
    │   └── ConditionError                  as RulePackError naming file and rule); a bad condition
    ├── UnsupportedConfigurationError (ValueError)   the rules reject the config
    │   └── PlanMismatchError               a plan checked against a device it was not made for
    │       └── StartupMismatchError        ... listing the facts that differ from the plan's node
    ├── AdapterCallError (ValueError)       an adapter call whose arguments do not fit its plan
    ├── SetupError (RuntimeError)           the environment around attnplan is not what it needs
    │   ├── BuildError                      a kernel module that does not compile (ninja's output)
    │   ├── SourceNotFoundError (LookupError)   an installed package's source lacks what attnplan reads
    │   └── TableError                      a trtllm-gen kernel table (or checksums) not FlashInfer's: names the file
    └── RayConnectError                     the Ray cluster cannot be reached (preflight exit 3)
"""

from __future__ import annotations

from typing import Any, Sequence


class AttnplanError(Exception):
    """Base of every error attnplan raises on purpose."""


class InvalidInputError(AttnplanError, ValueError):
    """Bad input from a caller: a field, its value and what is allowed."""

    def __init__(self, field: str, message: str, allowed: Sequence[Any] | None = None):
        self.field = field
        self.message = message
        self.allowed = list(allowed) if allowed is not None else None
        text = f"{field}: {message}"
        if allowed:
            text += f" (allowed: {', '.join(str(a) for a in allowed)})"
        super().__init__(text)


class UnknownDeviceError(InvalidInputError):
    """A device name that is not in the catalog; carries close matches."""

    def __init__(self, name: str, close: Sequence[str], known: Sequence[str]):
        self.name = name
        self.close = list(close)
        hint = f"did you mean {', '.join(close)}?" if close else f"known devices: {', '.join(known)}"
        super().__init__("device", f"unknown device {name!r}; {hint}")


class ModelConfigError(InvalidInputError):
    """A HuggingFace config.json that is missing, unreadable, malformed or incomplete."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__("model_config", f"{path}: {message}")


class RulePackError(AttnplanError):
    """A malformed rule pack. Nothing of it is loaded."""

    def __init__(self, file: str, message: str, rule: str | None = None):
        self.file = file
        self.rule = rule
        where = f"{file}" + (f" rule {rule!r}" if rule else "")
        super().__init__(f"{where}: {message}")


class RuleError(AttnplanError, ValueError):
    """One rule whose text does not compile (fields that do not fit together); a ValueError so that
    pydantic reports it at the rule's fields, and the pack loader re-raises it as RulePackError."""


class ConditionError(RuleError):
    """A condition that cannot be compiled; the rule-pack loader adds file and rule."""


class UnsupportedConfigurationError(AttnplanError, ValueError):
    """Raised at engine init (``require_plan``) when no plan satisfies every rule.

    The error carries the data: ``answer`` (a ``PlanAnswer``) holds the whole rejection, ``verdict`` what the
    engine does, ``violations``, ``suggestions`` and ``fixes`` what failed and what would not. The verdict's
    sentence is render/verdict.py's, never written here: ``message`` where the surface that raises words it
    (``verdict_message``), else the one a finished answer carries (attnplan.require_plan); the planner's own
    error (``policy.require_plan``, below the renderer) leads with the deciding rule and fact as data.
    """

    def __init__(self, answer: Any, message: str | None = None):
        self.answer = answer
        self.verdict = getattr(answer, "verdict", None)
        self.violations = list(answer.violations)
        self.suggestions = list(answer.suggestions)
        self.fixes = list(self.verdict.fixes) if self.verdict is not None else []
        super().__init__(_rejection_text(answer, message))


class PlanMismatchError(UnsupportedConfigurationError):
    """A plan was made for facts that do not hold on the device it is about to run on."""


class StartupMismatchError(PlanMismatchError):
    """``PlanMismatchError`` that also lists the facts that differ between planning and startup."""

    def __init__(self, answer: Any, fact_diffs: list[str], planned: Any):
        super().__init__(answer)
        self.fact_diffs = fact_diffs
        self.planned = planned
        if fact_diffs:
            self.args = (self.args[0] + "\nfacts that differ from the plan's node:\n"
                         + "\n".join(f"  ~ {d}" for d in fact_diffs),)


class AdapterCallError(AttnplanError, ValueError):
    """A call into the execution adapter whose arguments do not fit the plan it runs (a step's batch,
    a buffer, a dtype, a kernel the plan names): the message says what to pass instead."""


class SetupError(AttnplanError, RuntimeError):
    """The environment around attnplan is not what it needs (a server that did not start, a vLLM
    whose code moved, a module imported in the wrong order): the message names what to change."""


class BuildError(SetupError):
    """A kernel module failed to compile; the message carries ninja's output."""

    def __init__(self, workdir: Any, output: str):
        self.workdir = workdir
        self.output = output
        where = f"in {workdir}" if workdir else "(no module named by ninja)"
        super().__init__(f"ninja build failed {where}; check nvcc and CUDA_HOME (or the module's "
                         f"sources), then warm up again. Ninja output:\n{output[-4000:]}")


class TableError(SetupError):
    """A trtllm-gen kernel table (or its checksums.txt) that cannot be read as FlashInfer's - corrupt, truncated,
    foreign to the pin, or its sha256 not FlashInfer's (attnplan/kernels/trtllm_gen): the message names the file,
    and the node is not ready; nothing falls back to another table."""

    def __init__(self, origin: str, message: str):
        self.origin = origin
        super().__init__(f"trtllm-gen kernel table {origin}: {message}")


class SourceNotFoundError(SetupError, LookupError):
    """An installed package's source that attnplan reads without importing it (FlashInfer's
    signatures, SGLang's tables) is absent, or no longer defines what it names."""


class RayConnectError(AttnplanError):
    """The Ray cluster could not be reached at all (exit 3, not bad input)."""


def _fact(v: Any) -> str:
    """A violation's fact as data: ``fact=observed (required ...)``; empty when it names none."""
    if not getattr(v, "fact", None):
        return ""
    req = f" (required {v.required})" if getattr(v, "required", "") else ""
    return f"{v.fact}={v.observed!r}{req}"


def _rejection_text(answer: Any, message: str | None) -> str:
    """The error's text: the verdict's sentence as given (``message``, else a finished verdict's ``message``:
    both written by render/verdict.py), else the deciding rule and fact as data; then every violation (rule,
    phase/backend, its message or fact), the verified suggestions and the fixes, as the answer carries them."""
    v = getattr(answer, "verdict", None)
    if v is None:
        lines = ["attention configuration is not supported on this node:"]
    else:
        text = message or v.message
        if not text and v.rules:   # no sentence (raised below render): the deciding rule and its violation's data
            deciding = next((x for x in answer.violations if x.rule in v.rules), None)
            rule = deciding.rule if deciding is not None else v.rules[0]
            text = f"[{rule}] " + ((deciding.message or _fact(deciding)) if deciding is not None else "")
        lines = [f"{v.outcome}: {text}".rstrip(), "rules violated on this node:"]
    for x in answer.violations:
        where = x.phase if x.backend is None else f"{x.phase}/{x.backend}"
        lines.append(f"  - [{x.rule}] {where}: {x.message or _fact(x)}".rstrip())
    if answer.suggestions:
        lines.append("verified alternatives (each one alone makes the configuration valid here):")
        for s in answer.suggestions:
            # A suggestion's message may already open with the change ("kv_cache_dtype=auto: then ..."):
            # say it once.
            head = f"{s.field}={s.value}"
            if not s.message:   # unfinished (its sentence is render/notes.py's): the change and its backends
                lines.append(f"  * {head}" + (f" -> {s.prefill} / {s.decode}" if s.prefill or s.decode else ""))
            else:
                lines.append(f"  * {s.message}" if s.message.startswith(head) else f"  * {head}: {s.message}")
    fixes = v.fixes if v is not None else ()
    if fixes:
        lines.append("fixes (the same command with this change, re-evaluated):")
        lines += [f"  * {f.args or f.change}: {f.outcome}" + (f" ({f.selected})" if f.selected else "") for f in fixes]
    elif not answer.suggestions:
        lines.append("no single-field change makes it valid on this node.")
    return "\n".join(lines)


__all__ = [
    "AttnplanError", "InvalidInputError", "UnknownDeviceError", "ModelConfigError", "RulePackError", "RuleError",
    "ConditionError", "UnsupportedConfigurationError", "PlanMismatchError", "StartupMismatchError",
    "AdapterCallError", "SetupError", "BuildError", "SourceNotFoundError", "TableError", "RayConnectError",
]
