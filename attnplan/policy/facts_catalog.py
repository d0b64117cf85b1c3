"""The names a rule may read, what each means, and how to show its value.

A rule pack naming a fact not listed here is rejected at load time, so a typo in a rule can
never silently make it pass.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .capability import capability_major, format_capability
from .config import AttentionConfig
from .facts import NodeFacts


class FactInfo(NamedTuple):
    description: str
    display: Callable[[Any], str]


def _plain(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _cap(v: Any) -> str:
    return format_capability(v) if isinstance(v, int) else _plain(v)


def _major(v: Any) -> str:
    return f"{v}.x" if isinstance(v, int) else _plain(v)


FACTS: dict[str, FactInfo] = {
    "backend": FactInfo("the candidate backend being checked", _plain),
    "phase": FactInfo("prefill or decode", _plain),
    "phase.query_dtype": FactInfo("the query dtype this phase runs with (the engine's choice: vLLM quantizes it for fp8 KV)", _plain),
    "config.attention_backend": FactInfo("the backend asked for (auto, or a name such as flashinfer / flashinfer-mla)", _plain),
    "config.head_dim": FactInfo("query/key head size (MLA: qk_nope + qk_rope)", _plain),
    "config.head_dim_vo": FactInfo("value/output head size", _plain),
    "config.num_qo_heads": FactInfo("query heads", _plain),
    "config.num_kv_heads": FactInfo("KV heads", _plain),
    "config.group_size": FactInfo("GQA group: query heads per KV head", _plain),
    "config.dtype": FactInfo("query dtype", _plain),
    "config.kv_cache_dtype": FactInfo("KV cache dtype as asked", _plain),
    "config.kv_dtype": FactInfo("KV element dtype (auto -> query dtype, fp8 -> fp8_e4m3)", _plain),
    "config.page_size": FactInfo("tokens per KV page", _plain),
    "config.sliding_window": FactInfo("sliding window", _plain),
    "config.logits_soft_cap": FactInfo("logits soft-cap", _plain),
    "config.sinks": FactInfo("attention sinks", _plain),
    "config.num_speculative_tokens": FactInfo("speculative tokens per decode step", _plain),
    "config.is_mla": FactInfo("multi-head latent attention", _plain),
    "config.kv_lora_rank": FactInfo("MLA compressed KV rank", _plain),
    "config.qk_nope_head_dim": FactInfo("MLA non-rope head size", _plain),
    "config.qk_rope_head_dim": FactInfo("MLA rope head size", _plain),
    "config.v_head_dim": FactInfo("MLA value head size", _plain),
    "config.dcp_world_size": FactInfo("decode context-parallel size", _plain),
    "config.cascade": FactInfo("cascade attention", _plain),
    "config.batch_invariant": FactInfo("batch-invariant mode (config, else VLLM_BATCH_INVARIANT)", _plain),
    "node.capability": FactInfo("compute capability", _cap),
    "node.capability_major": FactInfo("compute capability family", _major),
    "node.gpu_count": FactInfo("GPUs on the node", _plain),
    "node.flashinfer_version": FactInfo("flashinfer-python version", _plain),
    "node.flashinfer_cubin_version": FactInfo("flashinfer-cubin version", _plain),
    "node.cubin_dir_has_cubins": FactInfo("FLASHINFER_CUBIN_DIR holds cubins", _plain),
    "node.artifactory_reachable": FactInfo("cubin artifactory reachable", _plain),
    "node.torch_version": FactInfo("torch version", _plain),
    "node.torch_cuda_version": FactInfo("torch's CUDA version", _plain),
    "node.driver_version": FactInfo("NVIDIA driver version", _plain),
    "node.mig_enabled": FactInfo("MIG mode", _plain),
    "node.jit_toolchain": FactInfo("JIT modules can be built (nvcc, or flashinfer-jit-cache installed)", _plain),
    "node.vllm_version": FactInfo("installed vllm version", _plain),
}

PAGE_SIZE = "config.page_size"


def base_context(config: AttentionConfig, node: NodeFacts) -> dict[str, Any]:
    """Every fact's value for one (config, node); ``backend``/``phase`` are set per candidate."""
    cap = node.capability.value
    bi = config.batch_invariant
    if bi is None:
        bi = bool(node.batch_invariant_env.value)
    return {
        "backend": None,
        "phase": None,
        "config.head_dim": config.qk_head_dim,
        "config.head_dim_vo": config.vo_head_dim,
        "config.num_qo_heads": config.num_qo_heads,
        "config.num_kv_heads": config.kv_heads,
        "config.group_size": config.num_qo_heads // config.kv_heads if config.num_qo_heads % config.kv_heads == 0 else None,
        "config.dtype": config.dtype,
        "config.kv_cache_dtype": config.kv_cache_dtype,
        "config.kv_dtype": config.kv_dtype,
        "config.page_size": config.page_size,
        "config.sliding_window": config.sliding_window,
        "config.logits_soft_cap": config.logits_soft_cap,
        "config.sinks": config.sinks,
        "config.num_speculative_tokens": config.num_speculative_tokens,
        "config.is_mla": config.is_mla,
        "config.kv_lora_rank": config.kv_lora_rank,
        "config.qk_nope_head_dim": config.qk_nope_head_dim,
        "config.qk_rope_head_dim": config.qk_rope_head_dim,
        "config.v_head_dim": config.v_head_dim,
        "config.dcp_world_size": config.dcp_world_size,
        "config.cascade": config.cascade,
        "config.batch_invariant": bi,
        "config.attention_backend": config.attention_backend,
        # the query dtype a phase runs with: the model dtype unless the engine layer quantizes it
        # (run_candidate sets it per phase and backend from backends.yaml engines.<name>.query_dtype)
        "phase.query_dtype": config.dtype,
        "node.capability": cap,
        "node.capability_major": capability_major(cap),
        "node.gpu_count": node.gpu_count.value,
        "node.flashinfer_version": node.flashinfer_version.value,
        "node.flashinfer_cubin_version": node.flashinfer_cubin_version.value,
        "node.cubin_dir_has_cubins": node.cubin_dir_has_cubins.value,
        "node.artifactory_reachable": node.artifactory_reachable.value,
        "node.torch_version": node.torch_version.value,
        "node.torch_cuda_version": node.torch_cuda_version.value,
        "node.driver_version": node.driver_version.value,
        "node.mig_enabled": node.mig_enabled.value,
        "node.jit_toolchain": node.jit_toolchain.value,
        "node.vllm_version": node.vllm_version.value,
    }


def display(fact: str, value: Any) -> str:
    info = FACTS.get(fact)
    return info.display(value) if info else _plain(value)
