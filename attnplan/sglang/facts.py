"""The facts SGLang's resolution rows read (backends.yaml ``engines.sglang.native.pipeline`` / ``build`` /
``choices``), with what each means. The rows' conditions are the rule packs' condition language
(policy/conditions.py, the one evaluator) over these names; a row naming any other fact fails the load.

Three kinds: SGLang's flags as given (``sglang.flag.*``: never change), the model and platform (ModelConfig,
utils/common.py's platform predicates: one fact per ``native.platform`` entry), and the server arguments as
the pipeline has resolved them so far (``sglang.attention_backend`` ... ``sglang.page_size``), which a row's
``set`` changes for the rows after it.
"""

from __future__ import annotations

# the resolved server arguments a row may change (``set:``), by their ServerArgs names
STATE = {
    "attention_backend": "--attention-backend as resolved so far",
    "prefill_attention_backend": "--prefill-attention-backend as resolved so far",
    "decode_attention_backend": "--decode-attention-backend as resolved so far",
    "kv_cache_dtype": "--kv-cache-dtype as resolved so far",
    "page_size": "--page-size as resolved so far (null: unset)",
    "speculative_eagle_topk": "the EAGLE top-k as resolved so far (the flag's, else _auto_choose_speculative_params')",
}

FACTS: dict[str, str] = {
    **{f"sglang.{k}": v for k, v in STATE.items()},
    # model_override_base.py attention_backends_of: a phase's split flag, else the base backend
    "sglang.prefill": "the prefill backend so far: --prefill-attention-backend, else --attention-backend",
    "sglang.decode": "the decode backend so far: --decode-attention-backend, else --attention-backend",
    # the flags as given (before any hook)
    "sglang.flag.attention_backend": "--attention-backend as given",
    "sglang.flag.prefill_attention_backend": "--prefill-attention-backend as given",
    "sglang.flag.decode_attention_backend": "--decode-attention-backend as given",
    "sglang.flag.kv_cache_dtype": "--kv-cache-dtype as given",
    "sglang.flag.page_size": "--page-size as given (null: unset)",
    "sglang.flag.speculative_eagle_topk": "--speculative-eagle-topk as given (null: unset)",
    "sglang.flag.speculative_num_steps": "--speculative-num-steps as given (null: unset)",
    "sglang.speculative_algorithm": "--speculative-algorithm, upper-cased (null: none)",
    "sglang.flag.enable_deterministic_inference": "--enable-deterministic-inference",
    # the model (configs/model_config.py ModelConfig)
    "sglang.architecture": "hf_config.architectures[0]",
    "sglang.is_mla": "the model runs MLA (attention_arch == MLA)",
    "sglang.sinks": "model_config.has_attention_sinks",
    "sglang.asymmetric_kv": "model_config.has_asymmetric_kv (head_dim != v_head_dim)",
    "sglang.group_size": "query heads per KV head on one rank",
    # the platform
    "sglang.capability_major": "the GPU's compute capability major",
    # model_override_base.py get_default_attn_backend for these flags (choices.default): what
    # model_overrides/qwen3_5.py asks first
    "sglang.default_backend": "get_default_attn_backend's answer for these flags",
    # the backend factories (build rows): the phase being built and its backend
    "sglang.phase": "the phase whose backend the model runner builds (build rows)",
    "sglang.phase_backend": "that phase's backend (build rows)",
}


def names(platforms: list[str]) -> frozenset[str]:
    """Every fact a row may read, with one ``sglang.<predicate>`` per platform predicate (utils/common.py
    _check_cuda_device_version partials: backends.yaml ``native.platform``)."""
    return frozenset(FACTS) | {f"sglang.{p}" for p in platforms}
