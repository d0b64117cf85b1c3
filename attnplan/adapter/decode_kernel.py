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

Importing this module imports triton; ``decode_layout`` imports it only on a CUDA device.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _decode_metadata_kernel(seq_ptr, table_ptr, stride_r, stride_c, indptr_ptr, last_ptr, indices_ptr, slots_ptr,
                            pages_ptr, offsets_ptr, W, PAGE: tl.constexpr, Q: tl.constexpr, BLOCK_B: tl.constexpr,
                            BLOCK_W: tl.constexpr, BLOCK_Q: tl.constexpr, INDICES: tl.constexpr):
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


def decode_metadata(layout: Any) -> None:
    """``layout``'s outputs from its ``seq_lens`` and ``table``, one launch (graph-capturable)."""
    b, q = layout.batch_size, layout.q_len
    table = layout.table
    _decode_metadata_kernel[(b,)](
        layout.seq_lens, table, table.stride(0), table.stride(1), layout.kv_indptr, layout.last_page_len,
        layout.kv_indices, layout.slots, layout.slot_pages, layout.slot_offsets, layout.width,
        PAGE=layout.page_size, Q=q, BLOCK_B=128, BLOCK_W=256, BLOCK_Q=max(16, triton.next_power_of_2(q)),
        INDICES=layout.indices)
