"""JIT modules FlashInfer names alike though they are compiled differently.

A call whose ``backends.yaml`` entry has ``jit_name`` builds a module whose name leaves some of
its compiled parameters out (the attention-sink wrapper: flashinfer/attention/_core.py
``BatchAttentionWithAttentionSinkWrapper.__init__`` names it by query dtype, window and backend,
not head dims or KV dtype). Two such modules in one process load one library: the second layer
group runs the first one's kernel, which on the H100 left half of each output row unwritten or
hung (bench/logs/h100-2026-11-25c). A model plan whose groups need two of them is rejected under
the call's ``jit_name.rule``; verify's runner never builds two at once (verify/runner.py _Names).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from .answer import JitModule, Note, PhasePlan, Violation
from .rulepack import RuleSet


def jit_name(ruleset: RuleSet, call: str, module: JitModule) -> Optional[str]:
    """The name FlashInfer gives ``module`` when it names it by fewer parameters than it compiles;
    None for a call whose module name holds all of them."""
    spec = ruleset.calls[call].jit_name if call in ruleset.calls else None
    if spec is None:
        return None
    named = ":".join(f"{k}={module.params.get(k)}" for k in spec.named_by)
    return f"{module.params.get('kernel')}:{module.backend}:{named}"


def compiled_for(ruleset: RuleSet, call: str, module: JitModule) -> dict[str, Any]:
    spec = ruleset.calls[call].jit_name
    assert spec is not None
    return {k: module.params.get(k) for k in spec.compiled}


def clashes(ruleset: RuleSet, plans: Iterable[tuple[int, PhasePlan]]) -> list[Violation]:
    """One violation per module name that two layer groups' plans (index, phase plan) need compiled
    two ways; each names the groups and what differs."""
    seen: dict[str, dict[str, tuple[dict[str, Any], list[int], str]]] = {}
    for group, pp in plans:
        for m in pp.modules:
            name = jit_name(ruleset, pp.call, m)
            if name is None:
                continue
            what = compiled_for(ruleset, pp.call, m)
            key = repr(sorted(what.items()))
            entry = seen.setdefault(name, {}).setdefault(key, (what, [], pp.call))
            if group not in entry[1]:
                entry[1].append(group)
    out: list[Violation] = []
    for name, variants in seen.items():
        if len(variants) < 2:
            continue
        call = next(iter(variants.values()))[2]
        spec = ruleset.calls[call].jit_name
        assert spec is not None
        builds = list(variants.values())
        differ = [k for k in spec.compiled if len({repr(w[k]) for w, _, _ in builds}) > 1]
        out.append(Violation(
            rule=spec.rule, phase="both", fact=", ".join(differ), observed=[{k: w[k] for k in differ} for w, _, _ in builds],
            message="", says=Note(kind="jit-name-clash", call=call, name=name, named_by=tuple(spec.named_by),
                                  differ=tuple(differ), source=spec.source,
                                  builds=tuple((tuple(gs), tuple(w[k] for k in differ)) for w, gs, _ in builds)),
            outcome="silent-wrong"))  # it builds, loads and runs: one group computes with the other's kernel
    return out


__all__ = ["jit_name", "compiled_for", "clashes"]
