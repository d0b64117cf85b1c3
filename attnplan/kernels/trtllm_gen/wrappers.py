"""The Python wrappers' own checks before they reach the trtllm-gen launcher (same text in flashinfer-python
0.6.13 and 0.7.2.post1):

* ``flashinfer.decode.trtllm_batch_decode_with_kv_cache`` / ``flashinfer.prefill.trtllm_batch_context_with_kv_cache``
  (backend trtllm-gen): an nvfp4 output asserts an fp8 query ("query must be fp8 when out_dtype is nvfp4.");
  any other output must be the query dtype, fp16 or bf16 (``ValueError(f"Unsupported out_dtype: ...")``).
* ``flashinfer.prefill.trtllm_ragged_attention_deepseek``: head dims (q, k, v) = (192, 192, 128), (128, 128, 128)
  or (256, 256, 256) (assert "Unsupported head dimensions"); an fp8 query with an fp8 ``out`` raises
  ("FP8 output is not supported for trtllm_ragged_attention_deepseek").
* ``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` (_check_trtllm_gen_mla_shape): (kv_lora_rank, rope)
  in supported_mla_head_dimensions = (512, 64), (256, 64), (512, 0) ("Unsupported MLA dimensions"); 0.6.13's
  list has no (512, 0). Its output is bf16 (check_shape_dtype_device(out, ..., torch.bfloat16, ...), every
  release). From 0.6.18 (mla/_core.py _trtllm_batch_decode_with_kv_cache_mla_impl), backend "trtllm-gen":
  "trtllm-gen requires block_size in (32, 64)", "trtllm-gen MLA decode does not support 64 < num_heads_q < 128",
  and the rope-less (512, 0) shape only sparse ("Native qk_rope_head_dim=0 TRTLLM-GEN MLA requires
  sparse_mla_top_k > 0"; a plan's MLA decode is dense); from 0.7.0 a packed uint8 (NVFP4) latent cache is
  refused ("Dense MLA decode does not support packed uint8 KV caches yet").

Held to the installed flashinfer's own wrappers (0.7.2.post1) by attnplan/oracle/trtllm_wrappers.py.
"""

from __future__ import annotations

from typing import Optional

_FP8 = ("E4M3", "E5M2")
_16 = ("FP16", "BF16")
RAGGED_DIMS = ((192, 128), (128, 128), (256, 256))
MLA_DIMS = ((512, 64), (256, 64), (512, 0))
MLA_DIMS_0_6_13 = ((512, 64), (256, 64))
# select.py CODES whose wrappers carry the 0.6.18 MLA checks / the 0.7.0 packed-cache check
_MLA_0_6_18 = ("0.6.18", "0.7.0", "0.7.1", "0.7.2.post1")
_MLA_0_7_0 = ("0.7.0", "0.7.1", "0.7.2.post1")


def wrapper_error(entry: str, dtype_q: str, dtype_o: str, head_dim_qk: int, head_dim_v: int, *,
                  dtype_kv: Optional[str] = None, page_size: Optional[int] = None,
                  num_heads_q: Optional[int] = None, code: str = "0.7.2.post1") -> Optional[str]:
    """The error FlashInfer's ``entry`` function raises before the launcher, or None. ``code``: the release
    family (kernels/trtllm_gen/select.py CODES key) whose wrapper runs; the MLA checks that read the KV dtype,
    page or head count are skipped where they are not given."""
    if entry == "trtllm_ragged_attention_deepseek":
        if (head_dim_qk, head_dim_v) not in RAGGED_DIMS:
            return (f"trtllm_ragged_attention_deepseek asserts head dims (192, 192, 128), (128, 128, 128) or "
                    f"(256, 256, 256); got ({head_dim_qk}, {head_dim_qk}, {head_dim_v})")
        if dtype_q in _FP8 and dtype_o in _FP8:
            return "trtllm_ragged_attention_deepseek: FP8 output is not supported (fp8 query, fp8 out)"
        return None
    if entry == "trtllm_batch_decode_with_kv_cache_mla":
        rank, rope = head_dim_v, head_dim_qk - head_dim_v
        new = code in _MLA_0_6_18
        dims = MLA_DIMS if new else MLA_DIMS_0_6_13
        if new and dtype_kv == "E2M1" and code in _MLA_0_7_0:
            return ("trtllm_batch_decode_with_kv_cache_mla: Dense MLA decode does not support packed uint8 KV "
                    "caches yet (NVFP4 latent cache)")
        if new and (rank, rope) == (512, 0):
            return ("trtllm_batch_decode_with_kv_cache_mla: Native qk_rope_head_dim=0 TRTLLM-GEN MLA requires "
                    "sparse_mla_top_k > 0 (a dense MLA decode)")
        if (rank, rope) not in dims:
            return (f"trtllm_batch_decode_with_kv_cache_mla: Unsupported MLA dimensions kv_lora_rank={rank}, "
                    f"qk_rope_head_dim={rope} (supported: {', '.join(map(str, dims))})")
        if new and num_heads_q is not None and 64 < num_heads_q < 128:
            return (f"trtllm_batch_decode_with_kv_cache_mla: trtllm-gen MLA decode does not support "
                    f"64 < num_heads_q < 128; got num_heads_q={num_heads_q}")
        if new and page_size is not None and page_size not in (32, 64):
            return f"trtllm_batch_decode_with_kv_cache_mla: trtllm-gen requires block_size in (32, 64), got {page_size}"
        if dtype_o != "BF16":
            return f"trtllm_batch_decode_with_kv_cache_mla: Invalid dtype of out: expected bfloat16, got {dtype_o}"
        return None
    if dtype_o == "E2M1":
        if dtype_q != "E4M3":
            return f"{entry} asserts an fp8 query when out_dtype is nvfp4 (query {dtype_q})"
        return None
    if dtype_o != dtype_q and dtype_o not in _16:
        return f"{entry} raises Unsupported out_dtype: {dtype_o} (the query dtype, fp16 or bf16; query {dtype_q})"
    return None
