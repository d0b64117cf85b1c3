"""Node facts: what a node has, each value tagged with how we know it (docs/contract.md, The plan).

``measured``: read off this machine (NVML, installed packages, an HTTP probe);
``declared``: given by a caller (``--device B200``, a REST body);
``assumed``: filled in by a default (a simulated node's flashinfer version);
``unknown``: could not be found out. Rules treat an unknown value as failing (fail closed).
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .capability import format_capability


class Source(str, Enum):
    measured = "measured"
    declared = "declared"
    assumed = "assumed"
    unknown = "unknown"


class Fact(BaseModel):
    """One value and how we know it; ``detail`` says where it came from or why it is unknown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: Any = None
    source: Source = Source.unknown
    detail: Optional[str] = None

    @classmethod
    def measured(cls, value: Any, detail: str | None = None) -> "Fact":
        return cls(value=value, source=Source.measured, detail=detail)

    @classmethod
    def declared(cls, value: Any, detail: str | None = None) -> "Fact":
        return cls(value=value, source=Source.declared, detail=detail)

    @classmethod
    def assumed(cls, value: Any, detail: str | None = None) -> "Fact":
        return cls(value=value, source=Source.assumed, detail=detail)

    @classmethod
    def unknown(cls, detail: str | None = None) -> "Fact":
        return cls(value=None, source=Source.unknown, detail=detail)


def _unknown() -> Fact:
    return Fact.unknown()


class NodeFacts(BaseModel):
    """Everything the rules may read about a node. Frozen, so it can key caches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hostname: Fact = Field(default_factory=_unknown)
    gpu_name: Fact = Field(default_factory=_unknown, description="device name (first GPU)")
    capability: Fact = Field(default_factory=_unknown, description="compute capability as int M*10+m")
    gpu_count: Fact = Field(default_factory=_unknown)
    gpu_memory_gib: Fact = Field(default_factory=_unknown)
    driver_version: Fact = Field(default_factory=_unknown)
    mig_enabled: Fact = Field(default_factory=_unknown)
    torch_version: Fact = Field(default_factory=_unknown)
    torch_cuda_version: Fact = Field(default_factory=_unknown)
    flashinfer_version: Fact = Field(default_factory=_unknown)
    flashinfer_cubin_version: Fact = Field(default_factory=_unknown)
    cubin_dir: Fact = Field(default_factory=_unknown, description="FLASHINFER_CUBIN_DIR")
    cubin_dir_has_cubins: Fact = Field(default_factory=_unknown)
    artifactory_url: Fact = Field(default_factory=_unknown, description="FLASHINFER_CUBINS_REPOSITORY")
    artifactory_reachable: Fact = Field(default_factory=_unknown)
    batch_invariant_env: Fact = Field(default_factory=_unknown, description="VLLM_BATCH_INVARIANT")
    jit_toolchain: Fact = Field(default_factory=_unknown,
                                description="FlashInfer can build JIT modules here: nvcc found, or flashinfer-jit-cache installed")
    vllm_version: Fact = Field(default_factory=_unknown, description="installed vllm version (None: not installed)")
    sglang_version: Fact = Field(default_factory=_unknown, description="installed sglang version (None: not installed)")
    flashinfer_jit_cache_version: Fact = Field(default_factory=_unknown,
                                               description="installed flashinfer-jit-cache version (None: not installed)")
    # the node's own trtllm-gen kernel table (kernels/trtllm_gen/node.py): {cubin_dir, pin, checksums_sha256, origin}
    # when FlashInfer's table for its pin is on disk and verified, {error} when one is there but is not FlashInfer's
    # (corrupt, truncated, foreign), None when absent (FlashInfer downloads its pin's table at first use): where
    # present, it decides the trtllm-gen kernel facts
    trtllm_kernel_table: Fact = Field(default_factory=_unknown,
                                      description="the node's own trtllm-gen kernel table (None: not on disk)")
    flashinfer_import_error: Fact = Field(default_factory=_unknown,
                                          description="what `import flashinfer` raises over the installed kernel wheels "
                                                      "(FlashInfer's own words; None: it imports)")

    @model_validator(mode="before")
    @classmethod
    def _capability_int(cls, data: Any) -> Any:
        # JSON carries "10.3"; the rules compare ints (103).
        if isinstance(data, dict):
            cap = data.get("capability")
            raw = cap.get("value") if isinstance(cap, dict) else getattr(cap, "value", None)
            if isinstance(raw, (str, float)) and not isinstance(raw, bool):
                from .capability import parse_capability

                value = parse_capability(raw)
                data = dict(data)
                data["capability"] = (dict(cap, value=value) if isinstance(cap, dict)
                                      else cap.model_copy(update={"value": value}))
        return data

    def value(self, name: str) -> Any:
        return getattr(self, name).value

    def with_fact(self, **facts: Fact) -> "NodeFacts":
        return self.model_copy(update=facts)

    @property
    def capability_str(self) -> str | None:
        return format_capability(self.capability.value)

    def fingerprint(self) -> str:
        """Identical device + software facts -> identical fingerprint (preflight groups by it)."""
        keys = ("gpu_name", "capability", "gpu_count", "gpu_memory_gib", "driver_version", "mig_enabled",
                "torch_version", "torch_cuda_version", "flashinfer_version", "flashinfer_cubin_version",
                "cubin_dir_has_cubins", "artifactory_reachable", "batch_invariant_env",
                "jit_toolchain", "vllm_version", "sglang_version", "flashinfer_jit_cache_version", "flashinfer_import_error", "trtllm_kernel_table")
        data = {k: getattr(self, k).value for k in keys}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def summary(self) -> dict[str, Any]:
        """Plain values only (for tables and labels)."""
        out = {name: getattr(self, name).value for name in type(self).model_fields}
        out["capability"] = self.capability_str
        return out
