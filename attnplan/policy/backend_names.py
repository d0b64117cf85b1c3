"""vLLM's attention-backend names -> attnplan's backend choices, as one explicit table.

vLLM 0.33 names its backends in ``AttentionBackendEnum``
(/work/ref/vllm-src/vllm/v1/attention/backends/registry.py) and its MLA prefill backends in
``MLAPrefillBackendEnum`` (v1/attention/backends/mla/prefill/registry.py). attnplan plans
FlashInfer / TRTLLM-gen kernels, so only the FlashInfer names map onto its backends; every other vLLM name is
vLLM's own backend, kept by name (``AttentionConfig.engine_attention_backend``) and judged by vLLM's own
validation in the verdict (policy/verdict.py) - never a silent ``auto``.

Decisions (each cites the vLLM code it mirrors):
- ``FLASHINFER`` -> ``flashinfer``: vLLM's FlashInfer backend itself chooses between FlashInfer's
  FA2/FA3 wrappers and the TRTLLM-gen kernels per phase (v1/attention/backends/flashinfer.py,
  ``use_trtllm_attention`` in utils/flashinfer.py), so it selects with the engine's own order like
  ``auto`` (backends.yaml ``engines.*.auto_names``) - but it is kept, because vLLM refuses it for an MLA
  model (``validate_configuration``: "MLA not supported"; rule ``vllm.backend-kind``).
- ``FLASHINFER_MLA`` -> ``flashinfer-mla``: FlashInfer MLA decode with vLLM's own MLA prefill choice
  (v1/attention/backends/mla/flashinfer_mla.py; prefill: ``get_mla_prefill_backend_cls``), refused for
  a standard model.
- ``TRTLLM_RAGGED`` -> ``trtllm-ragged``: the MLA prefill backend
  (v1/attention/backends/mla/prefill/trtllm_ragged.py); in ``vllm serve`` it is chosen with
  ``--attention-config '{"mla_prefill_backend": "TRTLLM_RAGGED"}'``.
"""

from __future__ import annotations

from typing import Literal, Optional, get_args


# attnplan's own backend choices (AttentionConfig.attention_backend): here, beside the vLLM names that
# map onto them, so that the config imports the table and the table never imports the config.
Backend = Literal[
    "auto", "flashinfer", "flashinfer-mla", "fa2", "fa3", "trtllm-gen", "xqa", "fa2-mla", "fa3-mla", "trtllm-gen-mla", "trtllm-ragged"
]
BACKEND_CHOICES: tuple[str, ...] = get_args(Backend)

# vLLM enum name -> attnplan backend choice.
VLLM_TO_ATTNPLAN: dict[str, str] = {
    "FLASHINFER": "flashinfer",
    "FLASHINFER_MLA": "flashinfer-mla",
    "TRTLLM_RAGGED": "trtllm-ragged",
}

# Every other name vLLM 0.33 knows (registry.py AttentionBackendEnum + the MLA prefill enum):
# real vLLM backends that do not run FlashInfer kernels attnplan has rules for.
VLLM_OTHER_BACKENDS: frozenset[str] = frozenset({
    "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "TRITON_FLASH_ATTN",
    "ROCM_ATTN", "ROCM_SEGMENTED_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA",
    "ROCM_AITER_MLA_SPARSE", "XPU_MLA_SPARSE", "TORCH_SDPA", "TRITON_FLASHINFER", "TOKENSPEED_MLA",
    "FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120", "FLASHINFER_MLA_SPARSE_SM90", "TRITON_MLA",
    "CUTLASS_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4",
    "ROCM_FLASHMLA_SPARSE_DSV4", "FLASHMLA_SPARSE_DSV41", "FLASHINFER_MLA_SPARSE_DSV41",
    "ROCM_FLASHMLA_SPARSE_DSV41", "FLASHMLA_MEGA_ATTN_DSV41", "B12X", "FLASH_ATTN_MLA",
    "FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4", "MINIMAX_M3_SPARSE", "CUTLASS_MSA",
    "TRITON_MSA", "STEP5_DSA", "NO_ATTENTION", "FLEX_ATTENTION", "HPC_ATTN", "ROCM_AITER_UNIFIED_ATTN",
    "CPU_ATTN", "CPU_MLA", "AMX_MLA", "TURBOQUANT", "ROCM_OCTAVE", "ULTRAQUANT", "CPU", "ZEN_CPU",
})


def vllm_own_backend(raw: str) -> Optional[str]:
    """vLLM's enum name for one of its own backends that run no FlashInfer kernel (FLASH_ATTN, TRITON_MLA, ...),
    or None. Such a backend is accepted as vLLM accepts it: the verdict judges it by vLLM's own validation
    (backends.yaml engines.vllm.engine_backend) and says that attnplan does not model its kernels."""
    key = str(raw).strip().upper().replace("-", "_")
    return key if key in VLLM_OTHER_BACKENDS else None


def backend_choice(raw: Optional[str]) -> Optional[str]:
    """attnplan's backend for a ``--attention-backend`` value: a vLLM enum name (any case) or one
    of attnplan's own choices. vLLM's own non-FlashInfer backends come back as their enum name
    (AttentionConfig keeps them as ``engine_attention_backend``)."""
    if raw is None:
        return None
    name = str(raw).strip()
    key = name.upper().replace("-", "_")
    if key in VLLM_TO_ATTNPLAN:
        return VLLM_TO_ATTNPLAN[key]
    if key in VLLM_OTHER_BACKENDS:
        return key
    low = name.lower().replace("_", "-")
    if low in BACKEND_CHOICES:
        return low
    return name  # not a vLLM name: AttentionConfig validates it (and its own spellings)
