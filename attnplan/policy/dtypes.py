"""The dtype vocabularies: one ``Literal`` per family, every tuple of names derived from it with
``typing.get_args`` (as vLLM keeps one ``CacheDType`` Literal, vllm/config/cache.py).

Names per layer (issue 25): the config asks ``kv_cache_dtype`` (``KVCacheDType``) and resolves it to the
element dtype the kernels see, ``kv_dtype`` (a ``KV_DTYPES`` or ``QUERY_DTYPES`` name: ``auto`` -> the query dtype, ``fp8`` ->
``fp8_e4m3``); the plan stores the cache as ``kv_storage_dtype`` and the kernels read it as
``kv_view_dtype`` (torch names, ``TorchDType`` or ``nvfp4``); FlashInfer takes it as ``kv_data_type``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal, get_args

# The 16-bit dtypes: a model in one keeps it for the query and the attention output (anything else writes bf16).
HalfDType = Literal["fp16", "bf16"]
# The model's dtype, which the query runs in (``--dtype``).
QueryDType = Literal[HalfDType, "fp32", "fp8_e4m3"]
# ``--kv-cache-dtype`` as asked.
KVCacheDType = Literal["auto", HalfDType, "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"]
# torch's names (``getattr(torch, name)``), as FlashInfer's arguments take them.
TorchDType = Literal["float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "uint8"]
# The KV element dtype a plan views the cache as: a torch dtype, or nvfp4 (packed uint8 + fp8 block scales).
KVViewDType = Literal[TorchDType, "nvfp4"]

HALF_DTYPES: tuple[str, ...] = get_args(HalfDType)
QUERY_DTYPES: tuple[str, ...] = get_args(QueryDType)
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KVCacheDType)
TORCH_DTYPES: tuple[str, ...] = get_args(TorchDType)
KV_VIEW_DTYPES: tuple[str, ...] = get_args(KVViewDType)

# KV cache spellings that name another element dtype: ``auto`` (the query dtype) and these.
KV_RESOLVES = {"fp8": "fp8_e4m3"}
KV_AUTO = "auto"
# The element dtypes a KV cache holds as asked for by name (config.kv_dtype besides the query dtype of ``auto``).
KV_DTYPES: tuple[str, ...] = tuple(k for k in KV_CACHE_DTYPES if k != KV_AUTO and k not in KV_RESOLVES)



def kv_element_dtype(kv_cache_dtype: str, dtype: str) -> str:
    """The KV element dtype the kernels see (config.kv_dtype): ``auto`` -> the query ``dtype``, ``fp8`` -> ``fp8_e4m3``."""
    if kv_cache_dtype == KV_AUTO:
        return dtype
    return KV_RESOLVES.get(kv_cache_dtype, kv_cache_dtype)


# nvfp4 (flashinfer/fp4_quantization.py nvfp4_quantize, sf_vec_size 16): E2M1 codes, two per byte, with one
# float8_e4m3fn scale per block of 16 elements.
NVFP4_BLOCK = 16
NVFP4_SCALE_DTYPE = "float8_e4m3fn"
# Bytes per element of each element dtype (vLLM's AttentionSpec.page_size_bytes arithmetic).
ELEMENT_BYTES: dict[str, Fraction] = {"fp16": Fraction(2), "bf16": Fraction(2), "fp32": Fraction(4),
                                      "fp8_e4m3": Fraction(1), "fp8_e5m2": Fraction(1),
                                      "nvfp4": Fraction(1, 2) + Fraction(1, NVFP4_BLOCK)}

# config vocabulary -> torch's name
TORCH_DTYPE: dict[str, str] = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp8_e4m3": "float8_e4m3fn",
                               "fp8_e5m2": "float8_e5m2"}
OUTPUT_FALLBACK = "bf16"   # the output dtype of a model that is not 16-bit


def output_torch_dtype(dtype: str) -> str:
    """The attention output's torch dtype for a model in ``dtype``."""
    return TORCH_DTYPE[dtype if dtype in HALF_DTYPES else OUTPUT_FALLBACK]


# (kv_storage_dtype, kv_view_dtype) of a quantized cache (seed 002): uint8 storage viewed as the type it holds;
# nvfp4 is packed uint8 and is never inferred from uint8. Any other cache is stored as it is viewed.
QUANTIZED_KV: dict[str, tuple[str, str]] = {"fp8_e4m3": ("uint8", "float8_e4m3fn"), "fp8_e5m2": ("uint8", "float8_e5m2"),
                                            "nvfp4": ("uint8", "nvfp4")}


# -- the engines' own spellings (one place: the config's aliases, the serve-line readers and the verdict's fixes) --
# Spellings of the query / model dtype the config takes (bfloat16 -> bf16, torch.float16 -> fp16, ...).
DTYPE_ALIASES: dict[str, str] = {
    "float16": "fp16", "half": "fp16", "fp16": "fp16", "f16": "fp16", "torch.float16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16",
    "float32": "fp32", "float": "fp32", "fp32": "fp32", "f32": "fp32", "torch.float32": "fp32",
    "fp8_e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3",
}
# Spellings of a KV cache dtype attnplan's own config takes (its ``plan --kv-cache-dtype``, a REST body).
KV_ALIASES: dict[str, str] = {
    "auto": "auto", "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "nvfp4": "nvfp4", "fp4": "nvfp4",
}
# vLLM 0.33's --kv-cache-dtype, exactly (vllm/config/cache.py CacheDType): each name -> the config's KV dtype, or
# None where it selects a cache layout no FlashInfer kernel attnplan models reads (the answer names the rule,
# ``vllm.kv-cache-dtype``). A spelling not listed here (fp4, bf16, half, fp8_e4m3fn) vLLM refuses at startup.
VLLM_CACHE_DTYPES: dict[str, str | None] = {
    "auto": "auto", "float16": "fp16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
    "nvfp4": "nvfp4",
    "fp8_inc": None, "fp8_ds_mla": None, "nvfp4_ds_mla": None, "nvfp4_4over6": None, "turboquant_k8v4": None,
    "turboquant_4bit_nc": None, "turboquant_k3v4_nc": None, "turboquant_3bit_nc": None, "octave_k3v4": None,
    "octave_k3v3": None, "octave_k3v3_compact": None, "ultraquant_4bit": None, "int4_per_token_head": None,
    "int8_per_token_head": None, "fp8_per_token_head": None,
}
# CacheDType values a modelled vLLM release does not have yet (its config/cache.py; 0.31/0.32's --kv-cache-dtype
# choices): a line for that release naming one is refused as that release refuses it.
VLLM_CACHE_DTYPES_ABSENT: dict[str, frozenset[str]] = {
    "0.31.0": frozenset({"ultraquant_4bit", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact"}),
    "0.32.0": frozenset({"octave_k3v4", "octave_k3v3", "octave_k3v3_compact"}),
}
# The config's KV dtype -> the spelling each engine's command line takes is data: backends.yaml
# engines.<name>.kv_dtype_spelling (issue 36 item 6: no engine names in policy code).
