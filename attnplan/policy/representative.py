"""The representative configs every derived view asks the rules about, in one place.

The capability matrix (``matrix.py``) and a node's capability labels (``preflight/labels.py``) both
evaluate the rules over a baseline and the baseline with one field changed: these are the baselines
(Llama-style GQA; DeepSeek-V3's MLA dims) and the changed values, so that the two views answer the
same question and a change to one reaches the other.
"""

from __future__ import annotations

from typing import Any

STANDARD: dict[str, Any] = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, dtype="bf16")
MLA: dict[str, Any] = dict(num_qo_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                           v_head_dim=128, dtype="bf16")

# The head sizes a view reports one by one (matrix column, ``head-dim-<h>`` labels).
HEAD_SIZES: tuple[int, ...] = (64, 96, 128, 192, 256, 512)
# The one-field changes both views ask about.
LOGITS_SOFT_CAP = 30.0
SLIDING_WINDOW = 4096
