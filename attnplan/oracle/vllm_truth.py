"""What vLLM does for one case, from its own functions (vllm_env patches the platform): the release
imported (0.33.0 installed, or 0.31.0 / 0.32.0 from .venv/releases: ``python -m attnplan.oracle.vllm --release``).

Every decision below is a call into vLLM or FlashInfer; where vLLM's decision is inline code in
``FlashInferMetadataBuilder.__init__`` / ``build`` (which need a GPU to construct), the few lines are
repeated here with the line they come from, around the real functions they call. Where a release's inline
code differs, the branch is taken on what the imported release defines (``RELEASE_FEATURES``), never on a
version number: the function that a release added is the evidence that it behaves so.
"""

from __future__ import annotations

import types
from typing import Any, Optional

from . import vllm_env as env
from .vllm_env import FP8, TORCH, TORCH_NAME, torch, vfi, vfib, vfim

# FlashInfer 0.7.2.post1 jit/attention/modules.py gen_batch_prefill_module / gen_customize_batch_prefill_module:
# "fp8 tensor core is not supported in fa2 backend" (raised at plan time, i.e. on the first request).
FA2_FP8_QUERY = "fp8 tensor core is not supported in fa2 backend (FlashInfer jit/attention/modules.py)"

# What the imported release's flashinfer.py defines, where its builder's inline code differs by release:
# - nvfp4_fa2: _nvfp4_kv_on_fa2 (0.32.0+): an NVFP4 cache on SM8x/SM90/SM12x is read by fa2; before it
#   (0.31.0) NVFP4 is the SM100 trtllm-gen path only (FlashInferBackend.supports_kv_cache_dtype).
# - fa2_native_decode: _use_fa2_native_decode (0.33.0+): below SM90 native decode plans backend="fa2"; before
#   it the decode wrapper plans backend="auto" (FlashInferMetadataBuilder._get_decode_wrapper).
# - trtllm_dcp_prefill: TrtllmDCPContextWrapper (0.33.0+): the DCP context pass runs trtllm-gen where it can;
#   before it BatchDCPPrefillWrapper always runs FlashInfer's native paged prefill.
RELEASE_FEATURES = {
    "nvfp4_fa2": hasattr(vfib, "_nvfp4_kv_on_fa2"),
    "fa2_native_decode": hasattr(vfib, "_use_fa2_native_decode"),
    "trtllm_dcp_prefill": hasattr(vfib, "TrtllmDCPContextWrapper"),
}

NO_PLAN = {"prefill": None, "decode": None, "q_prefill": None, "q_decode": None, "kernel_page": None}


def _refused(at: str, why: str, **extra: Any) -> dict[str, Any]:
    return {**NO_PLAN, "accept": "refused", "refused_at": at, "reason": why, "softcap_dropped": False, **extra}


def truth(case: Any) -> dict[str, Any]:
    """vLLM's default backend, and how it serves the case under ``--attention-backend case.forced``."""
    with env.case_env(case) as vc:
        default, _ = env.default_backend(case)
        out = {"default_backend": default or "none"}
        reasons = env.validate(case, case.forced)
        if reasons:
            return {**out, **_refused("selection", f"{case.forced}: {'; '.join(reasons)}")}
        if case.mla:
            return {**out, **_mla(case)}
        return {**out, **_standard(case, vc)}


def _builder_stub(case: Any, vc: Any, cache_dtype: str, nvfp4_fa2: bool) -> Any:
    """``self`` for FlashInferMetadataBuilder.get_q_data_type: the attributes it reads."""
    return types.SimpleNamespace(vllm_config=vc, model_config=vc.model_config, cache_dtype=cache_dtype,
                                 nvfp4_fa2=nvfp4_fa2, kv_cache_spec=types.SimpleNamespace(dtype=TORCH[case.dtype]))


