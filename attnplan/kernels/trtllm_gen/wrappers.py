"""The Python wrappers' own checks before they reach the trtllm-gen launcher (same text in flashinfer-python
0.6.13 and 0.7.2.post1):

* ``flashinfer.decode.trtllm_batch_decode_with_kv_cache`` / ``flashinfer.prefill.trtllm_batch_context_with_kv_cache``
  (backend trtllm-gen): an nvfp4 output asserts an fp8 query ("query must be fp8 when out_dtype is nvfp4.");
  any other output must be the query dtype, fp16 or bf16 (``ValueError(f"Unsupported out_dtype: ...")``).
* ``flashinfer.prefill.trtllm_ragged_attention_deepseek``: head dims (q, k, v) = (192, 192, 128), (128, 128, 128)
  or (256, 256, 256) (assert "Unsupported head dimensions"); an fp8 query with an fp8 ``out`` raises
  ("FP8 output is not supported for trtllm_ragged_attention_deepseek").
* ``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` (_check_trtllm_gen_mla_shape): (kv_lora_rank, rope)
  in supported_mla_head_dimensions = (512, 64), (256, 64), (512, 0) ("Unsupported MLA dimensions").
"""

from __future__ import annotations

from typing import Optional

_FP8 = ("E4M3", "E5M2")
_16 = ("FP16", "BF16")
RAGGED_DIMS = ((192, 128), (128, 128), (256, 256))
MLA_DIMS = ((512, 64), (256, 64), (512, 0))


def wrapper_error(entry: str, dtype_q: str, dtype_o: str, head_dim_qk: int, head_dim_v: int) -> Optional[str]:
    """The error FlashInfer's ``entry`` function raises before the launcher, or None."""
    if entry == "trtllm_ragged_attention_deepseek":
        if (head_dim_qk, head_dim_v) not in RAGGED_DIMS:
            return (f"trtllm_ragged_attention_deepseek asserts head dims (192, 192, 128), (128, 128, 128) or "
                    f"(256, 256, 256); got ({head_dim_qk}, {head_dim_qk}, {head_dim_v})")
        if dtype_q in _FP8 and dtype_o in _FP8:
            return "trtllm_ragged_attention_deepseek: FP8 output is not supported (fp8 query, fp8 out)"
        return None
    if entry == "trtllm_batch_decode_with_kv_cache_mla":
        rank, rope = head_dim_v, head_dim_qk - head_dim_v
        if (rank, rope) not in MLA_DIMS:
            return (f"trtllm_batch_decode_with_kv_cache_mla: Unsupported MLA dimensions kv_lora_rank={rank}, "
                    f"qk_rope_head_dim={rope} (supported: (512, 64), (256, 64), (512, 0))")
        return None
    if dtype_o == "E2M1":
        if dtype_q != "E4M3":
            return f"{entry} asserts an fp8 query when out_dtype is nvfp4 (query {dtype_q})"
        return None
    if dtype_o != dtype_q and dtype_o not in _16:
        return f"{entry} raises Unsupported out_dtype: {dtype_o} (the query dtype, fp16 or bf16; query {dtype_q})"
    return None
