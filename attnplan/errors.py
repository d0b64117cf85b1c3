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

    ``answer`` (a ``PlanAnswer``) holds the whole rejection: every violation and every verified suggestion.
    """

    def __init__(self, answer: Any):
        self.answer = answer
        self.violations = list(answer.violations)
        self.suggestions = list(answer.suggestions)
        super().__init__(_render_rejection(answer))


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


def _render_rejection(answer: Any) -> str:
    v = getattr(answer, "verdict", None)
    # A finished answer (attnplan.require_plan) carries the verdict's sentence (render/verdict.py); the planner's
    # own (policy.require_plan) carries the data it is written from: the deciding rule and its message.
    says = getattr(v, "says", None)
    text = (v.message or (f"[{says.rule}] {says.detail}" if says is not None and says.rule else "")) if v is not None else ""
    lines = [f"{v.outcome}: {text}".rstrip() if v is not None else "attention configuration is not supported on this node:"]
    if v is not None:
        lines.append("rules violated on this node:")
    for v in answer.violations:
        where = v.phase if v.backend is None else f"{v.phase}/{v.backend}"
        lines.append(f"  - [{v.rule}] {where}: {v.message}")
    if answer.suggestions:
        lines.append("verified alternatives (each one alone makes the configuration valid here):")
        for s in answer.suggestions:
            # A suggestion's message may already open with the change ("kv_cache_dtype=auto: then ..."):
            # say it once.
            head = f"{s.field}={s.value}"
            lines.append(f"  * {s.message}" if s.message.startswith(head) else f"  * {head}: {s.message}")
    verdict = getattr(answer, "verdict", None)
    fixes = verdict.fixes if verdict is not None else ()
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
