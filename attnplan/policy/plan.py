"""From chosen backends to the executable plan (docs/contract.md, The plan): KV views, kernels, metadata needs.

Nothing here decides *whether* a backend may run - the rules did that. This module only
derives what a validated choice implies.
"""

from __future__ import annotations

from typing import Any

from .answer import AttentionPlan, BatchMetadata, CubinRef, JitModule, KVCachePlan, MetadataPlan, PhasePlan, Plan
from .capability import capability_major
from .config import AttentionConfig
from .dtypes import NVFP4_BLOCK, NVFP4_SCALE_DTYPE, QUANTIZED_KV, TORCH_DTYPE, output_torch_dtype
from attnplan.errors import RulePackError
from .rulepack import RuleSet

# Dtypes in the plan are torch names (policy/dtypes.py): the adapter maps them with getattr(torch, name).


def kv_storage_view_dtypes(config: AttentionConfig) -> tuple[str, str]:
    """(kv_storage_dtype, kv_view_dtype) torch dtype names (seed 002): quantized caches are uint8 storage,
    viewed as the float8 type they hold; nvfp4 is packed uint8 and is never inferred from uint8."""
    kv = config.kv_dtype
    if kv in QUANTIZED_KV:
        return QUANTIZED_KV[kv]
    return TORCH_DTYPE[kv], TORCH_DTYPE[kv]


def _hnd(ruleset: RuleSet, backend: str) -> bool:
    return ruleset.family(backend).kv_layout == "HND"


def _query_dtype(config: AttentionConfig, backend: str, ruleset: RuleSet, decided: str | None = None) -> str:
    """The phase's query dtype as torch names it. ``decided``: the engine layer's choice for the phase
    (engine_rows.query_dtype over backends.yaml engines.<name>.query_dtype, in config vocabulary)."""
    if decided is not None:
        return TORCH_DTYPE[decided]
    # a family whose kernels take another query dtype over this KV dtype (backends.yaml families: trtllm-gen's
    # FP4 FMHA takes an fp8_e4m3 query over an nvfp4 cache, docs/contract.md, The plan)
    over_kv = ruleset.family(backend).query_dtype_over_kv.get(config.kv_dtype)
    return TORCH_DTYPE[over_kv if over_kv is not None else config.dtype]


def _modules(config: AttentionConfig, phase: str, backend: str, kernel_kind: str, q: str, kv_view_dtype: str,
             out: str, module_kind: str, page_size: int) -> tuple[JitModule, ...]:
    params = {
        # keyed as FlashInfer's JIT generators name their arguments (flashinfer/jit/attention/modules.py
        # gen_batch_decode_module(dtype_q, dtype_kv, dtype_o, ...)); dtype_kv is the plan's kv_view_dtype
        "dtype_q": q, "dtype_kv": kv_view_dtype, "dtype_o": out,
        "head_dim_qk": config.qk_head_dim, "head_dim_vo": config.vo_head_dim,
        "num_qo_heads": config.num_qo_heads, "num_kv_heads": config.kv_heads,
        "page_size": page_size,
        "sliding_window": config.sliding_window is not None,
        "logits_soft_cap": config.logits_soft_cap is not None,
        "sinks": config.sinks,
    }
    if config.is_mla:
        params.update(kv_lora_rank=config.kv_lora_rank, qk_rope_head_dim=config.qk_rope_head_dim)
    flags = "".join(f":{k}" for k in ("sliding_window", "logits_soft_cap", "sinks") if params[k])
    name = f"{kernel_kind}:{backend}:q={q}:kv={kv_view_dtype}:hd={params['head_dim_qk']}x{params['head_dim_vo']}{flags}"
    return (JitModule(name=name, kind=module_kind, phase=phase, backend=backend, params={"kernel": kernel_kind, **params}),)


