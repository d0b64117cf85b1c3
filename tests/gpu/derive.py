"""Plans for paths today's rules do not produce yet, derived from a real plan the way the policy
will write them (issue 12 items 1-4 are being built beside this): XQA decode, the attention-sink
wrapper, NVFP4 KV on fa2, head_dim 512, native page sizes, batch-invariant split-KV.

Each helper takes a real ``PlanAnswer`` and returns one with the new ``PhasePlan`` fields set
(``call``, ``flashinfer_backend``, ``family``, ``entry_point``, ``modules``...). Once
``rules/backends.yaml`` has these backends, ``real_or_derived`` returns the rules' own plan.
Executors over derived plans are built with ``check=False`` (the live rules would refuse them).
"""

from __future__ import annotations

import re
from typing import Any

from attnplan.policy import AttentionConfig, JitModule, plan_for

SINK_ENTRY = "flashinfer.BatchAttentionWithAttentionSinkWrapper"
XQA_ENTRY = "flashinfer.decode.trtllm_batch_decode_with_kv_cache"


def base(**cfg: Any):
    """The kernel-truth plan here (``--engine flashinfer``: native fa2/fa3 phases on the H100)."""
    a = plan_for(AttentionConfig(**cfg), engine="flashinfer")
    assert a.ok, a.violations
    return a


def _with(answer: Any, **plan_updates: Any) -> Any:
    return answer.model_copy(update={"plan": answer.plan.model_copy(update=plan_updates)})


def _module(pp: Any, kernel: str, **params: Any) -> JitModule:
    m = pp.modules[0]
    p = {**m.params, "kernel": kernel, "flashinfer_backend": pp.flashinfer_backend, **params}
    flags = "".join(f":{k}" for k in ("sliding_window", "sinks") if p.get(k))
    name = (f"{kernel}:{pp.flashinfer_backend}:q={p['dtype_q']}:kv={p['dtype_kv']}:hd={p['head_dim_qk']}"
            f":page={p['page_size']}:qlen={p.get('q_len_per_req', 1)}{flags}")
    return JitModule(name=name, kind="jit", phase=m.phase, backend=pp.backend, params=p)


def xqa(answer: Any) -> Any:
    """Decode by XQA (``trtllm_batch_decode_with_kv_cache(backend="xqa")``); prefill unchanged."""
    d = answer.plan.decode
    dec = d.model_copy(update=dict(backend="xqa", family="xqa", flashinfer_backend="xqa", call="xqa_decode",
                                   entry_point=XQA_ENTRY, returns_lse=False, zero_workspace=True,
                                   runs_on_prefill_kernel=False, use_tensor_cores=None,
                                   kernel="trtllm_batch_decode_with_kv_cache(backend=xqa)",
                                   workspace_bytes=128 << 20))
    dec = dec.model_copy(update={"modules": (_module(dec, "xqa_decode", q_len_per_req=d.q_len_per_req,
                                                     page_size=answer.plan.kv_cache.page_size,
                                                     sliding_window=answer.plan.attention.window_left >= 0),)})
    return _with(answer, decode=dec)


def sinks(answer: Any, phases: tuple[str, ...] = ("prefill", "decode")) -> Any:
    """Attention sinks: the given phases run the sink wrapper (the others keep their call)."""
    updates: dict[str, Any] = {"attention": answer.plan.attention.model_copy(update={"sinks": True})}
    for ph in phases:
        pp = getattr(answer.plan, ph)
        new = pp.model_copy(update=dict(call="sink", entry_point=SINK_ENTRY, kernel="BatchAttentionWithAttentionSinkWrapper",
                                        runs_on_prefill_kernel=ph == "decode", use_tensor_cores=None))
        new = new.model_copy(update={"modules": (_module(new, "sink", sinks=True, sliding_window=answer.plan.attention.window_left >= 0),)})
        updates[ph] = new
    return _with(answer, **updates)


