"""Which of a plan's decode calls runs a decode batch (``Plan.decode_choice``, issue 41 item 3).

The policy decided everything: the two valid decode calls (``plan.decode`` and
``plan.decode_choice.alternative``) and the measured boundary (``small_up_to_kv_tokens``, per GPU in
rules/decode_choice.yaml). The adapter only compares, once per step, a host integer the step's
metadata already holds - the KV pages the decode batch reads (``batch_pages``) - with that boundary
turned into pages once, at startup. No sync, no tensor operation, nothing per request.

Pages, not tokens: a batch's pages are its tokens rounded up per request, so ``pages * page_size``
bounds the tokens it reads from above and a batch counted small by pages is small by tokens too
(the boundary is conservative by at most one page per request, where the two kernels were within
2 % when measured). Importing this module imports neither torch nor flashinfer.
"""

from __future__ import annotations

from typing import Any

from attnplan.errors import AdapterCallError

DEFAULT, ALTERNATIVE = 0, 1       # index of plan.decode and of plan.decode_choice.alternative


def batch_pages(batch: Any, page_size: int) -> int:
    """The KV pages a decode batch reads, from what its metadata already holds on the host: the
    length of its page-index list where the plan builds one (exactly its pages: host_metadata.from_host
    slices it per phase, decode_layout.decode_step takes the shape's ``indices_upto(num_pages)``), else
    the bound ``num_reqs * ceil(max_kv_len / page_size)`` (host ints of ``PhaseBatch``)."""
    idx = batch.kv_indices
    if idx is not None:
        return idx.shape[0]
    return batch.num_reqs * (-(-batch.max_kv_len // page_size))


class DecodeSwitch:
    """``pick(batch)`` / ``for_pages(num_pages)``: the index (``DEFAULT`` or ``ALTERNATIVE``) of the
    decode call that runs a decode batch, by the plan's measured boundary."""

    __slots__ = ("page_size", "max_small_pages", "small", "large")

    def __init__(self, plan: Any):
        choice = plan.decode_choice
        if choice is None:
            raise AdapterCallError("DecodeSwitch needs a plan with a decode_choice")
        self.page_size = plan.kv_cache.page_size
        # the boundary in pages: a batch of at most this many pages reads at most the measured tokens
        self.max_small_pages = choice.small_up_to_kv_tokens // self.page_size
        self.small = ALTERNATIVE if choice.alternative.backend == choice.small else DEFAULT
        self.large = ALTERNATIVE - self.small

    def for_pages(self, num_pages: int) -> int:
        return self.small if num_pages <= self.max_small_pages else self.large

    def pick(self, batch: Any) -> int:
        return self.for_pages(batch_pages(batch, self.page_size))


class FixedDecode:
    """A switch that always picks ``index`` (warm-up runs each decode call once; benchmarks time each)."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def for_pages(self, num_pages: int) -> int:
        return self.index

    def pick(self, batch: Any) -> int:
        return self.index
