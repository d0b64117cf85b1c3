"""One probe, run directly through FlashInfer (never the adapter) and against a float32 reference.

``CALLS`` maps the plan's ``call`` field to the FlashInfer invocation it names, as a list of
steps (construct a wrapper, ``plan``, ``run``; or call one function), built from the probe's
spec and its inputs. The steps are data, so the CPU tests bind every one of them to the
installed FlashInfer's real signatures (``inspect.signature``) without a GPU.

Inputs are fresh random tensors: a paged KV cache of ``page_size`` pages handed out in a shuffled
order, with the slots past each request's length left holding random values (a kernel that reads
them gets a wrong answer), and an output buffer poisoned with NaN (a kernel that leaves part of it
unwritten is caught). The reference (attnplan.adapter.reference.attention_ref, float32, one request
at a time) reads the same cache contents dequantized: fp8 as stored, nvfp4 as e2m1 codes (low
nibble first) times their fp8 block scales.
"""

from __future__ import annotations

import importlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from .call_facts import facts

KV_LENS = (45, 160, 301)           # three requests: one partial page, a few pages, many pages
PREFILL_Q = (7, 33, 64)            # new tokens per request in prefill (the last of its keys)
WORKSPACE_BYTES = 128 * 1024 * 1024
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NVFP4_BLOCK = 16


@dataclass
class Step:
    kind: str                      # new | method | call
    target: str                    # dotted name (new/call) or method name
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Inputs:
    q: Any
    k: Any                         # paged: [P, page, Hk, D] (storage); ragged: [sum L, Hk, D]
    v: Any
    sf: Optional[tuple[Any, Any]]  # nvfp4 block scales (paged), else None
    keys: list[Any]                # per request float32 K [L, Hk, D] as the kernel should read it
    values: list[Any]
    q_lens: list[int]
    kv_lens: list[int]
    pages: list[list[int]]
    sinks: Optional[Any]
    out: Any
    extra: dict[str, Any] = field(default_factory=dict)


def resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _dt(torch: Any, name: str) -> Any:
    return getattr(torch, name)


def kv_lens_for(spec: dict[str, Any]) -> list[int]:
    """Each request's KV length: the probe's batch shape (sweep), else three requests."""
    return [int(n) for n in spec.get("kv_lens") or KV_LENS]


def q_lens_for(spec: dict[str, Any]) -> list[int]:
    if spec.get("q_lens"):
        return [int(n) for n in spec["q_lens"]]
    return list(PREFILL_Q) if spec["phase"] == "prefill" else [int(spec["q_len"])] * len(KV_LENS)


