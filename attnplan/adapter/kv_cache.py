"""The paged KV cache, allocated from the plan's ``KVCachePlan`` (docs/contract.md, The plan, seed 002).

Standard attention keeps K and V of a page in one tensor, FlashInfer's 5-D form:
``[num_pages, 2, page_size, heads, dim]`` (NHD) or ``[num_pages, 2, heads, page_size, dim]`` (HND),
so K and V share strides (FlashInfer's primary kernels need that) and trtllm-gen reads it as is.
MLA keeps one latent row per token: ``[num_pages, page_size, kv_lora_rank + rope]``.

Storage dtype and view dtype both come from the plan: an fp8 cache is uint8 storage viewed as
float8_e4m3fn or float8_e5m2, an nvfp4 cache is packed uint8 data plus float8_e4m3fn block scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from attnplan.errors import AdapterCallError
from attnplan.policy import KVCachePlan

from .dtypes import NVFP4, elements_per_byte, is_float8, torch_dtype, view_as
from .nvfp4 import dequantize as nvfp4_dequantize, quantize as nvfp4_quantize  # noqa: F401 - re-exported



@dataclass
class PagedKVCache:
    plan: KVCachePlan
    data: Any                    # storage tensor (storage dtype)
    scales: Optional[Any] = None  # nvfp4 only: fp8 block scales, same leading dims as data

    @property
    def num_pages(self) -> int:
        return int(self.data.shape[0])

    @property
    def device(self) -> Any:
        return self.data.device

    def kernel_view(self) -> Any:
        """What the kernels read: the storage reinterpreted as the plan's view dtype."""
        return view_as(self.data, self.plan.kv_view_dtype)

    # -- MLA latent parts ---------------------------------------------------------------
    def ckv(self) -> Any:
        assert self.plan.mla
        return self.kernel_view()[..., : self.plan.head_dim_v]

    def kpe(self) -> Any:
        assert self.plan.mla
        return self.kernel_view()[..., self.plan.head_dim_v:]


