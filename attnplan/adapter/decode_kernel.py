"""The decode layout's metadata in one Triton launch (CUDA only; issue 17).

``DecodeLayout.compute`` in torch is ~15 small kernels (slots, KV page indptr, last-page lengths,
page indices); inside a CUDA graph each still costs ~2-3 us of device time, which at batch 1 was
most of an XQA decode step (42 us against 11 us for the attention alone, bench/RESULTS.md). This
kernel does the same work with one program per request: its page count, the prefix sum of the
pages of the requests before it (B <= a few hundred: each program sums at most B values), its
indptr entry and last-page length, its new tokens' slots, and the copy of its block-table row
into the page indices - the copy vLLM 0.33's ``_copy_page_indices_kernel`` does
(``vllm/v1/attention/backends/flashinfer.py``). Same clamps as the torch version, which stays
the CPU path and the reference the GPU test holds this kernel to.

With ``APPEND`` the same launch also writes this step's new K and V rows (MLA: the latent row)
into the paged cache at the slots it has just computed (issue 41): inside the whole-step CUDA
graph the append was two more kernels (``kv_cache.append``: two advanced-index ``index_put``
scatters, ~9 us of device time at batch 1 on the H100, where XQA's attention takes 11 us). Only
for caches that store the new rows as they come (``kv_cache.fused_target``: a 16-bit float cache fed
rows of its own dtype at unit scale, so a copy of bits); fp8 and NVFP4 keep
``kv_cache.append``, whose quantization the kernels were checked against. A token whose page entry
lies outside the cache writes nothing (the torch scatter would stop the device on an assert; a
masked store cannot write out of bounds either way).

Importing this module imports triton; ``decode_layout`` imports it only on a CUDA device.
"""

from __future__ import annotations

from typing import Any, Optional

import triton
import triton.language as tl


@triton.jit
def _decode_metadata_kernel(seq_ptr, table_ptr, stride_r, stride_c, indptr_ptr, last_ptr, indices_ptr, slots_ptr,
                            pages_ptr, offsets_ptr, W, k_ptr, v_ptr, stride_kt, stride_kh, stride_kd, stride_vt,
                            stride_vh, stride_vd, cache_ptr, num_pages, stride_p, stride_kv, stride_o, stride_h, stride_d,
                            PAGE: tl.constexpr, Q: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_W: tl.constexpr,
                            BLOCK_Q: tl.constexpr, INDICES: tl.constexpr, APPEND: tl.constexpr, HAS_V: tl.constexpr,
                            H: tl.constexpr, D: tl.constexpr, BLOCK_H: tl.constexpr,
                            BLOCK_D: tl.constexpr):
    r = tl.program_id(0)
    s = tl.load(seq_ptr + r)
    n = (s + PAGE - 1) // PAGE
    # Pages of the requests before this one (their lengths, summed here: no second launch).
    start = tl.sum(tl.zeros([BLOCK_B], dtype=tl.int32), axis=0)
    for k0 in range(0, r, BLOCK_B):
        k = k0 + tl.arange(0, BLOCK_B)
        sk = tl.load(seq_ptr + k, mask=k < r, other=0)
        start += tl.sum((sk + PAGE - 1) // PAGE, axis=0)
    tl.store(indptr_ptr + r + 1, start + n)
    if r == 0:
        tl.store(indptr_ptr, 0)
    tl.store(last_ptr + r, s - (n - 1) * PAGE)
    # This request's new tokens: positions s - Q .. s - 1, clamped inside the table.
    i = tl.arange(0, BLOCK_Q)
    pos = tl.minimum(tl.maximum(s - Q + i, 0), W * PAGE - 1)
    col = pos // PAGE
    row = table_ptr + r.to(tl.int64) * stride_r
    entry = tl.load(row + col * stride_c, mask=i < Q, other=0).to(tl.int64)
    off = (pos - col * PAGE).to(tl.int64)
    tok = r * Q + i
    tl.store(pages_ptr + tok, entry, mask=i < Q)
    tl.store(offsets_ptr + tok, off, mask=i < Q)
    tl.store(slots_ptr + tok, entry * PAGE + off, mask=i < Q)
    if INDICES:
        m = tl.minimum(n, W)
        for j0 in range(0, m, BLOCK_W):
            j = j0 + tl.arange(0, BLOCK_W)
            v = tl.load(row + j * stride_c, mask=j < m)
            tl.store(indices_ptr + start + j, v, mask=j < m)
    if APPEND:
        # Token by token (Q is small): the same clamped position as above, as scalars, then its
        # K (and V) row of H x D elements copied into the cache (same dtype: the bits).
        for t in tl.static_range(Q):
            pt = tl.minimum(tl.maximum(s - Q + t, 0), W * PAGE - 1)
            ct = pt // PAGE
            pg = tl.load(row + ct * stride_c).to(tl.int64)
            in_cache = (pg >= 0) & (pg < num_pages)
            dst = cache_ptr + pg * stride_p + (pt - ct * PAGE).to(tl.int64) * stride_o
            src = (r * Q + t).to(tl.int64)
            # [heads, dim] tiles: the dim axis is contiguous on both sides (16-byte accesses).
            dd = tl.arange(0, BLOCK_D)[None, :]
            for h0 in tl.static_range(0, H, BLOCK_H):
                hh = h0 + tl.arange(0, BLOCK_H)[:, None]
                me = (hh < H) & (dd < D) & in_cache
                x = tl.load(k_ptr + src * stride_kt + hh * stride_kh + dd * stride_kd, mask=me)
                tl.store(dst + hh * stride_h + dd * stride_d, x.to(cache_ptr.dtype.element_ty), mask=me)
                if HAS_V:
                    y = tl.load(v_ptr + src * stride_vt + hh * stride_vh + dd * stride_vd, mask=me)
                    tl.store(dst + stride_kv + hh * stride_h + dd * stride_d, y.to(cache_ptr.dtype.element_ty),
                             mask=me)


def decode_metadata(layout: Any, append: Optional[Any] = None) -> None:
    """``layout``'s outputs from its ``seq_lens`` and ``table``, one launch (graph-capturable);
    with ``append`` (``kv_cache.FusedAppend``), this step's new rows written into the cache too."""
    b, q = layout.batch_size, layout.q_len
    table = layout.table
    if append is None:
        k = v = table                                    # not read: APPEND is off
        ks = vs = (0, 0, 0)
        cache, n_pages, cs, heads, dim = table, 0, (0, 0, 0, 0, 0), 1, 1
    else:
        k, v, ks, vs = append.k, append.v, append.k_strides, append.v_strides
        cache, n_pages, cs, heads, dim = append.data, append.num_pages, append.strides, append.heads, append.dim
        if v is None:
            v, vs = k, ks
    block_d = triton.next_power_of_2(dim)
    block_h = min(triton.next_power_of_2(heads), max(1, 4096 // block_d))      # <= 4096 elements a tile
    _decode_metadata_kernel[(b,)](
        layout.seq_lens, table, table.stride(0), table.stride(1), layout.kv_indptr, layout.last_page_len,
        layout.kv_indices, layout.slots, layout.slot_pages, layout.slot_offsets, layout.width,
        k, v, *ks, *vs, cache, n_pages, *cs,
        PAGE=layout.page_size, Q=q, BLOCK_B=128, BLOCK_W=256, BLOCK_Q=max(16, triton.next_power_of_2(q)),
        INDICES=layout.indices, APPEND=append is not None, HAS_V=append is not None and append.v is not None,
        H=heads, D=dim, BLOCK_H=block_h, BLOCK_D=block_d)
