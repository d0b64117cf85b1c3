"""Execution adapter: run a plan's FlashInfer kernels, checked and warmed up at startup.

    from attnplan import AttentionConfig, require_plan
    from attnplan.adapter import AttentionExecutor, StepInput

    ex = AttentionExecutor(require_plan(AttentionConfig(head_dim=128, num_qo_heads=32, num_kv_heads=8)))
    ex.warmup(progress=print)

Importing this package imports neither torch nor flashinfer; names resolve on first use, and
flashinfer is imported only when an executor is built with the FlashInfer backend.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AttentionExecutor": "executor",
    "StepInput": "step",
    "StepMetadata": "step",
    "PhaseBatch": "step",
    "build_step": "metadata",
    "PagedKVCache": "kv_cache",
    "allocate": "kv_cache",
    "AttentionParams": "params",
    "check_plan": "startup",
    "StartupMismatchError": "startup",
    "merge_states": "merge",
    "attention_ref": "reference",
    "ReferenceBackend": "reference",
    "WarmupReport": "warmup",
    "DecodeGraph": "graphs",
}

# DecodeGraph imports flashinfer: reachable by name, left out of ``import *``.
__all__ = sorted(n for n in _EXPORTS if n != "DecodeGraph")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attnplan.adapter' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
