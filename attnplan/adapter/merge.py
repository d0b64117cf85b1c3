"""Merging two partial attention states by log-sum-exp (docs/contract.md, The plan, seed 004).

Chunked prefill attends to the cached context and to the new tokens separately; each part gives
an output and its LSE, and the exact result over the union is their LSE-weighted mix. LSEs here
are base 2 (FlashInfer's convention: ``log2(sum(exp2(s * log2(e))))`` of the scaled logits).

Only tokens whose request has context are merged: the others keep the new-token result
unchanged. The context kernel may leave their rows unwritten (vLLM #36540), so those rows are
never read into the result.
"""

from __future__ import annotations

from typing import Any

from attnplan.errors import AdapterCallError


def merge_states(v_a: Any, s_a: Any, v_b: Any, s_b: Any) -> tuple[Any, Any]:
    """(v, s) of the union of two disjoint KV segments; float32 math, v in v_a's dtype."""
    import torch

    s_a, s_b = s_a.float(), s_b.float()
    s_max = torch.maximum(s_a, s_b)
    # Both segments empty (-inf, -inf): keep the max finite so no NaN appears; weights are 0.
    s_max = torch.where(torch.isinf(s_max) & (s_max < 0), torch.zeros_like(s_max), s_max)
    w_a, w_b = torch.exp2(s_a - s_max), torch.exp2(s_b - s_max)
    total = w_a + w_b
    v = (v_a.float() * w_a.unsqueeze(-1) + v_b.float() * w_b.unsqueeze(-1)) / total.clamp_min(1e-30).unsqueeze(-1)
    return v.to(v_a.dtype), s_max + torch.log2(total)


def merge_context_into(out: Any, lse: Any, v_ctx: Any, s_ctx: Any, has_context: Any) -> None:
    """In place: ``out``/``lse`` (the new-token state, every row written) absorb the context
    state on rows where ``has_context`` (bool [T]); other rows are left exactly as they are."""
    import torch

    merged_v, merged_s = merge_states(out, lse, v_ctx, s_ctx)
    keep = has_context.view(-1, *([1] * (out.dim() - 1)))
    out.copy_(torch.where(keep, merged_v, out))
    lse.copy_(torch.where(has_context.view(-1, 1), merged_s, lse))


def fold_heads(num_heads: int, head_dim: int, elem_bytes: int, max_threads: int = 1024) -> int:
    """How many row groups to split each token's heads into so FlashInfer's merge kernel fits
    in one block. ``MergeStateInPlace`` (0.7.2) launches ``head_dim / vec`` x ``num_heads``
    threads per token, vec = max(16 / elem_bytes, head_dim / 32): 128 heads of 128 in bf16 is
    2,048 threads, an "invalid argument" launch (DeepSeek-V3 prefill at TP 1, seen on the H100).
    The kernel indexes rows as ``(pos * num_heads + head) * head_dim``, so a contiguous
    [T, H, D] state viewed as [T * f, H / f, D] (mask repeated f times) merges the same values."""
    vec = max(16 // elem_bytes, head_dim // 32)
    per_head = max(1, head_dim // vec)
    for f in range(1, num_heads + 1):
        if num_heads % f == 0 and (num_heads // f) * per_head <= max_threads:
            return f
    raise AdapterCallError(f"no head split fits {max_threads} threads for head_dim {head_dim}")
