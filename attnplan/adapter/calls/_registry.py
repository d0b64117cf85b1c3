"""Every strategy, and the registry keyed by the call names rules/backends.yaml declares.

``build_registry`` reads a catalog's ``calls``, ``sink_calls`` and ``mla_calls`` (each a
``CallSpec`` with its ``call``) and fails on the first that no strategy serves, or that the data
and the strategy disagree on (entry point, LSE, phase): rule data the adapter cannot run is an
error when the registry is built, not at the first request that names it.
"""

from __future__ import annotations

from typing import Any, Mapping

from attnplan.policy import RulePackError

from ._contract import KernelCall
from .mla_paged_decode import MlaPagedDecode
from .paged_decode import PagedDecode
from .paged_prefill import PagedPrefill
from .ragged_prefill import RaggedPrefill
from .sink import Sink
from .trtllm_context import TrtllmContext
from .trtllm_decode import TrtllmDecode
from .trtllm_mla_decode import TrtllmMlaDecode
from .trtllm_ragged import TrtllmRagged
from .xqa_decode import XqaDecode

STRATEGIES: dict[str, KernelCall] = {s.name: s for s in (
    PagedPrefill(), PagedDecode(), Sink(), XqaDecode(), TrtllmContext(), TrtllmDecode(), MlaPagedDecode(),
    TrtllmMlaDecode(), RaggedPrefill(), TrtllmRagged(),
)}

CALL_TABLES = ("calls", "sink_calls", "mla_calls")


def build_registry(backends: Mapping[str, Any], strategies: Mapping[str, KernelCall] = STRATEGIES,
                   source: str = "backends.yaml") -> dict[str, KernelCall]:
    """{call name: strategy} for every call the catalog ``backends`` ({name: BackendSpec}) declares."""
    registry: dict[str, KernelCall] = {}
    for backend, spec in backends.items():
        for table in CALL_TABLES:
            for phase, c in getattr(spec, table).items():
                where = f"backends.{backend}.{table}.{phase}"
                st = strategies.get(c.call)
                if st is None:
                    raise RulePackError(source, f"{where} names the kernel call {c.call!r}, which the adapter has no "
                                                f"strategy for (it has {sorted(strategies)}); add a module for it to "
                                                "attnplan/adapter/calls/ and list it in _registry.STRATEGIES")
                wrong = [f"{what} {theirs!r} (the strategy's: {ours!r})" for what, theirs, ours in (
                    ("entry_point", c.entry_point, st.entry_point), ("returns_lse", c.returns_lse, st.returns_lse))
                    if theirs != ours]
                if phase not in st.phases:
                    wrong.append(f"phase {phase!r} (the strategy runs {list(st.phases)})")
                if wrong:
                    raise RulePackError(source, f"{where}: the kernel call {c.call!r} has " + "; ".join(wrong) +
                                        f"; fix the data or attnplan/adapter/calls/{c.call}.py")
                registry[c.call] = st
    return registry
