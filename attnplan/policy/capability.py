"""CUDA compute capabilities: ``"10.3"`` <-> ``103`` and the families the rules speak of."""

from __future__ import annotations

import re

from attnplan.errors import InvalidInputError

_CAP_RE = re.compile(r"^\s*(?:sm_?)?(\d{1,2})\.(\d)\s*$|^\s*(?:sm_?)?(\d{2,3})[af]?\s*$", re.I)


def parse_capability(text: str | int | float) -> int:
    """``"10.3"``, ``"sm_103"``, ``103`` or ``(10, 3)`` -> ``103``. Raises InvalidInputError."""
    if isinstance(text, tuple) and len(text) == 2:
        major, minor = text
        return int(major) * 10 + int(minor)
    if isinstance(text, bool):
        raise InvalidInputError("capability", f"{text!r} is not a compute capability, e.g. 9.0 or 10.3")
    if isinstance(text, int):
        if 30 <= text <= 199:
            return text
        raise InvalidInputError("capability", f"{text} is not a compute capability, e.g. 90 or 103")
    if isinstance(text, float):
        text = f"{text:.1f}"
    m = _CAP_RE.match(str(text))
    if not m:
        raise InvalidInputError("capability", f"{text!r} is not a compute capability, e.g. 9.0 or 10.3")
    if m.group(1) is not None:
        value = int(m.group(1)) * 10 + int(m.group(2))
    else:
        value = int(m.group(3))
    if not 30 <= value <= 199:
        raise InvalidInputError("capability", f"{text!r} is out of range (3.0 .. 19.9)")
    return value


def format_capability(value: int | None) -> str | None:
    """``103`` -> ``"10.3"``."""
    if value is None:
        return None
    return f"{value // 10}.{value % 10}"


def capability_major(value: object) -> int | None:
    """``103`` -> ``10`` (the family the rules' ``node.capability_major`` names); not an int -> None."""
    return value // 10 if isinstance(value, int) else None
