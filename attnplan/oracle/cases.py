"""The configurations the oracle tries: seeded, over every axis docs/contract.md, The plan names (issue 21)."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterator, Optional

CAPABILITIES = (80, 86, 89, 90, 100, 103, 110, 120, 121)
HEAD_DIMS = (64, 80, 96, 128, 192, 256, 512)
KV_DTYPES = ("auto", "same", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4")
BLOCKS = (8, 16, 32, 48, 64, 128, 256, 512, 1024, 2048)
# (qk_nope, v): DeepSeek-V3/R1, the (192, 256) ragged layout, and dims FlashInfer MLA refuses.
MLA_DIMS = ((128, 128), (192, 256), (64, 128), (96, 128))
MLA_HEADS = (8, 16, 24, 32, 48, 64, 96, 128)


@dataclass(frozen=True)
class Case:
    capability: int
    dtype: str
    kv_cache_dtype: str
    num_qo_heads: int            # per rank, as vLLM's getters return
    num_kv_heads: int
    head_dim: Optional[int] = None
    block_size: Optional[int] = None
    sinks: bool = False
    sliding_window: Optional[int] = None
    logits_soft_cap: Optional[float] = None
    spec_tokens: int = 0
    dcp: int = 1
    tp: int = 1
    mla: bool = False
    qk_nope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    batch_invariant: bool = False
    artifactory: bool = True
    forced: str = "FLASHINFER"   # the --attention-backend the FlashInfer plan is compared under

    @property
    def head_size_for_selector(self) -> int:
        # vLLM's MLA layers report kv_lora_rank + rope as their head size (the compressed cache).
        return 576 if self.mla else int(self.head_dim)  # type: ignore[arg-type]

    def attnplan_config(self) -> dict[str, Any]:
        c: dict[str, Any] = {"num_qo_heads": self.num_qo_heads, "num_kv_heads": self.num_kv_heads, "dtype": self.dtype,
                             "kv_cache_dtype": self.kv_cache_dtype, "page_size": self.block_size, "sinks": self.sinks,
                             "sliding_window": self.sliding_window, "logits_soft_cap": self.logits_soft_cap,
                             "num_speculative_tokens": self.spec_tokens, "dcp_world_size": self.dcp,
                             "batch_invariant": self.batch_invariant, "attention_backend": self.forced}
        if self.mla:
            c.update(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=self.qk_nope_head_dim,
                     v_head_dim=self.v_head_dim, num_kv_heads=1)
        else:
            c["head_dim"] = self.head_dim
        return c

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _standard(r: random.Random, cap: int) -> Case:
    dtype = r.choice(("fp16", "bf16"))
    kv = r.choice(KV_DTYPES)
    kv = dtype if kv == "same" else kv
    tp = r.choice((1, 1, 2, 4, 8))
    kv_heads = r.choice((1, 1, 2, 4, 8, 8))   # MQA often: kv 1
    group = r.randint(1, 16)
    qo = kv_heads * group * tp
    qo_rank, kv_rank = qo // tp, max(1, kv_heads // tp)
    if qo_rank % kv_rank:
        kv_rank = 1
    return Case(
        capability=cap, dtype=dtype, kv_cache_dtype=kv, num_qo_heads=qo_rank, num_kv_heads=kv_rank,
        head_dim=r.choice(HEAD_DIMS), block_size=r.choice((None, None) + BLOCKS), sinks=r.random() < 0.12,
        sliding_window=r.choice((None,) * 4 + (128, 4096)), logits_soft_cap=r.choice((None,) * 5 + (30.0, 50.0)),
        spec_tokens=r.choice((0, 0, 0, 1, 3)), dcp=r.choice((1,) * 6 + (2, 4)), tp=tp,
        batch_invariant=r.random() < 0.1, artifactory=r.random() < 0.75)


def _mla(r: random.Random, cap: int) -> Case:
    nope, v = r.choice(MLA_DIMS)
    tp = r.choice((1, 2, 4, 8))
    heads = r.choice(MLA_HEADS)
    return Case(
        capability=cap, dtype=r.choice(("fp16", "bf16")), kv_cache_dtype=r.choice(("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16")),
        num_qo_heads=max(1, heads // tp), num_kv_heads=1, mla=True, qk_nope_head_dim=nope, v_head_dim=v,
        block_size=r.choice((None, None, 16, 32, 64, 128)), spec_tokens=r.choice((0, 0, 1)), tp=tp,
        batch_invariant=r.random() < 0.1, artifactory=r.random() < 0.75,
        forced=r.choice(("FLASHINFER_MLA", "FLASHINFER_MLA", "FLASHINFER")))


def generate(n: int, seed: int = 21, capabilities: tuple[int, ...] = CAPABILITIES) -> Iterator[Case]:
    """``n`` configurations, each tried on every capability (so n * len(capabilities) cases)."""
    r = random.Random(seed)
    for _ in range(n):
        case = (_mla if r.random() < 0.15 else _standard)(r, capabilities[0])
        for cap in capabilities:   # the same configuration on every capability
            yield replace(case, capability=cap)
