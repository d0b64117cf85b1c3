"""``xqa_decode``: flashinfer.decode.trtllm_batch_decode_with_kv_cache(backend="xqa"), XQA's JIT
kernels (flashinfer/xqa.py xqa, flashinfer/jit/xqa.py gen_xqa_module). No LSE (decode.py raises
NotImplementedError for return_lse on xqa)."""

from __future__ import annotations

from typing import Any, Optional

from ._contract import CallContext, JitBuild
from ._jit import XQA, module_dtypes
from .trtllm_decode import TrtllmDecode


def xqa_draft_mask(q_len: int, num_reqs: int, device: Any) -> Any:
    """XQA's causal draft mask for speculative decode (q_len > 1), uint16 [B, q_len, 2 * words]:
    row i lets draft token i see draft tokens 0..i (xqa.py ``mask``; vLLM 0.33
    ``_make_xqa_draft_block_mask`` builds the same)."""
    import torch

    words = (q_len + 31) // 32
    q_idx = torch.arange(q_len, device=device).unsqueeze(1)
    kv_idx = torch.arange(words * 32, device=device).unsqueeze(0)
    bits = 1 << torch.arange(32, device=device, dtype=torch.int64)
    packed = ((kv_idx <= q_idx).view(q_len, words, 32).to(torch.int64) * bits).sum(-1).to(torch.uint32)
    per_req = packed.view(torch.uint16).reshape(q_len, words * 2)
    return per_req.unsqueeze(0).expand(num_reqs, -1, -1).contiguous()


class XqaDecode(TrtllmDecode):
    name = "xqa_decode"
    # XQA reads every slot of a request's last page and weights the unused ones by zero.
    finite_page_tail = True

    def device_extras(self, b: CallContext, pp: Any, num_reqs: int) -> dict[str, Any]:
        """Speculative decode (q_len_per_req > 1) takes a causal draft mask (xqa.py asserts one),
        built once per batch size and kept by the backend."""
        if pp.q_len_per_req <= 1:
            return {}
        q_len = pp.q_len_per_req
        return {"xqa_mask": b.memo(("xqa_mask", num_reqs), lambda: xqa_draft_mask(q_len, num_reqs, b.device))}

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        # flashinfer/xqa.py get_xqa_module(input, kv, page, head_dim, group, sliding window, output, q_seq_len)
        q, kv, o, sw, _ = module_dtypes(params)
        p = params
        return JitBuild(XQA, p["flashinfer_backend"],
                        (q, kv, p["page_size"], p["head_dim_qk"], p["num_qo_heads"] // p["num_kv_heads"], sw, o,
                         int(p.get("q_len_per_req", 1))))