def phase_plan(config: AttentionConfig, phase: str, backend: str, ruleset: RuleSet, page_size: int,
                batch_invariant: bool = False, query_dtype: str | None = None, kernels: Any = None,
                engine_tensor_cores: bool | None = None) -> PhasePlan:
    """One phase, executable as it stands. ``kernels``: the trtllm-gen kernels the candidate's rule check decided
    at this page (candidates.CandidateResult.kernels: attnplan.kernels.trtllm_gen.phase.Decision), listed as the
    cubins the phase loads."""
    spec = ruleset.backends[backend]
    family = ruleset.family(backend)
    kv_storage_dtype, kv_view_dtype = kv_storage_view_dtypes(config)
    q = _query_dtype(config, backend, ruleset, query_dtype)
    # the family's own output over this cache (trtllm-gen writes fp8 over nvfp4), else the model's
    over = family.output_dtype_over_kv.get(config.kv_dtype)
    out = TORCH_DTYPE[over] if over is not None else output_torch_dtype(config.dtype)
    q_len = 1 + config.num_speculative_tokens if phase == "decode" else 1
    kernel = spec.kernels[phase]  # type: ignore[index]
    sink_call = spec.sink_calls.get(phase) if config.sinks else None  # type: ignore[call-overload]
    call = (spec.mla_calls.get(phase) if config.is_mla else None) or sink_call or spec.calls[phase]  # type: ignore[index]
    if sink_call is not None:
        kernel = f"{sink_call.entry_point.rsplit('.', 1)[-1]}(backend={spec.flashinfer_backend})"
    use_tc = None
    on_prefill = False
    if phase == "decode" and family.tensor_core_decode_group is not None and not config.is_mla:
        # FlashInfer's fixed_split_size (batch invariance) is taken by tensor-core decode only
        # (flashinfer/decode.py BatchDecodeWithPagedKVCacheWrapper.plan).
        # the engine's own use_tensor_cores where its data says (vLLM 0.33 passes True: flashinfer.py
        # _get_decode_wrapper), else attnplan's choice by GQA group
        use_tc = engine_tensor_cores if engine_tensor_cores is not None else (
            config.group_size >= family.tensor_core_decode_group or backend in family.tensor_core_decode_backends
            or batch_invariant)
        # Native decode kernels take one query token per request; speculative decode runs the
        # (causal) prefill kernel over q_len tokens instead.
        if q_len > 1 and sink_call is None:
            on_prefill = True
            kernel = spec.kernels["prefill"]
            call = spec.calls["prefill"]
    # The JIT module the call builds (backends.yaml calls:, mla_modules:); an MLA model's is fixed per phase.
    info = ruleset.calls[call.call]
    kernel_kind = ruleset.mla_modules[phase] if config.is_mla else (
        info.module_tensor_cores if use_tc and info.module_tensor_cores is not None else info.module)
    return PhasePlan(
        backend=backend, family=spec.family, flashinfer_backend=spec.flashinfer_backend, call=call.call,
        entry_point=call.entry_point, returns_lse=call.returns_lse, kernel=kernel, query_dtype=q, kv_storage_dtype=kv_storage_dtype,
        kv_view_dtype=kv_view_dtype,
        output_dtype=out, workspace_bytes=spec.workspace_bytes, zero_workspace=spec.zero_workspace,
        use_tensor_cores=use_tc, q_len_per_req=q_len, runs_on_prefill_kernel=on_prefill,
        modules=_modules(config, phase, backend, kernel_kind, q, kv_view_dtype, out, family.module_kind, page_size)
        + _merge_modules(config, phase, backend, out),
        cubins=tuple(CubinRef(file=f + ".cubin", function=f, sha256=h) for f, h in zip(kernels.functions, kernels.sha256s))
        if kernels is not None else (),
        kernel_table=kernels.provenance() if kernels is not None else None,
    )


