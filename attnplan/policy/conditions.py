"""The condition language of rule packs, compiled into small predicate objects.

A condition is YAML data, never code: a leaf ``{fact: NAME, OP: OPERAND}`` or a combinator
``{all: [...]}``, ``{any: [...]}``, ``{not: {...}}``. Operators: ``eq``, ``ne``, ``in``,
``not_in``, ``min``, ``max`` (inclusive), ``version`` (a ``packaging`` specifier set),
``is_null``, ``divisible_by`` and ``power_of_two`` (true: a positive power of 2). An operand may itself be
``{fact: NAME}``. A caller with its own facts (SGLang's resolution rows: attnplan/sglang/facts.py) passes
their names as ``facts``; the default is the rule packs' catalog (facts_catalog.py).

A fact whose value is unknown (``None``) satisfies only ``is_null: true`` and ``eq: null``:
unknown never passes a requirement (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Optional, Sequence


from attnplan.errors import ConditionError
from .facts_catalog import FACTS, display


@dataclass(frozen=True)
class Failure:
    """One leaf that did not hold: which fact, what it was, what was wanted."""

    fact: str
    observed: Any
    required: str


@dataclass(frozen=True)
class FactRef:
    name: str

    def __str__(self) -> str:
        return self.name


class Pred:
    reads: frozenset[str] = frozenset()

    def test(self, ctx: Mapping[str, Any]) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError("subclasses evaluate")

    def failures(self, ctx: Mapping[str, Any]) -> list[Failure]:
        """Why ``test`` is false, as leaves (called only on failure)."""
        return [Failure(f, ctx.get(f), self.describe()) for f in sorted(self.reads)]

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError("subclasses describe")


def _fmt_operand(fact: str, operand: Any) -> str:
    if isinstance(operand, FactRef):
        return operand.name
    if isinstance(operand, (list, tuple)):
        return "{" + ", ".join(display(fact, o) for o in operand) + "}"
    return display(fact, operand)


def _resolve(ctx: Mapping[str, Any], operand: Any) -> Any:
    return ctx.get(operand.name) if isinstance(operand, FactRef) else operand


class Leaf(Pred):
    def __init__(self, fact: str, op: str, operand: Any, fn: Callable[[Any, Any], bool]):
        self.fact, self.op, self.operand, self._fn = fact, op, operand, fn
        reads = {fact}
        if isinstance(operand, FactRef):
            reads.add(operand.name)
        self.reads = frozenset(reads)
        self._text = _LEAF_TEXT[op](fact, operand)

    def test(self, ctx: Mapping[str, Any]) -> bool:
        value = ctx.get(self.fact)
        operand = _resolve(ctx, self.operand)
        if self.op == "is_null":
            return (value is None) == operand
        # Only a literal `eq: null` matches an unknown value; two unknown facts are not equal
        # (otherwise "flashinfer-cubin at flashinfer's version" holds with neither installed).
        if value is None and not (self.op == "eq" and self.operand is None):
            return False
        if operand is None and isinstance(self.operand, FactRef):
            return False
        try:
            return bool(self._fn(value, operand))
        except (TypeError, ValueError, ZeroDivisionError):  # InvalidVersion is a ValueError
            return False

    def failures(self, ctx: Mapping[str, Any]) -> list[Failure]:
        return [Failure(self.fact, ctx.get(self.fact), self.describe())]

    def describe(self) -> str:
        return self._text


class All(Pred):
    def __init__(self, parts: Sequence[Pred]):
        self.parts = tuple(parts)
        self.reads = frozenset().union(*(p.reads for p in parts))
        self._text = " and ".join(_paren(p) for p in self.parts)

    def test(self, ctx: Mapping[str, Any]) -> bool:
        return all(p.test(ctx) for p in self.parts)

    def failures(self, ctx: Mapping[str, Any]) -> list[Failure]:
        out: list[Failure] = []
        for p in self.parts:
            if not p.test(ctx):
                out.extend(p.failures(ctx))
        return out

    def describe(self) -> str:
        return self._text


class AnyOf(Pred):
    def __init__(self, parts: Sequence[Pred]):
        self.parts = tuple(parts)
        self.reads = frozenset().union(*(p.reads for p in parts))
        self._text = " or ".join(_paren(p) for p in self.parts)

    def test(self, ctx: Mapping[str, Any]) -> bool:
        return any(p.test(ctx) for p in self.parts)

    def failures(self, ctx: Mapping[str, Any]) -> list[Failure]:
        # Every alternative failed: report each, joined, so the message lists all ways out.
        leaves = [f for p in self.parts for f in p.failures(ctx)]
        facts = list(dict.fromkeys(f.fact for f in leaves))
        if len(facts) == 1:
            return [Failure(facts[0], ctx.get(facts[0]), self.describe())]
        return [Failure(", ".join(facts), {f: ctx.get(f) for f in facts}, self.describe())]

    def describe(self) -> str:
        return self._text


class Not(Pred):
    def __init__(self, part: Pred):
        self.part = part
        self.reads = part.reads
        self._text = f"not ({part.describe()})"

    def test(self, ctx: Mapping[str, Any]) -> bool:
        return not self.part.test(ctx)

    def describe(self) -> str:
        return self._text


def _paren(p: Pred) -> str:
    text = p.describe()
    return f"({text})" if isinstance(p, (All, AnyOf)) and len(p.parts) > 1 else text


def _version_in(value: Any, spec: Any) -> bool:
    from packaging.version import Version

    return spec.contains(Version(str(value)), prereleases=True)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda v, o: v == o,
    "ne": lambda v, o: v != o,
    "in": lambda v, o: v in o,
    "not_in": lambda v, o: v not in o,
    "min": lambda v, o: _num(v) and v >= o,
    "max": lambda v, o: _num(v) and v <= o,
    "version": _version_in,
    "is_null": lambda v, o: (v is None) == o,
    "divisible_by": lambda v, o: _num(v) and _num(o) and o != 0 and v % o == 0,
    # trtllm_mha_backend.py TRTLLMHAAttnBackend.__init__ reads ``page & (page - 1)`` (SGLang's rows)
    "power_of_two": lambda v, o: isinstance(v, int) and not isinstance(v, bool) and (v > 0 and v & (v - 1) == 0) == o,
}

_LEAF_TEXT: dict[str, Callable[[str, Any], str]] = {
    "eq": lambda f, o: f"{f} == {_fmt_operand(f, o)}",
    "ne": lambda f, o: f"{f} != {_fmt_operand(f, o)}",
    "in": lambda f, o: f"{f} in {_fmt_operand(f, o)}",
    "not_in": lambda f, o: f"{f} not in {_fmt_operand(f, o)}",
    "min": lambda f, o: f"{f} >= {_fmt_operand(f, o)}",
    "max": lambda f, o: f"{f} <= {_fmt_operand(f, o)}",
    "version": lambda f, o: f"{f} {o}",
    "is_null": lambda f, o: f"{f} is unset" if o else f"{f} is set",
    "divisible_by": lambda f, o: f"{f} divisible by {_fmt_operand(f, o)}",
    "power_of_two": lambda f, o: f"{f} is a power of 2" if o else f"{f} is not a power of 2",
}


def _operand(raw: Any, op: str, facts: Optional[Collection[str]] = None) -> Any:
    if isinstance(raw, dict):
        if set(raw) != {"fact"} or not isinstance(raw["fact"], str):
            raise ConditionError(f"operand of {op!r} must be a literal or {{fact: NAME}}, got {raw!r}")
        _check_fact(raw["fact"], facts)
        return FactRef(raw["fact"])
    if op in ("in", "not_in"):
        if not isinstance(raw, list) or not raw:
            raise ConditionError(f"{op!r} needs a non-empty list, got {raw!r}")
        return tuple(raw)
    if op == "version":
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            return SpecifierSet(str(raw))
        except InvalidSpecifier as exc:
            raise ConditionError(f"invalid version specifier {raw!r}: {exc}") from None
    if op in ("is_null", "power_of_two") and not isinstance(raw, bool):
        raise ConditionError(f"{op!r} takes true or false, got {raw!r}")
    if op in ("min", "max") and not _num(raw):
        raise ConditionError(f"{op!r} takes a number, got {raw!r}")
    return raw


def _check_fact(name: Any, facts: Optional[Collection[str]] = None) -> None:
    known = FACTS if facts is None else facts
    if not isinstance(name, str) or name not in known:
        raise ConditionError(f"unknown fact {name!r} (known: {', '.join(sorted(known))})")


def compile_condition(raw: Any, facts: Optional[Collection[str]] = None) -> Pred:
    """YAML data -> predicate. Raises ConditionError naming what is wrong. ``facts``: the names a condition
    may read (default: the rule packs' catalog, facts_catalog.FACTS)."""
    if not isinstance(raw, dict) or not raw:
        raise ConditionError(f"a condition is a mapping, got {raw!r}")
    if "all" in raw or "any" in raw:
        (key,) = raw.keys() if len(raw) == 1 else (None,)
        if key is None:
            raise ConditionError(f"'all'/'any' stand alone, got keys {sorted(raw)}")
        items = raw[key]
        if not isinstance(items, list) or not items:
            raise ConditionError(f"{key!r} needs a non-empty list")
        parts = [compile_condition(i, facts) for i in items]
        return All(parts) if key == "all" else AnyOf(parts)
    if "not" in raw:
        if len(raw) != 1:
            raise ConditionError(f"'not' stands alone, got keys {sorted(raw)}")
        return Not(compile_condition(raw["not"], facts))
    if "fact" not in raw:
        raise ConditionError(f"a leaf names a fact: {{fact: NAME, OP: VALUE}}, got {raw!r}")
    _check_fact(raw["fact"], facts)
    ops = [k for k in raw if k != "fact"]
    if len(ops) != 1 or ops[0] not in _OPS:
        raise ConditionError(f"a leaf has exactly one operator of {sorted(_OPS)}, got {ops}")
    op = ops[0]
    if op == "divisible_by" and not isinstance(raw[op], dict) and (
            isinstance(raw[op], bool) or not isinstance(raw[op], int) or raw[op] <= 0):
        # "divisible by 0" can never hold: a rule written so would refuse everything it checks
        raise ConditionError(f"divisible_by needs a positive integer, got {raw[op]!r}")
    return Leaf(raw["fact"], op, _operand(raw[op], op, facts), _OPS[op])
