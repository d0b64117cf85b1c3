"""The SGLang server arguments attnplan reads, and the engine request that carries them to the rules."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from attnplan.errors import InvalidInputError, ModelConfigError

# arg_groups/fields/model.py kv_cache_dtype choices -> attnplan's KV dtype vocabulary (config.py);
# mxfp8 and fp4_mx_block16 have no FlashInfer kernel attnplan models: named, refused as input.
KV_DTYPES = {"auto": "auto", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "bf16": "bf16", "bfloat16": "bf16",
             "nvfp4": "nvfp4"}
KV_UNMODELLED = ("mxfp8", "fp4_mx_block16")
# The choices as SGLang lists them (its argparse error names them in this order).
CHOICES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")


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
    speculative_num_steps: Optional[int] = None      # unset: _auto_choose_speculative_params picks (steps, topk, drafts)
    tp_size: int = 1
    architecture: Optional[str] = None   # hf_config.architectures[0]: model overrides key on it

    def with_(self, **changes: Any) -> "SglangFlags":
        return replace(self, **changes)


def kv_dtype(raw: str) -> str:
    """SGLang's --kv-cache-dtype in attnplan's vocabulary; bad input names the accepted ones."""
    s = str(raw)   # exactly: SGLang's argparse choices are exact (no case folding, no stripping)
    if s in KV_DTYPES:
        return KV_DTYPES[s]
    if s in KV_UNMODELLED:
        raise InvalidInputError("kv_cache_dtype", f"--kv-cache-dtype {s} runs no FlashInfer kernel attnplan models",
                                tuple(KV_DTYPES))
    # SGLang 0.5.23's own refusal (argparse's invalid-choice error; the choices follow, in its order)
    raise InvalidInputError("kv_cache_dtype", f"SGLang 0.5.23 refuses it: argument --kv-cache-dtype: invalid choice: "
                            f"{raw!r}", CHOICES)


def architecture_of(raw: Optional[Mapping[str, Any]], where: str = "config.json") -> Optional[str]:
    """``hf_config.architectures[0]``, the key SGLang's model overrides are registered under
    (arg_groups/model_hook.py handle_model_specific_adjustments; model_override_base.py
    collect_model_override_declarations), validated once by type: the field is absent/null (no
    architecture: no override) or a list whose entries are class names (strings). Anything else -
    a dict, a number, a bool, a bare string (whose ``[0]`` is its first letter), a nested list, a list
    of dicts - is refused naming the field, never indexed or hashed."""
    if not raw:
        return None
    value = raw.get("architectures")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ModelConfigError(where, f"architectures must be a list of model class names (strings), "
                                      f"not {_json_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ModelConfigError(where, f"architectures[{i}] must be a model class name (a non-empty string), "
                                          f"not {_json_kind(item)}")
    return value[0].strip() if value else None


def _json_kind(v: Any) -> str:
    """A JSON value's kind, said without echoing the value (errors never carry input)."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string" if v.strip() else "a blank string"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "a list"
    return "null" if v is None else f"a {type(v).__name__}"


@dataclass(frozen=True)
class SglangEngine:
    """``engine=`` for plan_for / evaluate / plan_model: SGLang at ``version`` with these flags. Hashable,
    so answers stay memoised per flag set; it names itself as the engine string the rules resolve."""

    flags: SglangFlags = SglangFlags()
    version: Optional[str] = None   # None: the node's installed SGLang, else the newest modelled (resolve_engine)

    def __str__(self) -> str:
        return "sglang" if self.version is None else f"sglang=={self.version}"


def request_for_model(request: Any, raw: Optional[Mapping[str, Any]], where: str = "config.json") -> SglangEngine:
    """The SGLang request a model's plan hands the resolver (issue 39: one pipeline for ``plan --model-config``,
    ``launch_server`` and ``compare``): the caller's flags (an ``SglangEngine``), else SGLang's defaults, with
    the architecture read from the model's config.json (``architecture_of``, validated by type) wherever the
    flags name none - SGLang keys its model overrides and asserts on ``hf_config.architectures[0]``."""
    arch = architecture_of(raw, where)
    if isinstance(request, SglangEngine):
        if request.flags.architecture is not None or arch is None:
            return request
        return SglangEngine(request.flags.with_(architecture=arch), request.version)
    return SglangEngine(SglangFlags(architecture=arch))