def _merge_modules(config: AttentionConfig, phase: str, backend: str, out: str) -> tuple[JitModule, ...]:
    """The merge module wherever a phase merges partial attention by LSE: MLA chunked prefill merges
    context and new-token attention (seed 004); cascade merges shared-prefix and suffix attention.
    (flashinfer/cascade.py merge_state; the adapter's merge.py for MLA.)"""
    if not ((config.is_mla and phase == "prefill") or config.cascade):
        return ()
    params = {"kernel": "merge_state", "dtype_o": out, "head_dim_vo": config.vo_head_dim}
    return (JitModule(name=f"merge_state:{backend}:o={out}:hd={config.vo_head_dim}", kind="jit", phase=phase,  # type: ignore[arg-type]
                      backend=backend, params=params),)


def attention_plan(config: AttentionConfig, *, page_size: int = 16, split_kv_disabled: bool = False,
                   batch_invariant: bool = False, fixed_split_tokens: int | None = None) -> AttentionPlan:
    """The scalars every phase applies. HF's sliding_window counts the query's own token;
    FlashInfer's window_left does not. split_kv: ``fixed`` under batch invariance (FlashInfer's
    ``fixed_split_size``, counting pages, of ``fixed_split_tokens``: backends.yaml
    engine_sizes.<engine>.decode_fixed_split_tokens); ``disabled`` where a phase's family says so for this KV dtype and device
    (``split_kv_disabled``: backends.yaml families.<f>.split_kv_disabled)."""
    split, fixed = "auto", None
    if batch_invariant:
        if fixed_split_tokens is None:
            raise RulePackError("backends.yaml", "batch invariance needs engine_sizes.<engine>.decode_fixed_split_tokens")
        split, fixed = "fixed", max(1, fixed_split_tokens // page_size)
    elif split_kv_disabled:
        split = "disabled"
    return AttentionPlan(
        sm_scale=config.softmax_scale,
        window_left=config.sliding_window - 1 if config.sliding_window is not None else -1,
        logits_soft_cap=float(config.logits_soft_cap or 0.0),
        sinks=config.sinks, split_kv=split, fixed_split_size=fixed,  # type: ignore[arg-type]
    )


def metadata_needs(config: AttentionConfig, prefill_trtllm: bool, decode_trtllm: bool) -> MetadataPlan:
    """Seed 001: all_uses_trtllm over the phases a batch has decides the host-side needs."""

    def kind(has_prefill: bool, has_decode: bool) -> BatchMetadata:
        all_trt = (not has_prefill or prefill_trtllm) and (not has_decode or decode_trtllm)
        dcp = config.dcp_world_size > 1
        return BatchMetadata(
            all_uses_trtllm=all_trt,
            needs_host_seq_lens=dcp or config.cascade or not all_trt,
            needs_paged_kv_indices=config.cascade or not all_trt,
            prefill_kv_indptr="device_cumsum" if has_prefill else None,
        )

    return MetadataPlan(prefill_only=kind(True, False), decode_only=kind(False, True), mixed=kind(True, True))


def uses_trtllm_api(ruleset: RuleSet, backend: str) -> bool:
    """Whether a backend is called through FlashInfer's trtllm API (block tables + seq_lens, no
    paged_kv_indices): backends.yaml families.<f>.trtllm_api (trtllm-gen and XQA alike)."""
    return ruleset.family(backend).trtllm_api


def _split_kv_disabled(ruleset: RuleSet, config: AttentionConfig, backends: tuple[str, ...],
                       capability: int | None) -> bool:
    major = capability_major(capability)
    for b in backends:
        off = ruleset.family(b).split_kv_disabled
        if off is not None and config.kv_dtype in off.kv_dtypes and major in off.capability_majors:
            return True
    return False


def build_plan(config: AttentionConfig, prefill: str, decode: str, page_size: int,
               valid_pages: tuple[int, ...], ruleset: RuleSet, *, capability: int | None = None,
               batch_invariant: bool = False, query_dtypes: tuple[str | None, str | None] = (None, None),
               block_size: int | None = None, kernels: tuple[Any, Any] = (None, None), decode_tensor_cores: bool | None = None,
               decode_choice: Any = None) -> Plan:
    """The executable plan of the chosen (prefill, decode) at ``page_size``. ``decode_choice``: a measured
    per-shape decode choice that holds here (candidates.decode_choice_for): the plan then carries the other
    decode call too (``Plan.decode_choice``), and what it derives for the one cache, the metadata and the
    modules covers both decode calls - the adapter switches between them per step."""
    alt = decode_choice.alternative if decode_choice is not None else None
    decodes = (decode,) if alt is None else (decode, alt.backend)
    kv_storage_dtype, kv_view_dtype = kv_storage_view_dtypes(config)
    nvfp4 = config.kv_dtype == "nvfp4"
    if config.is_mla:
        heads, hk, hv = 1, int(config.kv_lora_rank) + int(config.qk_rope_head_dim), int(config.kv_lora_rank)  # type: ignore[arg-type]
    else:
        heads, hk, hv = config.kv_heads, config.qk_head_dim, config.vo_head_dim
    kv = KVCachePlan(
        # HND when any phase's family needs it (trtllm-gen); the native kernels read HND too, so one cache serves both.
        layout="HND" if any(_hnd(ruleset, b) for b in (prefill, *decodes)) else "NHD",
        page_size=page_size, kv_storage_dtype=kv_storage_dtype, kv_view_dtype=kv_view_dtype, num_kv_heads=heads,
        head_dim_k=hk, head_dim_v=hv, mla=config.is_mla,
        nvfp4_scale_dtype=NVFP4_SCALE_DTYPE if nvfp4 else None,
        nvfp4_block_size=NVFP4_BLOCK if nvfp4 else None,
        page_valid_sizes=valid_pages, block_size=block_size,
    )
    decode_pp = phase_plan(config, "decode", decode, ruleset, page_size, batch_invariant, query_dtypes[1], kernels[1],
                           engine_tensor_cores=decode_tensor_cores)
    extra: dict[str, Any] = {}
    if alt is not None:
        from .answer import DecodeChoice

        alt_pp = phase_plan(config, "decode", alt.backend, ruleset, page_size, batch_invariant, alt.query_dtype,
                            alt.kernels.get(page_size), engine_tensor_cores=alt.tensor_cores)
        # The decode phase loads both calls' modules: warm-up builds every module the phases list, and the
        # alternative's carry what their loader reads from a phase plan (the call, FlashInfer's backend
        # argument, ...), which plan.decode does not hold for them.
        decode_pp = decode_pp.model_copy(update={"modules": decode_pp.modules + _own_phase_params(alt_pp)})
        spec = decode_choice.entry.spec
        extra["decode_choice"] = DecodeChoice(
            id=spec.id, small=spec.small, large=spec.large, small_up_to_kv_tokens=spec.small_up_to_kv_tokens,
            alternative=alt_pp, verified=decode_choice.entry.provenance())
    return Plan(
        attention=attention_plan(config, page_size=page_size, batch_invariant=batch_invariant,
                                 fixed_split_tokens=ruleset.sizes().decode_fixed_split_tokens,
                                 split_kv_disabled=_split_kv_disabled(ruleset, config, (prefill, *decodes), capability)),
        prefill=phase_plan(config, "prefill", prefill, ruleset, page_size, batch_invariant, query_dtypes[0], kernels[0]),
        decode=decode_pp,
        kv_cache=kv,
        metadata=metadata_needs(config, uses_trtllm_api(ruleset, prefill),
                                all(uses_trtllm_api(ruleset, b) for b in decodes)),
        **extra,
    )


def _own_phase_params(pp: PhasePlan) -> tuple[JitModule, ...]:
    """``pp``'s modules with what a module's loader reads from its phase plan written into its params
    (adapter/warmup.py _with_phase fills only the keys a module lacks, from plan.decode)."""
    own = {"call": pp.call, "flashinfer_backend": pp.flashinfer_backend, "q_len_per_req": pp.q_len_per_req,
           "use_tensor_cores": pp.use_tensor_cores}
    return tuple(m.model_copy(update={"params": {**own, **m.params}}) for m in pp.modules)