def nvfp4(answer: Any) -> Any:
    """NVFP4 KV (packed e2m1 + fp8 block scales, ``kv_cache_sf=``) on the answer's native phases."""
    kv = answer.plan.kv_cache.model_copy(update=dict(storage_dtype="uint8", view_dtype="nvfp4",
                                                     nvfp4_scale_dtype="float8_e4m3fn", nvfp4_block_size=16))
    updates: dict[str, Any] = {"kv_cache": kv}
    for ph in ("prefill", "decode"):
        pp = getattr(answer.plan, ph)
        mods = tuple(m.model_copy(update={"name": m.name.replace("kv=bfloat16", "kv=nvfp4"),
                                          "params": {**m.params, "dtype_kv": "nvfp4"}}) for m in pp.modules)
        updates[ph] = pp.model_copy(update=dict(kv_storage_dtype="uint8", kv_view_dtype="nvfp4", modules=mods))
    return _with(answer, **updates)


def head_dim(answer: Any, hd: int) -> Any:
    """The same plan for another head size (config, cache and module parameters)."""
    cfg = answer.config.model_copy(update={"head_dim": hd})
    kv = answer.plan.kv_cache.model_copy(update=dict(head_dim_k=hd, head_dim_v=hd))
    updates: dict[str, Any] = {"kv_cache": kv, "attention": answer.plan.attention.model_copy(update={"sm_scale": hd ** -0.5})}
    for ph in ("prefill", "decode"):
        pp = getattr(answer.plan, ph)
        mods = tuple(m.model_copy(update={"name": re.sub(r"hd=\d+x\d+", f"hd={hd}x{hd}", m.name),
                                          "params": {**m.params, "head_dim_qk": hd, "head_dim_vo": hd}}) for m in pp.modules)
        updates[ph] = pp.model_copy(update={"modules": mods})
    return _with(answer, **updates).model_copy(update={"config": cfg})


def page_size(answer: Any, page: int) -> Any:
    kv = answer.plan.kv_cache.model_copy(update={"page_size": page})
    updates: dict[str, Any] = {"kv_cache": kv}
    for ph in ("prefill", "decode"):
        pp = getattr(answer.plan, ph)
        updates[ph] = pp.model_copy(update={"modules": tuple(
            m.model_copy(update={"params": {**m.params, "page_size": page}}) for m in pp.modules)})
    return _with(answer, **updates)


# A fixed split makes the number of partial outputs grow with the context instead of being capped
# by the SMs: seen on the H100, a prefill batch of 64 (contexts up to 6k, 16-page splits) asked for
# 634 MiB of workspace against the default 128 MiB. vLLM 0.33 gives batch-invariant FlashInfer a
# 2 GiB workspace (FLASHINFER_WORKSPACE_BUFFER_SIZE_BATCH_INVARIANT); so does this plan.
BATCH_INVARIANT_WORKSPACE = 2048 << 20


def fixed_split(answer: Any, pages: int) -> Any:
    """Batch-invariant fa2: a fixed split-KV size in pages (FlashInfer's ``fixed_split_size``)."""
    ws = dict(workspace_bytes=BATCH_INVARIANT_WORKSPACE)
    return _with(answer, attention=answer.plan.attention.model_copy(update=dict(split_kv="fixed", fixed_split_size=pages)),
                 prefill=answer.plan.prefill.model_copy(update=ws), decode=answer.plan.decode.model_copy(update=ws))


def real_or_derived(cfg: dict, derived: Any, call: str, phase: str = "decode") -> Any:
    """The rules' own plan once they produce ``call`` for ``phase`` here; else ``derived``."""
    try:
        a = plan_for(AttentionConfig(**cfg), engine="flashinfer")
    except Exception:  # noqa: BLE001 - a config today's schema refuses
        return derived
    return a if a.ok and getattr(a.plan, phase).call == call else derived


def fa3_decode(answer: Any) -> Any:
    """Decode on the prefill phase's paged fa3 kernel (``paged_prefill`` with backend fa3, one
    query row per request): a plan the rules can name on 9.0 when fa2 decode is excluded."""
    pre = answer.plan.prefill
    assert pre.call == "paged_prefill" and pre.flashinfer_backend == "fa3", pre
    dec = pre.model_copy(update=dict(q_len_per_req=1, runs_on_prefill_kernel=True,
                                     modules=tuple(m.model_copy(update={"phase": "decode"}) for m in pre.modules)))
    return _with(answer, decode=dec)
