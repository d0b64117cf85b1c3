"""Which rules ``verify`` holds against the GPU, and which FlashInfer calls it can run here.

One function decides what a *kernel* rule is, so switching to the packs' ``layer`` field is a
one-line change: a rule that declares ``layer`` is taken at its word; a rule without one (packs
older than the two-layer rules, SPEC §10) counts as a kernel rule when any of its checks is
evaluated per backend (candidate scope) - engine rules are policy, not measurable.
"""

from __future__ import annotations

from typing import Optional

from attnplan.policy import Rule, RuleSet

# The plan's ``call`` values verify knows how to run directly through FlashInfer (calls.py).
RUNNABLE_CALLS = ("paged_prefill", "paged_decode", "sink", "xqa_decode", "mla_paged_decode", "ragged_prefill")


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


def unrunnable_reason(call: str, capability: Optional[int]) -> Optional[str]:
    """Why a plan call cannot be probed here (None: it can)."""
    if call in RUNNABLE_CALLS:
        return None
    if call.startswith("trtllm"):
        if capability is not None and capability // 10 == 10:
            return f"read from source only: verify has no probe for {call} yet"
        return f"read from source only: {call} (trtllm-gen) runs only on a 10.x GPU"
    return f"verify has no probe for call {call!r}"
