"""Which rules ``verify`` holds against the GPU, and which FlashInfer calls it can run here.

One function decides what a *kernel* rule is, so switching to the packs' ``layer`` field is a
one-line change: a rule that declares ``layer`` is taken at its word; a rule without one (packs
older than the two-layer rules, docs/contract.md, Engines and versions) counts as a kernel rule when any of its checks is
evaluated per backend (candidate scope) - engine rules are policy, not measurable.
"""

from __future__ import annotations

from typing import Optional

from attnplan.policy import Rule, RuleSet, default_ruleset
from attnplan.policy.capability import capability_major


def runnable_calls(ruleset: Optional[RuleSet] = None) -> tuple[str, ...]:
    """The plan's ``call`` values verify runs directly through FlashInfer (calls.py): backends.yaml
    ``calls.<name>.verify_probe``."""
    rs = ruleset if ruleset is not None else default_ruleset()
    return tuple(name for name, info in rs.calls.items() if info.verify_probe)


def is_kernel_rule(rule: Rule) -> bool:
    layer = getattr(rule, "layer", None)
    if layer is not None:
        return layer == "kernel"
    return any(c.scope == "candidate" for c in rule.checks)


def kernel_rules(ruleset: RuleSet, only: Optional[list[str]] = None) -> list[Rule]:
    """The kernel rules, optionally narrowed to ``only`` (ids); an unknown id is a KeyError."""
    rules = [r for r in ruleset.rules if is_kernel_rule(r)]
    if only:
        for rid in only:
            ruleset.rule(rid)                        # KeyError names an id that does not exist
        rules = [r for r in rules if r.id in set(only)]
    return rules


def unrunnable_reason(call: str, capability: Optional[int], ruleset: Optional[RuleSet] = None) -> Optional[str]:
    """Why a plan call cannot be probed here (None: it can): backends.yaml ``calls.<call>`` says whether
    verify has a probe for it and on which capability families it runs at all."""
    rs = ruleset if ruleset is not None else default_ruleset()
    info = rs.calls.get(call)
    if info is None:
        return f"verify has no probe for call {call!r}"
    if info.verify_probe:
        return None
    if info.capability_majors is None or capability_major(capability) in info.capability_majors:
        return f"read from source only: verify has no probe for {call} yet"
    families = sorted({b.family for b in rs.backends.values()
                       for c in (*b.calls.values(), *b.mla_calls.values(), *b.sink_calls.values()) if c.call == call})
    where = "/".join(f"{m}.x" for m in info.capability_majors)
    return f"read from source only: {call} ({', '.join(families)}) runs only on a {where} GPU"
