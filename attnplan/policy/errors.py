"""One exception hierarchy for attnplan.

Every message names the rule or field, the fact that failed and the fix, in the spirit of
``packaging.specifiers.InvalidSpecifier``: callers can catch the precise class or the base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .answer import PlanAnswer


class AttnplanError(Exception):
    """Base of every error attnplan raises on purpose."""


class InvalidInputError(AttnplanError, ValueError):
    """Bad input from a caller: a field, its value and what is allowed."""

    def __init__(self, field: str, message: str, allowed: Sequence[Any] | None = None):
        self.field = field
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


class UnsupportedConfigurationError(AttnplanError, ValueError):
    """Raised at engine init (``require_plan``) when no plan satisfies every rule.

    ``answer`` holds the whole rejection: every violation and every verified suggestion.
    """

    def __init__(self, answer: "PlanAnswer"):
        self.answer = answer
        self.violations = list(answer.violations)
        self.suggestions = list(answer.suggestions)
        super().__init__(_render_rejection(answer))


class PlanMismatchError(UnsupportedConfigurationError):
    """A plan was made for facts that do not hold on the device it is about to run on."""


def _render_rejection(answer: "PlanAnswer") -> str:
    lines = ["attention configuration is not supported on this node:"]
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
    else:
        lines.append("no single-field change makes it valid on this node.")
    return "\n".join(lines)
