"""The adapter's kernel calls: one ``KernelCall`` strategy per ``PhasePlan.call``, one module each.

The plan says how a phase is called (``call``, its FlashInfer ``entry_point``, the
``flashinfer_backend`` argument); the strategy of that call says what that means for the adapter:
how its wrapper is constructed and planned, how it runs, its CUDA-graph buffers, the JIT module
warm-up builds for it, and its workspace needs (``_contract.py``). The registry is keyed by the
call names rules/backends.yaml declares and is built, and checked against that data, on first use
(``_registry.build_registry``): a call the data names that no strategy serves is an error there.
Nothing in the adapter, the warm-up or the CUDA-graph code reads meaning out of a call's or a
backend's name. Importing this package imports neither torch nor flashinfer (tests check the
strategies on the CPU).
"""

from __future__ import annotations

import functools
from typing import Any

from attnplan.policy import default_ruleset

from ._choice import ALTERNATIVE, DEFAULT, DecodeSwitch, FixedDecode, batch_pages
from ._contract import CallContext, JitBuild, JitGetter, KernelCall
from ._jit import MERGE
from ._registry import STRATEGIES, build_registry
from attnplan.errors import AdapterCallError

__all__ = ["ALTERNATIVE", "DEFAULT", "DecodeSwitch", "FixedDecode", "batch_pages", "decode_phases", "CallContext", "JitBuild", "JitGetter", "KernelCall", "MERGE_JIT", "STRATEGIES", "build_registry",
           "needs_finite_page_tail", "registry", "strategy", "workspace_layout"]

# FlashInfer's merge of partial states by LSE (flashinfer/cascade.py merge_state_in_place): the
# one JIT module no call builds, loaded where a phase merges (warm-up's ``MERGE``).
MERGE_JIT = JitBuild(MERGE, "", ())


@functools.cache
def registry() -> dict[str, KernelCall]:
    """{call: strategy} for the calls the default catalog (rules/backends.yaml) declares."""
    return build_registry(default_ruleset().backends)


def strategy(call: str) -> KernelCall:
    """The strategy that runs ``call``."""
    try:
        return registry()[call]
    except KeyError:
        raise AdapterCallError(f"the adapter has no kernel call {call!r}: rules/backends.yaml declares "
                         f"{sorted(registry())}") from None


def decode_phases(plan: Any) -> tuple[Any, ...]:
    """Every decode call a plan may run: ``plan.decode``, and where the plan carries a measured per-shape
    choice (``Plan.decode_choice``, issue 41 item 3) the alternative too (index ``ALTERNATIVE``)."""
    choice = getattr(plan, "decode_choice", None)
    return (plan.decode,) if choice is None else (plan.decode, choice.alternative)


def needs_finite_page_tail(plan: Any) -> bool:
    """Whether some phase's kernel needs the unused slots of last pages finite (``KernelCall``): any
    decode call the plan may run counts (an XQA alternative reads the fa2 plan's cache too)."""
    return any(strategy(pp.call).finite_page_tail for pp in (plan.prefill, *decode_phases(plan)))


def workspace_layout(phases: Any) -> dict[str, Any]:
    """Who shares the wrappers' workspace and who gets zeroed memory of its own, per phase plan
    (``KernelCall.workspace_role``). Returns {"roles": {phase: "shared" | "private"}, "shared":
    bytes, "private": bytes} for the given {phase: PhasePlan}; pure, so the CPU tests hold it.
    """
    roles = {ph: strategy(pp.call).workspace_role(pp) for ph, pp in phases.items()}
    shared = max((pp.workspace_bytes for ph, pp in phases.items() if roles[ph] == "shared"), default=0)
    private = max((pp.workspace_bytes for ph, pp in phases.items() if roles[ph] == "private"), default=0)
    return {"roles": roles, "shared": shared, "private": private}