def _dequant_nvfp4(torch: Any, packed: Any, scale: Any) -> Any:
    lo, hi = packed & 0xF, packed >> 4
    code = torch.stack((lo, hi), -1).reshape(*packed.shape[:-1], packed.shape[-1] * 2).long()
    grid = torch.tensor(E2M1, device=packed.device)
    val = grid[code & 7] * torch.where((code & 8) > 0, -1.0, 1.0)
    *lead, dim = val.shape
    return (val.reshape(*lead, dim // NVFP4_BLOCK, NVFP4_BLOCK) * scale.float().unsqueeze(-1)).reshape(*lead, dim)


def _random_kv(torch: Any, shape: tuple, view: str, device: Any) -> tuple[Any, Optional[Any], Any]:
    """(storage the kernel reads, nvfp4 scales or None, float32 values the reference reads)."""
    if view == "nvfp4":
        *lead, dim = shape
        data = torch.randint(0, 256, (*lead, dim // 2), dtype=torch.uint8, device=device)
        sf = (torch.rand(*lead, dim // NVFP4_BLOCK, device=device) * 0.25 + 0.05).to(torch.float8_e4m3fn)
        return data, sf, _dequant_nvfp4(torch, data, sf)
    x = torch.randn(shape, device=device).to(_dt(torch, view))
    return x, None, x.float()


def make_inputs(spec: dict[str, Any], torch: Any, device: Any) -> Inputs:
    hq, hk = int(spec["num_qo_heads"]), int(spec["num_kv_heads"])
    d, dv = int(spec["head_dim_qk"]), int(spec["head_dim_vo"])
    q_lens, kv_lens = q_lens_for(spec), kv_lens_for(spec)
    qdt, view = _dt(torch, spec["query_dtype"]), spec["kv_view_dtype"]
    # Sinks near log(sum of a request's exp(logits)) (~6 for ~300 keys of unit-variance logits),
    # so they take a large share of the softmax and a kernel that drops them is visibly wrong.
    sinks = (torch.randn(hq, device=device) + 6.0).float() if spec.get("sinks") else None
    inputs = facts(spec["call"]).inputs
    if spec["mla"] and inputs == "latent":
        return _mla_inputs(spec, torch, device, q_lens, kv_lens, sinks)
    q = (torch.randn(sum(q_lens), hq, d, device=device) * _q_std(spec)).to(qdt)
    if inputs == "ragged":
        k, _, kf = _random_kv(torch, (sum(kv_lens), hk, d), view, device)
        v, _, vf = _random_kv(torch, (sum(kv_lens), hk, dv), view, device)
        bounds = [0, *itertools.accumulate(kv_lens)]
        keys = [kf[a:b] for a, b in zip(bounds, bounds[1:])]
        values = [vf[a:b] for a, b in zip(bounds, bounds[1:])]
        return Inputs(q, k, v, None, keys, values, q_lens, kv_lens, [], sinks, _poisoned(torch, spec, q, dv))
    page = int(spec["page_size"])
    counts, pages = _random_pages(torch, kv_lens, page)
    k, ksf, kf = _random_kv(torch, (sum(counts), page, hk, d), view, device)
    v, vsf, vf = _random_kv(torch, (sum(counts), page, hk, dv), view, device)
    keys = [kf[p].reshape(-1, hk, d)[:n] for p, n in zip(pages, kv_lens)]
    values = [vf[p].reshape(-1, hk, dv)[:n] for p, n in zip(pages, kv_lens)]
    sf = (ksf, vsf) if ksf is not None else None
    return Inputs(q, k, v, sf, keys, values, q_lens, kv_lens, pages, sinks, _poisoned(torch, spec, q, dv))


def _random_pages(torch: Any, kv_lens: list[int], page: int) -> tuple[list[int], list[list[int]]]:
    """Pages per request and each request's pages, drawn from one random permutation (so page
    order is never the identity a kernel could get right by accident)."""
    counts = [math.ceil(n / page) for n in kv_lens]
    perm = torch.randperm(sum(counts)).tolist()
    bounds = [0, *itertools.accumulate(counts)]
    return counts, [perm[a:b] for a, b in zip(bounds, bounds[1:])]


def _q_std(spec: dict[str, Any]) -> float:
    """Logits have the query's standard deviation (sm_scale = 1/sqrt(d), keys ~ N(0, 1)). With a
    soft cap, make them as large as the cap, so a kernel that drops the cap is visibly wrong."""
    cap = spec.get("logits_soft_cap")
    return float(cap) if cap else 1.0


def _mla_inputs(spec: dict[str, Any], torch: Any, device: Any, q_lens: list[int], kv_lens: list[int],
                sinks: Any) -> Inputs:
    rank, rope, h = int(spec["kv_lora_rank"]), int(spec["qk_rope_head_dim"]), int(spec["num_qo_heads"])
    page = int(spec["page_size"])
    counts, pages = _random_pages(torch, kv_lens, page)
    qdt = _dt(torch, spec["query_dtype"])
    cache, _, cf = _random_kv(torch, (sum(counts), page, rank + rope), spec["kv_view_dtype"], device)
    lat = [cf[p].reshape(-1, rank + rope)[:n].unsqueeze(1) for p, n in zip(pages, kv_lens)]
    q = torch.randn(sum(q_lens), h, rank + rope, device=device).to(qdt)
    out = torch.full((sum(q_lens), h, rank), float("nan"), device=device, dtype=_dt(torch, spec["output_dtype"]))
    return Inputs(q, cache, None, None, lat, [x[..., :rank] for x in lat], q_lens, kv_lens, pages, sinks, out)


def _poisoned(torch: Any, spec: dict[str, Any], q: Any, dv: int) -> Any:
    return torch.full((*q.shape[:-1], dv), float("nan"), device=q.device, dtype=_dt(torch, spec["output_dtype"]))


# -- metadata ------------------------------------------------------------------------------------
def _meta(torch: Any, inp: Inputs, page: int, device: Any) -> dict[str, Any]:
    import itertools

    i32 = torch.int32
    qo = torch.tensor([0, *itertools.accumulate(inp.q_lens)], dtype=i32)
    kv_pages = torch.tensor([0, *itertools.accumulate(len(p) for p in inp.pages)], dtype=i32)
    last = torch.tensor([n - (len(p) - 1) * page for p, n in zip(inp.pages, inp.kv_lens)], dtype=i32)
    indices = torch.tensor([x for p in inp.pages for x in p], dtype=i32, device=device)
    width = max(len(p) for p in inp.pages)
    table = torch.tensor([p + [0] * (width - len(p)) for p in inp.pages], dtype=i32, device=device)
    return dict(qo=qo, kv_pages=kv_pages, last=last, indices=indices, table=table,
                seq_lens=torch.tensor(inp.kv_lens, dtype=i32), seq_lens_dev=torch.tensor(inp.kv_lens, dtype=i32, device=device))


def _kv_dtype(torch: Any, spec: dict[str, Any]) -> Any:
    return torch.uint8 if spec["kv_view_dtype"] == "nvfp4" else _dt(torch, spec["kv_view_dtype"])


def _scalars(spec: dict[str, Any], torch: Any) -> dict[str, Any]:
    return dict(sm_scale=spec["sm_scale"], window_left=spec["window_left"], logits_soft_cap=spec["logits_soft_cap"],
                q_data_type=_dt(torch, spec["query_dtype"]), kv_data_type=_kv_dtype(torch, spec),
                o_data_type=_dt(torch, spec["output_dtype"]))


def _run_extras(inp: Inputs) -> dict[str, Any]:
    kw: dict[str, Any] = {"out": inp.out}
    if inp.sf is not None:
        kw["kv_cache_sf"] = inp.sf
    if inp.sinks is not None:
        kw["sinks"] = inp.sinks
    return kw


def paged_prefill(spec: dict[str, Any], inp: Inputs, torch: Any, ws: Any) -> list[Step]:
    m = _meta(torch, inp, int(spec["page_size"]), ws.device)
    return [
        Step("new", "flashinfer.BatchPrefillWithPagedKVCacheWrapper", (ws, "NHD"), {"backend": spec["flashinfer_backend"]}),
        Step("method", "plan", (m["qo"], m["kv_pages"], m["indices"], m["last"], spec["num_qo_heads"], spec["num_kv_heads"],
                                spec["head_dim_qk"], spec["page_size"]),
             dict(head_dim_vo=spec["head_dim_vo"], causal=True, seq_lens=m["seq_lens"], **_scalars(spec, torch))),
        Step("method", "run", (inp.q, (inp.k, inp.v)), _run_extras(inp)),
    ]


def paged_decode(spec: dict[str, Any], inp: Inputs, torch: Any, ws: Any) -> list[Step]:
    m = _meta(torch, inp, int(spec["page_size"]), ws.device)
    return [
        Step("new", "flashinfer.BatchDecodeWithPagedKVCacheWrapper", (ws, "NHD"),
             {"use_tensor_cores": bool(spec["use_tensor_cores"]), "backend": spec["flashinfer_backend"]}),
        Step("method", "plan", (m["kv_pages"], m["indices"], m["last"], spec["num_qo_heads"], spec["num_kv_heads"],
                                spec["head_dim_qk"], spec["page_size"]),
             dict(seq_lens=m["seq_lens"], **_scalars(spec, torch))),
        Step("method", "run", (inp.q, (inp.k, inp.v)), _run_extras(inp)),
    ]


def sink(spec: dict[str, Any], inp: Inputs, torch: Any, ws: Any) -> list[Step]:
    """BatchAttentionWithAttentionSinkWrapper: sinks and sm_scale are the JIT variant's extra
    run arguments (vLLM 0.33 FlashInferImpl.forward passes them positionally)."""
    m = _meta(torch, inp, int(spec["page_size"]), ws.device)
    sc = _scalars(spec, torch)
    sinks = inp.sinks if inp.sinks is not None else torch.zeros(spec["num_qo_heads"], device=ws.device)
    run_kw = {k: v for k, v in _run_extras(inp).items() if k != "sinks"}
    return [
        Step("new", "flashinfer.BatchAttentionWithAttentionSinkWrapper", (ws, "NHD"),
             dict(backend=spec["flashinfer_backend"], q_data_type=sc["q_data_type"], kv_data_type=sc["kv_data_type"],
                  head_dim_qk=spec["head_dim_qk"], head_dim_vo=spec["head_dim_vo"], window_left=spec["window_left"])),
        Step("method", "plan", (m["qo"], m["kv_pages"], m["indices"], m["last"], spec["num_qo_heads"], spec["num_kv_heads"],
                                spec["head_dim_qk"], spec["page_size"]),
             dict(head_dim_vo=spec["head_dim_vo"], causal=True, seq_lens=m["seq_lens"], **sc)),
        Step("method", "run", (inp.q, (inp.k, inp.v), sinks, spec["sm_scale"]), run_kw),
    ]


def xqa_decode(spec: dict[str, Any], inp: Inputs, torch: Any, ws: Any) -> list[Step]:
    """XQA through trtllm_batch_decode_with_kv_cache(backend="xqa") - what FlashInfer's 'auto'
    picks on 9.x/12.x and what vLLM 0.33 calls there. No soft-cap argument exists. Sinks go as
    one float32 tensor [Hq], as vLLM passes them: the XQA path reshapes it (decode.py,
    xqa_batch_decode_with_kv_cache: ``sinks.reshape(num_kv_heads, -1)``), so a list would fail."""
    m = _meta(torch, inp, int(spec["page_size"]), ws.device)
    kw: dict[str, Any] = dict(
        query=inp.q, kv_cache=(inp.k, inp.v), workspace_buffer=ws, block_tables=m["table"], seq_lens=m["seq_lens_dev"],
        max_seq_len=max(inp.kv_lens), bmm1_scale=spec["sm_scale"], bmm2_scale=1.0, window_left=spec["window_left"],
        out=inp.out, sinks=inp.sinks, kv_layout="NHD", backend="xqa",
        q_len_per_req=int(spec["q_len"]))
    if inp.sf is not None:
        kw["kv_cache_sf"] = inp.sf
    if int(spec["q_len"]) > 1:
        kw["mask"] = causal_draft_mask(torch, len(inp.kv_lens), int(spec["q_len"]), ws.device)
    return [Step("call", "flashinfer.decode.trtllm_batch_decode_with_kv_cache", (), kw)]


def causal_draft_mask(torch: Any, batch: int, q_len: int, device: Any) -> Any:
    """XQA's draft-block mask for speculative decode (flashinfer/xqa.py, ``mask``): uint16
    [batch, q_len, ((q_len + 31) // 32) * 2], bit j of row i's 32-bit words set when draft token
    i sees draft token j - causal: j <= i. XQA asserts a mask whenever q_len > 1."""
    words = (q_len + 31) // 32
    bits = torch.zeros(q_len, words * 32, dtype=torch.int64)
    for i in range(q_len):
        bits[i, : i + 1] = 1
    weights = 2 ** torch.arange(16, dtype=torch.int64)
    halves = (bits.view(q_len, words * 2, 16) * weights).sum(-1)       # little-endian: low half first
    return halves.to(torch.int32).to(torch.uint16).expand(batch, q_len, words * 2).contiguous().to(device)


def mla_paged_decode(spec: dict[str, Any], inp: Inputs, torch: Any, ws: Any) -> list[Step]:
    m = _meta(torch, inp, int(spec["page_size"]), ws.device)
    rank = int(spec["kv_lora_rank"])
    from flashinfer.mla import MLAPlanMetadata

    meta = MLAPlanMetadata.csr(m["qo"], m["kv_pages"], m["indices"], m["seq_lens"])
    return [
        Step("new", "flashinfer.mla.BatchMLAPagedAttentionWrapper", (ws,), {"backend": spec["flashinfer_backend"]}),
        Step("method", "plan", (), dict(metadata=meta, num_heads=spec["num_qo_heads"], head_dim_ckv=rank,
                                        head_dim_kpe=spec["qk_rope_head_dim"], page_size=spec["page_size"],
                                        causal=int(spec["q_len"]) > 1, sm_scale=spec["sm_scale"],
                                        q_data_type=_dt(torch, spec["query_dtype"]), kv_data_type=_kv_dtype(torch, spec),
                                        query_layout="split", kv_cache_layout="packed", use_sinks=inp.sinks is not None)),
        Step("method", "run", (), dict(query=(inp.q[..., :rank].contiguous(), inp.q[..., rank:].contiguous()),
                                       kv_cache=inp.k, out=inp.out, sinks=inp.sinks)),
    ]


def ragged_prefill(spec: dict[str, Any], inp: Inputs, torch: Any, ws: Any) -> list[Step]:
    import itertools

    qo = torch.tensor([0, *itertools.accumulate(inp.q_lens)], dtype=torch.int32)
    kv = torch.tensor([0, *itertools.accumulate(inp.kv_lens)], dtype=torch.int32)
    sc = _scalars(spec, torch)
    return [
        Step("new", "flashinfer.BatchPrefillWithRaggedKVCacheWrapper", (ws, "NHD"), {"backend": spec["flashinfer_backend"]}),
        Step("method", "plan", (qo, kv, spec["num_qo_heads"], spec["num_kv_heads"], spec["head_dim_qk"]),
             dict(head_dim_vo=spec["head_dim_vo"], causal=True, **sc)),
        Step("method", "run", (inp.q, inp.k, inp.v), {"out": inp.out}),
    ]


CALLS = {"paged_prefill": paged_prefill, "paged_decode": paged_decode, "sink": sink, "xqa_decode": xqa_decode,
         "mla_paged_decode": mla_paged_decode, "ragged_prefill": ragged_prefill}


def execute(steps: list[Step]) -> Any:
    obj, result = None, None
    for s in steps:
        if s.kind == "new":
            obj = resolve(s.target)(*s.args, **s.kwargs)
        elif s.kind == "method":
            result = getattr(obj, s.target)(*s.args, **s.kwargs)
        else:
            result = resolve(s.target)(*s.args, **s.kwargs)
    return result


def reference(spec: dict[str, Any], inp: Inputs) -> Any:
    """float32 attention per request, queries the last q_len positions of their keys (causal)."""
    import torch

    from attnplan.adapter.reference import attention_ref

    qdt = getattr(torch, spec["quantize_query"]) if spec.get("quantize_query") else None
    outs, start = [], 0
    for r, (tq, k, v) in enumerate(zip(inp.q_lens, inp.keys, inp.values)):
        q = inp.q[start:start + tq]
        q = (q.to(qdt) if qdt is not None else q).float()     # where the kernel quantizes Q, so does the reference
        o, _ = attention_ref(q, k, v, sm_scale=spec["sm_scale"], causal=True, window_left=spec["window_left"],
                             soft_cap=spec["logits_soft_cap"], sinks=inp.sinks)
        outs.append(o)
        start += tq
    return torch.cat(outs, 0)
