"""The names a rule may read, what each means, and how to show its value.

A rule pack naming a fact not listed here is rejected at load time, so a typo in a rule can
never silently make it pass.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

from .capability import capability_major, format_capability
from .config import AttentionConfig
from .facts import NodeFacts


class FactInfo(NamedTuple):
    """One fact a rule may read: what it means, how a (config, node) gives its value, how to show it."""

    description: str
    display: Callable[[Any], str]
    # None: set per candidate by the engine (backend, phase), not read off the config or the node
    get: Optional[Callable[[AttentionConfig, NodeFacts], Any]] = None


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


def _group(c: AttentionConfig, n: NodeFacts) -> Optional[int]:
    return c.num_qo_heads // c.kv_heads if c.num_qo_heads % c.kv_heads == 0 else None


def _batch_invariant(c: AttentionConfig, n: NodeFacts) -> bool:
    # the config's own setting, else VLLM_BATCH_INVARIANT on the node
    return c.batch_invariant if c.batch_invariant is not None else bool(n.batch_invariant_env.value)


def _cfg(attr: str) -> Callable[[AttentionConfig, NodeFacts], Any]:
    return lambda c, n: getattr(c, attr)


def _node(attr: str) -> Callable[[AttentionConfig, NodeFacts], Any]:
    return lambda c, n: getattr(n, attr).value


# The one facts table: name -> (description, display, getter). base_context and the loader's check of
# fact names (conditions.compile_condition) both derive from it.
FACTS: dict[str, FactInfo] = {
    "backend": FactInfo("the candidate backend being checked", _plain),
    "phase": FactInfo("prefill or decode", _plain),
    # the query dtype a phase runs with: the model dtype unless the engine layer quantizes it
    # (run_candidate sets it per phase and backend from backends.yaml engines.<name>.query_dtype)
    "phase.query_dtype": FactInfo("the query dtype this phase runs with (the engine's choice: vLLM quantizes it for fp8 KV)",
                                  _plain, _cfg("dtype")),
    # the output dtype a phase's call writes: the model dtype (plan.py output_torch_dtype). FlashInfer's NVFP4
    # trtllm-gen kernels write fp8 only (vLLM 0.33 allocates an fp8 buffer and dequantizes): where the plan
    # says so, run_candidate sets it per phase and backend, and trtllm.kernel-missing reads it.
    # whether this decode runs FlashInfer's tensor-core path (use_tensor_cores): the engine's choice where its
    # data says (backends.yaml engines.<name>.decode_tensor_cores; vLLM 0.33: always), else unknown (None) -
    # attnplan's own plan then decides by GQA group (families.<f>.tensor_core_decode_group)
    "phase.decode_tensor_cores": FactInfo("the decode runs on tensor cores (the engine's use_tensor_cores)", _plain),
    "phase.output_dtype": FactInfo("the output dtype this phase's call writes (the plan's output_dtype)", _plain,
                                   _cfg("dtype")),
    "config.attention_backend": FactInfo("the backend asked for (auto, or a name such as flashinfer / flashinfer-mla)",
                                         _plain, _cfg("attention_backend")),
    "config.head_dim": FactInfo("query/key head size (MLA: qk_nope + qk_rope)", _plain, _cfg("qk_head_dim")),
    "config.head_dim_vo": FactInfo("value/output head size", _plain, _cfg("vo_head_dim")),
    "config.num_qo_heads": FactInfo("query heads", _plain, _cfg("num_qo_heads")),
    "config.num_kv_heads": FactInfo("KV heads", _plain, _cfg("kv_heads")),
    "config.group_size": FactInfo("GQA group: query heads per KV head", _plain, _group),
    "config.dtype": FactInfo("query dtype", _plain, _cfg("dtype")),
    "config.kv_cache_dtype": FactInfo("KV cache dtype as asked", _plain, _cfg("kv_cache_dtype")),
    "config.kv_dtype": FactInfo("KV element dtype (auto -> query dtype, fp8 -> fp8_e4m3)", _plain, _cfg("kv_dtype")),
    "config.page_size": FactInfo("tokens per KV page", _plain, _cfg("page_size")),
    "config.sliding_window": FactInfo("sliding window", _plain, _cfg("sliding_window")),
    "config.logits_soft_cap": FactInfo("logits soft-cap", _plain, _cfg("logits_soft_cap")),
    "config.sinks": FactInfo("attention sinks", _plain, _cfg("sinks")),
    "config.num_speculative_tokens": FactInfo("speculative tokens per decode step", _plain, _cfg("num_speculative_tokens")),
    "config.is_mla": FactInfo("multi-head latent attention", _plain, _cfg("is_mla")),
    "config.kv_lora_rank": FactInfo("MLA compressed KV rank", _plain, _cfg("kv_lora_rank")),
    "config.qk_nope_head_dim": FactInfo("MLA non-rope head size", _plain, _cfg("qk_nope_head_dim")),
    "config.qk_rope_head_dim": FactInfo("MLA rope head size", _plain, _cfg("qk_rope_head_dim")),
    "config.v_head_dim": FactInfo("MLA value head size", _plain, _cfg("v_head_dim")),
    "config.dcp_world_size": FactInfo("decode context-parallel size", _plain, _cfg("dcp_world_size")),
    "config.cascade": FactInfo("cascade attention", _plain, _cfg("cascade")),
    "config.trtllm_off": FactInfo("vLLM's --attention-config use_trtllm_attention is false (no trtllm-gen / XQA)",
                                  _plain, lambda c, n: c.use_trtllm_attention is False),
    "config.disable_q_quantization": FactInfo("vLLM's --attention-config disable_flashinfer_q_quantization", _plain,
                                              _cfg("disable_flashinfer_q_quantization")),
    "config.batch_invariant": FactInfo("batch-invariant mode (config, else VLLM_BATCH_INVARIANT)", _plain, _batch_invariant),
    "node.capability": FactInfo("compute capability", _cap, _node("capability")),
    "node.capability_major": FactInfo("compute capability family", _major,
                                      lambda c, n: capability_major(n.capability.value)),
    "node.gpu_count": FactInfo("GPUs on the node", _plain, _node("gpu_count")),
    "node.flashinfer_version": FactInfo("flashinfer-python version", _plain, _node("flashinfer_version")),
    "node.flashinfer_cubin_version": FactInfo("flashinfer-cubin version", _plain, _node("flashinfer_cubin_version")),
    "node.cubin_dir_has_cubins": FactInfo("FLASHINFER_CUBIN_DIR holds cubins", _plain, _node("cubin_dir_has_cubins")),
    "node.artifactory_reachable": FactInfo("cubin artifactory reachable", _plain, _node("artifactory_reachable")),
    "node.torch_version": FactInfo("torch version", _plain, _node("torch_version")),
    "node.torch_cuda_version": FactInfo("torch's CUDA version", _plain, _node("torch_cuda_version")),
    "node.driver_version": FactInfo("NVIDIA driver version", _plain, _node("driver_version")),
    "node.mig_enabled": FactInfo("MIG mode", _plain, _node("mig_enabled")),
    "node.jit_toolchain": FactInfo("JIT modules can be built (nvcc, or flashinfer-jit-cache installed)", _plain,
                                   _node("jit_toolchain")),
    "node.vllm_version": FactInfo("installed vllm version", _plain, _node("vllm_version")),
    "node.sglang_version": FactInfo("installed sglang version", _plain, _node("sglang_version")),
    "node.trtllm_kernel_table": FactInfo("the node's own trtllm-gen kernel table, verified (None: not on disk)",
                                         lambda v: "none" if not isinstance(v, dict) else (
                                             f"unusable: {v['error']}" if "error" in v else f"{str(v.get('pin'))[:8]} ({v.get('origin')})"),
                                         _node("trtllm_kernel_table")),
    "node.flashinfer_import_error": FactInfo("what `import flashinfer` raises over the installed kernel wheels "
                                             "(node/flashinfer_packages.py)", _plain, _node("flashinfer_import_error")),
    "node.flashinfer_jit_cache_version": FactInfo("flashinfer-jit-cache version", _plain,
                                                  _node("flashinfer_jit_cache_version")),
    # Set per candidate (backend, phase, page, query dtype) for trtllm-gen / trtllm-gen-mla / trtllm-ragged
    # by candidates.py from attnplan.kernels.trtllm_gen (FlashInfer's selection code over its kernel table);
    # None where the flashinfer version's selection is not known there.
    "kernel.trtllm_gen": FactInfo("the trtllm-gen kernel (cubin function) the phase loads, from FlashInfer's kernel "
                                  "table and selection code", _plain),
    "kernel.trtllm_gen_missing": FactInfo("the trtllm-gen kernel the phase needs and the table lacks: its parameters "
                                          "and the serving shapes that need it (null: none missing)", _plain),
    "kernel.trtllm_gen_decided_by": FactInfo("the kernel table and selection code that decided kernel.trtllm_gen",
                                             _plain),
}
# Candidate facts read per kernel page (candidates.py evaluates checks reading them once per page).
KERNEL_FACTS = ("kernel.trtllm_gen", "kernel.trtllm_gen_missing", "kernel.trtllm_gen_decided_by")

PAGE_SIZE = "config.page_size"


def base_context(config: AttentionConfig, node: NodeFacts, node_part: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Every fact's value for one (config, node); ``backend``/``phase`` are set per candidate.
    ``node_part``: ``node_context(node)`` computed once, for a caller judging many configs on one node."""
    if node_part is None:
        return {name: (info.get(config, node) if info.get is not None else None) for name, info in FACTS.items()}
    out = {name: (info.get(config, node) if info.get is not None else None) for name, info in _NOT_NODE}
    out.update(node_part)
    return out


def node_context(node: NodeFacts) -> dict[str, Any]:
    """The node's facts alone (they do not depend on the config)."""
    return {name: info.get(None, node) for name, info in FACTS.items() if name.startswith("node.")}


_NOT_NODE = [(name, info) for name, info in FACTS.items() if not name.startswith("node.")]


def display(fact: str, value: Any) -> str:
    info = FACTS.get(fact)
    return info.display(value) if info else _plain(value)
