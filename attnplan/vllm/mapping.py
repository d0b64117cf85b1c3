"""vLLM's view of a model -> attnplan's per-rank AttentionConfig.

Two entry points share the per-rank arithmetic of vLLM 0.33 ``ModelConfig``
(/work/ref/vllm-src/vllm/config/model.py):

- ``get_num_attention_heads``: ``total_heads // tensor_parallel_size``;
- ``get_num_kv_heads``: ``max(1, total_kv_heads // tensor_parallel_size)`` (KV heads replicated
  when tp > kv heads), and 1 for MLA;
- ``verify_with_parallel_config``: the startup errors (heads not divisible by tp; decode context
  parallelism limits for GQA/MQA), reproduced word for word by :func:`startup_errors`.

``config_from_vllm(vllm_config)`` reads a live ``VllmConfig`` (the plugin, or by hand);
``per_rank_fields`` applies the same arithmetic to fields read from a config.json (the CLI).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from attnplan.policy import AttentionConfig
from attnplan.policy import make_config

from attnplan.policy.parallel import per_rank_fields, per_rank_heads, startup_errors

from .backends import backend_choice


_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def _kv_cache_dtype(cache_dtype: Any) -> str:
    s = str(getattr(cache_dtype, "value", cache_dtype) or "auto")
    return s


def config_from_vllm(vllm_config: Any) -> AttentionConfig:
    """One rank's AttentionConfig from vLLM's ``VllmConfig``: the whole mapping, in one place.

    Reads ``model_config.get_head_size()``, ``get_num_attention_heads(parallel_config)``,
    ``get_num_kv_heads(parallel_config)``, ``use_mla`` and the MLA dims of ``hf_text_config``,
    ``dtype``, ``get_sliding_window()``, the soft-cap and sinks of ``hf_text_config``,
    ``cache_config.cache_dtype``/``block_size``, ``speculative_config.num_speculative_tokens``,
    ``parallel_config.decode_context_parallel_size`` and ``attention_config.backend``.
    """
    mc = vllm_config.model_config
    pc = vllm_config.parallel_config
    cc = vllm_config.cache_config
    text = getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)
    fields: dict[str, Any] = {
        "num_qo_heads": int(mc.get_num_attention_heads(pc)),
        "dtype": _DTYPES.get(str(mc.dtype), str(mc.dtype)),
        "kv_cache_dtype": _kv_cache_dtype(getattr(cc, "cache_dtype", "auto")),
        "dcp_world_size": int(getattr(pc, "decode_context_parallel_size", 1) or 1),
    }
    if getattr(mc, "use_mla", False):
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            fields[key] = int(getattr(text, key))
    else:
        fields["head_dim"] = int(mc.get_head_size())
        fields["num_kv_heads"] = int(mc.get_num_kv_heads(pc))
    bs = getattr(cc, "block_size", None)
    if isinstance(bs, int) and bs > 0:
        fields["page_size"] = bs
    get_sw = getattr(mc, "get_sliding_window", None)
    sw = get_sw() if callable(get_sw) else getattr(text, "sliding_window", None)
    if isinstance(sw, int) and sw > 0:
        fields["sliding_window"] = sw
    cap = getattr(text, "attn_logit_softcapping", None)
    if isinstance(cap, (int, float)) and cap > 0:
        fields["logits_soft_cap"] = float(cap)
    if getattr(text, "model_type", None) == "gpt_oss" or getattr(mc, "hf_config", None) is not None and \
            getattr(mc.hf_config, "model_type", None) == "gpt_oss":
        fields["sinks"] = True  # GPT-OSS attention sinks (vllm/model_executor/models/gpt_oss.py)
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is not None and getattr(spec, "num_speculative_tokens", None):
        fields["num_speculative_tokens"] = int(spec.num_speculative_tokens)
    ac = getattr(vllm_config, "attention_config", None)
    backend = getattr(ac, "backend", None)
    if backend is not None:
        fields["attention_backend"] = backend_choice(getattr(backend, "name", str(backend)))
    # config/attention.py AttentionConfig: the keys that steer vLLM's FlashInfer (vllm/serve.py attention_config_fields)
    if getattr(ac, "use_trtllm_attention", None) is not None:
        fields["use_trtllm_attention"] = bool(ac.use_trtllm_attention)
    if getattr(ac, "disable_flashinfer_q_quantization", False) is True:
        fields["disable_flashinfer_q_quantization"] = True
    return make_config(fields)