def allocate(plan: KVCachePlan, num_pages: int, device: Any, *, zeroed: bool = False) -> PagedKVCache:
    """A cache of ``num_pages`` pages laid out and typed as ``plan`` says: uninitialised memory,
    or zeros where a kernel of the plan needs every slot finite (``calls.needs_finite_page_tail``:
    XQA weights the unused slots of a last page by zero, and 0 x NaN is NaN). Appends write only
    finite values (fp8 is clamped, nvfp4 codes are finite), so a zeroed cache stays finite."""
    import torch

    empty = torch.zeros if zeroed else torch.empty
    storage = torch_dtype(plan.kv_storage_dtype)
    if plan.mla:
        data = empty((num_pages, plan.page_size, plan.head_dim_k), dtype=storage, device=device)
        return PagedKVCache(plan, data)
    if plan.head_dim_k != plan.head_dim_v:
        raise AdapterCallError(f"a combined K/V page needs head_dim_k == head_dim_v, got {plan.head_dim_k}/{plan.head_dim_v}")
    dim = plan.head_dim_k // elements_per_byte(plan.kv_view_dtype)
    inner = ((plan.page_size, plan.num_kv_heads) if plan.layout == "NHD" else (plan.num_kv_heads, plan.page_size))
    data = empty((num_pages, 2, *inner, dim), dtype=storage, device=device)
    scales = None
    if plan.kv_view_dtype == NVFP4:
        block = int(plan.nvfp4_block_size or 16)
        scales = empty((num_pages, 2, *inner, plan.head_dim_k // block),
                             dtype=torch_dtype(plan.nvfp4_scale_dtype or "float8_e4m3fn"), device=device)
    return PagedKVCache(plan, data, scales)


# -- writing new tokens ---------------------------------------------------------------------
def _quantize(x: Any, view: str, scale: float) -> Any:
    """x -> what the cache stores: x / scale in the plan's view dtype (fp8 as its bytes). The
    kernels multiply by the same scale on the way out, whatever the cache dtype."""
    if is_float8(view):
        import torch

        target = torch_dtype(view)
        limit = torch.finfo(target).max
        return (x.float() / scale).clamp(-limit, limit).to(target).view(torch.uint8)
    return x if scale == 1.0 else x.float() / scale


def append(cache: PagedKVCache, slots: Any, k: Any, v: Optional[Any] = None, *,
           k_scale: float = 1.0, v_scale: float = 1.0, pages_offsets: Optional[tuple[Any, Any]] = None) -> None:
    """Write this step's K/V (MLA: ``k`` = latent rows [T, rank + rope], ``v`` unused) at ``slots``
    (``page * page_size + offset`` per token, from the step metadata; ``pages_offsets``: the two
    parts, when the metadata has them). Device-side scatter: no host round trip, graph-capturable."""
    plan = cache.plan
    if pages_offsets is not None:
        page, off = pages_offsets
    else:
        page = slots // plan.page_size
        off = slots % plan.page_size
    if plan.mla:
        cache.data[page, off] = k.to(cache.data.dtype)
        return
    if plan.kv_view_dtype == NVFP4:
        kq, ks = nvfp4_quantize(k, int(plan.nvfp4_block_size or 16), k_scale)
        vq, vs = nvfp4_quantize(v, int(plan.nvfp4_block_size or 16), v_scale)
        for i, (d, s) in enumerate(((kq, ks), (vq, vs))):
            _scatter(cache.data, plan.layout, i, page, off, d)
            _scatter(cache.scales, plan.layout, i, page, off, s.to(cache.scales.dtype))
        return
    _scatter(cache.data, plan.layout, 0, page, off, _quantize(k, plan.kv_view_dtype, k_scale).to(cache.data.dtype))
    _scatter(cache.data, plan.layout, 1, page, off, _quantize(v, plan.kv_view_dtype, v_scale).to(cache.data.dtype))


@dataclass(frozen=True)
class FusedAppend:
    """What one kernel needs to write a step's new rows into ``data`` itself (``decode_kernel``):
    the rows (``k``: [T, H, D], or MLA's latent [T, 1, rank + rope] seen as one head; ``v``: [T, H, D]
    or None) with their strides, and the cache's strides as (page, K/V, in-page offset, head, dim)."""

    data: Any
    num_pages: int
    strides: tuple[int, int, int, int, int]
    heads: int
    dim: int
    k: Any
    k_strides: tuple[int, int, int]
    v: Optional[Any]
    v_strides: tuple[int, int, int]


_CAST_ONLY = ("bfloat16", "float16")


def fused_target(cache: PagedKVCache, k: Any, v: Optional[Any] = None, *, k_scale: float = 1.0,
                 v_scale: float = 1.0) -> Optional[FusedAppend]:
    """``append(cache, slots, k, v)`` as a plain copy a kernel can do on its own, or None where
    ``append`` does more: a 16-bit float cache (storage = view), rows of that same dtype and unit
    scales, so the stored bits are the rows' (``_quantize`` returns x untouched at scale 1); fp8
    (scale, clamp, cast) and NVFP4 (block quantization) stay with ``append``. ``k``/``v``: the
    rows as the step hands them, [T, H, D] (MLA: [T, rank + rope])."""
    plan = cache.plan
    if plan.kv_storage_dtype not in _CAST_ONLY or plan.kv_view_dtype != plan.kv_storage_dtype:
        return None
    if k_scale != 1.0 or (not plan.mla and v_scale != 1.0):
        return None
    d = cache.data
    # Rows of the cache's own dtype: the kernel copies bits, no rounding to agree on.
    if k.dtype != d.dtype or (v is not None and v.dtype != d.dtype):
        return None
    if plan.mla:
        if k.dim() != 2 or k.shape[1] != d.shape[2]:
            return None
        s = d.stride()
        return FusedAppend(d, d.shape[0], (s[0], 0, s[1], 0, s[2]), 1, int(d.shape[2]), k,
                           (k.stride(0), 0, k.stride(1)), None, (0, 0, 0))
    if v is None or v.shape != k.shape or k.dim() != 3:
        return None
    s = d.stride()
    heads, dim = int(d.shape[3] if plan.layout == "NHD" else d.shape[2]), int(d.shape[4])
    if tuple(k.shape[1:]) != (heads, dim):
        return None
    inner = (s[2], s[3]) if plan.layout == "NHD" else (s[3], s[2])       # (offset, head)
    return FusedAppend(d, d.shape[0], (s[0], s[1], inner[0], inner[1], s[4]), heads, dim, k, tuple(k.stride()), v,
                       tuple(v.stride()))


def _scatter(data: Any, layout: str, kv: int, page: Any, off: Any, x: Any) -> None:
    if layout == "NHD":
        data[page, kv, off] = x          # [T, H, D]
    else:
        data[page, kv, :, off] = x       # advanced indices split by a slice: value is [T, H, D]


# -- reading back (reference backend, MLA context) -----------------------------------------
def gather(cache: PagedKVCache, pages: Any, length: int, *, k_scale: float = 1.0,
           v_scale: float = 1.0) -> tuple[Any, Any]:
    """One request's first ``length`` tokens as float32: standard -> (K [L, H, D], V [L, H, D]);
    MLA -> (latent [L, rank + rope], None)."""
    plan = cache.plan
    view = cache.kernel_view()[pages]
    if plan.mla:
        return view.reshape(-1, plan.head_dim_k)[:length].float(), None
    if plan.kv_view_dtype == NVFP4:
        sc = cache.scales[pages]
        parts = [nvfp4_dequantize(view[:, i], sc[:, i], int(plan.nvfp4_block_size or 16)) for i in (0, 1)]
    else:
        parts = [view[:, 0].float(), view[:, 1].float()]
    out = []
    for x, scale in zip(parts, (k_scale, v_scale)):
        if plan.layout == "HND":
            x = x.transpose(1, 2)        # [n, H, S, D] -> [n, S, H, D]
        out.append(x.reshape(-1, *x.shape[2:])[:length] * scale)
    return out[0], out[1]
