"""The SGLang server arguments attnplan reads, and the engine request that carries them to the rules."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from attnplan.policy.errors import InvalidInputError

# arg_groups/fields/model.py kv_cache_dtype choices -> attnplan's KV dtype vocabulary (config.py);
# mxfp8 and fp4_mx_block16 have no FlashInfer kernel attnplan models: named, refused as input.
KV_DTYPES = {"auto": "auto", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "bf16": "bf16", "bfloat16": "bf16",
             "nvfp4": "nvfp4"}
KV_UNMODELLED = ("mxfp8", "fp4_mx_block16")


@dataclass(frozen=True)
class SglangFlags:
    """SGLang's ServerArgs fields that decide attention (arg_groups/fields/{exec_,model,schedule,spec,parallel}.py).

    Under ``SglangEngine`` the resolver takes the backend names, architecture and EAGLE top-k from here and
    the KV dtype, page size, deterministic mode and speculation from the attention config (launch.py puts
    them there), so a suggestion that changes a config field is resolved by SGLang's rules too."""

    attention_backend: Optional[str] = None
    prefill_attention_backend: Optional[str] = None
    decode_attention_backend: Optional[str] = None
    kv_cache_dtype: str = "auto"
    page_size: Optional[int] = None
    enable_deterministic_inference: bool = False
    speculative_algorithm: Optional[str] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    tp_size: int = 1
    architecture: Optional[str] = None   # hf_config.architectures[0]: model overrides key on it

    def with_(self, **changes: Any) -> "SglangFlags":
        return replace(self, **changes)


def kv_dtype(raw: str) -> str:
    """SGLang's --kv-cache-dtype in attnplan's vocabulary; bad input names the accepted ones."""
    s = str(raw).strip().lower()
    if s in KV_DTYPES:
        return KV_DTYPES[s]
    if s in KV_UNMODELLED:
        raise InvalidInputError("kv_cache_dtype", f"--kv-cache-dtype {s} runs no FlashInfer kernel attnplan models",
                                tuple(KV_DTYPES))
    raise InvalidInputError("kv_cache_dtype", f"SGLang 0.5.23 has no --kv-cache-dtype {raw!r}",
                            tuple(KV_DTYPES) + KV_UNMODELLED)


@dataclass(frozen=True)
class SglangEngine:
    """``engine=`` for plan_for / evaluate / plan_model: SGLang at ``version`` with these flags. Hashable,
    so answers stay memoised per flag set; it names itself as the engine string the rules resolve."""

    flags: SglangFlags = SglangFlags()
    version: str = "0.5.23"

    def __str__(self) -> str:
        return f"sglang=={self.version}"
