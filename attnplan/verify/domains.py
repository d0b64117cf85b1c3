"""The values a rule's boundary lies between, read from its conditions (not a hand list).

Each leaf ``{fact, OP: OPERAND}`` names values on both sides of its boundary:

- ``in`` / ``not_in``: the listed values; for integers also values just outside (half the
  smallest, twice the largest, and the midpoints between neighbours: 64,128 -> 96), for names
  every value the config field can take;
- ``eq`` / ``ne``: the value; for integers half and twice it, for booleans both;
- ``min`` / ``max``: the bound and its integer neighbour outside (``min: 80`` -> 80, 79);
- ``divisible_by``: a multiple and a non-multiple;
- ``is_null``: unset and a typical set value;
- ``version``: nothing - a version specifier cannot be probed by changing a config.

An operand that names another fact (``{fact: config.head_dim}``) contributes that fact's value
in the probed config, and its neighbours, when the config is known (``dynamic_values``).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator

from attnplan.policy.conditions import FactRef, Leaf, Pred
from attnplan.policy import QUERY_DTYPES
from attnplan.policy.dtypes import KV_CACHE_DTYPES, KV_DTYPES

# Config facts a single FlashInfer call can realise, and the AttentionConfig field each sets.
CONFIG_FIELD = {
    "config.head_dim": "head_dim", "config.head_dim_vo": "head_dim_vo",
    "config.num_qo_heads": "num_qo_heads", "config.num_kv_heads": "num_kv_heads",
    "config.dtype": "dtype", "config.kv_dtype": "kv_cache_dtype", "config.kv_cache_dtype": "kv_cache_dtype",
    "config.page_size": "page_size", "config.sliding_window": "sliding_window",
    "config.logits_soft_cap": "logits_soft_cap", "config.sinks": "sinks",
    "config.num_speculative_tokens": "num_speculative_tokens", "config.kv_lora_rank": "kv_lora_rank",
    "config.qk_nope_head_dim": "qk_nope_head_dim", "config.qk_rope_head_dim": "qk_rope_head_dim",
    "config.v_head_dim": "v_head_dim",
}
# Facts fixed by the probe itself (its backend, its phase, MLA or not: the base config).
FIXED_BY_PROBE = frozenset({"backend", "phase", "config.is_mla"})

# Every value a name-valued fact can take (the refusing side of an `in` list lies among them).
UNIVERSE: dict[str, tuple[Any, ...]] = {
    "config.dtype": tuple(d for d in QUERY_DTYPES),
    "config.kv_dtype": KV_DTYPES,
    "config.kv_cache_dtype": KV_CACHE_DTYPES,
    "config.sinks": (False, True),
}
# A typical value for a fact that a rule only asks to be set or unset.
TYPICAL = {"config.sliding_window": 64, "config.logits_soft_cap": 30.0, "config.num_speculative_tokens": 1}

_INT_LIMIT = 1024   # keeps probes small enough to run in seconds


def why_unprobeable(fact: str) -> str | None:
    if fact in CONFIG_FIELD or fact in FIXED_BY_PROBE:
        return None
    if fact.startswith("node."):
        return f"{fact} is this machine's, not something a probe can change"
    return f"{fact} is not a property of one kernel call"


def leaves(pred: Pred | None) -> Iterator[Leaf]:
    if pred is None:
        return
    if isinstance(pred, Leaf):
        yield pred
    for part in getattr(pred, "parts", ()):
        yield from leaves(part)
    if hasattr(pred, "part"):
        yield from leaves(pred.part)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_neighbours(values: Iterable[int]) -> set[int]:
    vals = sorted(set(values))
    out = set(vals)
    if vals:
        out.add(max(1, vals[0] // 2))
        out.add(vals[-1] * 2)
    for a, b in zip(vals, vals[1:]):
        if (a + b) % 2 == 0 and (a + b) // 2 not in out:
            out.add((a + b) // 2)
    return out


def leaf_values(leaf: Leaf) -> set[Any]:
    """Static values on both sides of one leaf's boundary (operand facts excluded)."""
    op, operand = leaf.op, leaf.operand
    if isinstance(operand, FactRef) or op == "version":
        return set()
    out: set[Any] = set()
    if op in ("in", "not_in"):
        ints = [v for v in operand if _is_int(v)]
        out.update(v for v in operand if not _is_int(v))
        out.update(_int_neighbours(ints))
        out.update(UNIVERSE.get(leaf.fact, ()))
    elif op in ("eq", "ne"):
        if isinstance(operand, bool):
            out.update((True, False))
        elif _is_int(operand):
            out.update(_int_neighbours([operand]))
        elif operand is None:
            out.add(None)
            if leaf.fact in TYPICAL:
                out.add(TYPICAL[leaf.fact])
        else:
            out.add(operand)
            out.update(UNIVERSE.get(leaf.fact, ()))
    elif op == "min":
        out.update((operand, operand - 1) if _is_int(operand) else (operand, operand / 2))
    elif op == "max":
        out.update((operand, operand + 1) if _is_int(operand) else (operand, operand * 2))
    elif op == "divisible_by" and _is_int(operand) and operand > 0:
        out.update((operand, 2 * operand, operand + max(1, operand // 2)))
    elif op == "is_null":
        out.add(None)
        if leaf.fact in TYPICAL:
            out.add(TYPICAL[leaf.fact])
    return {v for v in out if not _is_int(v) or 1 <= v <= _INT_LIMIT}


def dynamic_values(leaf: Leaf, ctx: dict[str, Any]) -> dict[str, set[Any]]:
    """Values a fact-ref operand implies in this config: {fact: values} for both sides."""
    if not isinstance(leaf.operand, FactRef):
        return {}
    ref = ctx.get(leaf.operand.name)
    mine = ctx.get(leaf.fact)
    out: dict[str, set[Any]] = {}
    if _is_int(ref):
        if leaf.op == "divisible_by":
            out[leaf.fact] = {ref * 2, ref * 2 + 1}
        else:
            out[leaf.fact] = {v for v in (ref, ref + (ref // 2 or 1), max(1, ref // 2)) if v <= _INT_LIMIT}
    elif ref is not None:
        out[leaf.fact] = {ref}
    if _is_int(mine) and leaf.op in ("eq", "ne", "min", "max"):
        out.setdefault(leaf.operand.name, set()).update({mine, mine + (mine // 2 or 1)})
    return out


def static_domains(preds: Iterable[Pred | None]) -> dict[str, set[Any]]:
    """fact -> every static value the given predicates' leaves name (both sides)."""
    out: dict[str, set[Any]] = {}
    for p in preds:
        for leaf in leaves(p):
            out.setdefault(leaf.fact, set()).update(leaf_values(leaf))
    return out


def named_values(rules: Iterable[Any]) -> dict[str, set[Any]]:
    """fact -> the literal operands the rules' leaves name (no derived neighbours)."""
    out: dict[str, set[Any]] = {}
    for r in rules:
        for c in r.checks:
            for leaf in itertools.chain(leaves(c.require), leaves(c.when)):
                op = leaf.operand
                vals = op if isinstance(op, tuple) else (op,)
                out.setdefault(leaf.fact, set()).update(v for v in vals if isinstance(v, (int, float, str, bool)))
    return out
