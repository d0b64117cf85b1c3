"""What verify knows about each kernel call besides how to invoke it (``calls.CALLS``): the
``verify:`` row of the call in rules/backends.yaml ``calls:`` (policy/rulepack.py VerifyCallSpec),
read wherever verify's behaviour depends on the call - never a test on the call's name.

Verify runs FlashInfer directly and must not depend on the adapter it checks (the adapter keeps
its own per-call strategies, attnplan/adapter/calls/), so it reads the rule data, not the adapter.
The JIT families name FlashInfer's module kinds (flashinfer/jit/attention/modules.py
get_batch_prefill_uri, get_batch_decode_uri, get_batch_mla_uri; flashinfer/jit/xqa.py
gen_xqa_module; the sink wrapper's customised prefill module, flashinfer/attention/_core.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Optional

from attnplan.errors import RulePackError
from attnplan.policy.rulepack import VerifyCallSpec as CallFacts

__all__ = ["CallFacts", "facts", "table"]


@lru_cache(maxsize=1)
def table() -> Mapping[str, CallFacts]:
    """Every call's verify row, from the shipped catalog."""
    from attnplan.policy.shipped import default_ruleset

    return {name: info.verify for name, info in default_ruleset().calls.items()}


def facts(call: str) -> CallFacts:
    found: Optional[CallFacts] = table().get(call)
    if found is None:
        raise RulePackError("attnplan/rules/backends.yaml", f"verify has no facts for the kernel call {call!r} "
                            f"(known: {sorted(table())}): add the call, with its verify: row, to calls:")
    return found