def _standard(case: Any, vc: Any) -> dict[str, Any]:
    B = vfib.FlashInferBackend
    from vllm.platforms import current_platform as cp

    block = case.block_size if case.block_size is not None else B.get_preferred_block_size(16)
    page = env.common_block_size("FLASHINFER", block)
    if page is None:
        return _refused("startup", f"no kernel block size divides {block} (select_common_block_size)")
    qo, kv = case.num_qo_heads, case.num_kv_heads
    quantized = case.kv_cache_dtype not in ("auto", "fp16", "bf16")
    cache_dtype = env.VLLM_KV[case.kv_cache_dtype] if quantized else "auto"
    is_nvfp4 = cache_dtype.startswith("nvfp4")
    nvfp4_fa2 = is_nvfp4 and RELEASE_FEATURES["nvfp4_fa2"] and vfib._nvfp4_kv_on_fa2()
    nvfp4_trtllm = is_nvfp4 and not nvfp4_fa2
    use_dcp = case.dcp > 1
    # flashinfer.py FlashInferMetadataBuilder.__init__ (the startup refusals, in its order)
    if nvfp4_fa2 and use_dcp:
        return _refused("startup", "The DCP prefill wrapper cannot read NVFP4 block scales.")
    if nvfp4_fa2 and case.head_dim == 64:
        return _refused("startup", "fa2 prefill misreads NVFP4 at head_size 64.")
    if nvfp4_trtllm and (vfi.force_use_trtllm_attention() is False or not vfi.supports_trtllm_attention(is_prefill=True)
                         or not vfi.supports_trtllm_attention(is_prefill=False)):
        return _refused("startup", f"--kv-cache-dtype {cache_dtype} requires the SM100 trtllm-gen FlashInfer path.")
    if nvfp4_trtllm:
        kv_t = torch.uint8
    elif quantized:
        kv_t = B.get_dtype_for_flashinfer(cache_dtype)
    else:
        kv_t = TORCH[case.dtype]
    stub = _builder_stub(case, vc, cache_dtype, nvfp4_fa2)
    q_pre = vfib.FlashInferMetadataBuilder.get_q_data_type(stub, is_prefill=True)
    q_dec = vfib.FlashInferMetadataBuilder.get_q_data_type(stub, is_prefill=False)
    can_dec = vfi.can_use_trtllm_attention(qo, kv, is_prefill=False) and (
        not nvfp4_fa2 or cp.is_device_capability_family(120))
    if not (page <= 64 or (cp.is_device_capability_family(100) and can_dec and qo // kv > 1)):
        return _refused("startup", f"Unexpected FlashInfer page size {page} without trtllm-gen GQA")
    dec_kernel = vfib.FlashInferMetadataBuilder._get_flashinfer_trtllm_api_decode_kernel() if can_dec else None
    if dec_kernel == vfib.FlashInferDecodeKernel.XQA and not vfib._is_xqa_head_dim_supported(case.head_dim):
        dec_kernel = None
    if use_dcp and dec_kernel == vfib.FlashInferDecodeKernel.XQA:
        dec_kernel = None
    window_left = case.sliding_window - 1 if case.sliding_window else -1
    trtllm_dcp_prefill = (RELEASE_FEATURES["trtllm_dcp_prefill"] and use_dcp and vfi.can_use_trtllm_attention(qo, kv, is_prefill=True) and not quantized
                          and window_left == -1 and not case.logits_soft_cap)
    if case.sinks and (nvfp4_fa2 or not B.supports_sink()):
        return _refused("startup", "FlashInfer backend currently does not support attention sinks")
    # build(): prefill dispatch (flashinfer.py FlashInferMetadataBuilder.build, "Step 1")
    prefill_force = True if page >= 128 else vc.attention_config.use_trtllm_attention
    pre_trtllm = vfi.use_trtllm_attention(qo, kv, 1024, 4096, case.dcp, cache_dtype, q_pre, is_prefill=True,
                                          force_use_trtllm=prefill_force, has_sinks=case.sinks, has_spec=False)
    hd = int(case.head_dim)
    if use_dcp:
        # BatchDCPPrefillWrapper: the trtllm-gen context kernel when use_trtllm_dcp_prefill, else FlashInfer's
        # native paged prefill with backend="auto" (whatever the cache dtype).
        prefill = "trtllm-gen" if trtllm_dcp_prefill else env.determine_backend(q_pre, kv_t, hd, hd)
    elif pre_trtllm or nvfp4_trtllm:
        prefill = "trtllm-gen"
    else:
        prefill = env.determine_backend(q_pre, kv_t, hd, hd)
    if dec_kernel is not None:
        decode = dec_kernel.value
    elif nvfp4_trtllm:
        decode = "trtllm-gen"
    elif RELEASE_FEATURES["fa2_native_decode"] and vfib._use_fa2_native_decode():
        decode = "fa2"
    else:
        # flashinfer/decode.py BatchDecodeWithPagedKVCacheWrapper.plan, use_tensor_cores, backend="auto"
        decode = env.determine_backend(q_dec, kv_t, hd, hd) if {q_dec, kv_t} & set(FP8) else "fa2"
    res = {"accept": "ok", "refused_at": None, "reason": None, "prefill": prefill, "decode": decode,
           "q_prefill": TORCH_NAME[q_pre], "q_decode": TORCH_NAME[q_dec], "kernel_page": page}
    # build(): "FlashInfer BatchDCPPrefillWrapper does not support attention sinks", raised unless all_uses_trtllm:
    # (no prefill or prefill_use_trtllm) and (no decode or decode_with_flashinfer_trtllm_api). prefill_use_trtllm is
    # use_trtllm_attention(..., dcp_world_size) - pre_trtllm here - which is False whenever DCP is on, even where
    # 0.33's DCP context pass runs trtllm-gen (TrtllmDCPContextWrapper): so the first prefill raises, in 0.31-0.33.
    if case.sinks and use_dcp and not (pre_trtllm and dec_kernel is not None):
        return {**res, "accept": "refused", "refused_at": "first_request", "softcap_dropped": False,
                "reason": "FlashInfer BatchDCPPrefillWrapper does not support attention sinks"}
    for phase, backend, q in (("prefill", prefill, q_pre), ("decode", decode, q_dec)):
        if backend == "fa2" and q in FP8:
            return {**res, "accept": "refused", "refused_at": "first_request", "reason": f"{phase}: {FA2_FP8_QUERY}",
                    "softcap_dropped": False}
    # XQA, trtllm-gen decode and the trtllm context call pass no logits_soft_cap (flashinfer.py
    # FlashInferImpl.forward), and nothing refuses one: the model's soft cap is silently dropped.
    res["softcap_dropped"] = bool(case.logits_soft_cap) and (prefill == "trtllm-gen" or decode in ("xqa", "trtllm-gen"))
    return res


def _mla(case: Any) -> dict[str, Any]:
    from vllm.platforms import current_platform as cp
    from vllm.v1.attention.backends.mla.prefill.base import MLADimensions
    from vllm.v1.attention.backends.mla.prefill.selector import MLAPrefillSelectorConfig

    B = vfim.FlashInferMLABackend
    block = case.block_size if case.block_size is not None else B.get_preferred_block_size(16)
    page = env.common_block_size("FLASHINFER_MLA", block)
    decode = "cute-dsl" if vfim._select_mla_decode_backend(case.num_qo_heads) == "cute-dsl" else "trtllm-gen-mla"
    sel = MLAPrefillSelectorConfig(dtype=TORCH[case.dtype], mla_dimensions=MLADimensions(
        qk_nope_head_dim=case.qk_nope_head_dim, qk_rope_head_dim=64, v_head_dim=case.v_head_dim))
    try:
        if hasattr(type(cp), "get_mla_prefill_backend_cls"):   # 0.32.0+: the platform's (interface.py)
            pcls = type(cp).get_mla_prefill_backend_cls(sel)
        else:   # 0.31.0: mla/prefill/selector.py _auto_select_mla_prefill_backend (the same priorities)
            from vllm.v1.attention.backends.mla.prefill import selector as mla_sel

            pcls = mla_sel._auto_select_mla_prefill_backend(cp.get_device_capability(), sel)
        prefill = pcls.get_name() if hasattr(pcls, "get_name") else pcls.__name__
    except ValueError as exc:
        return _refused("startup", f"MLA prefill: {exc}")
    return {"accept": "ok", "refused_at": None, "reason": None, "prefill": prefill, "decode": decode,
            "q_prefill": None, "q_decode": None, "kernel_page": page, "softcap_dropped": False}
