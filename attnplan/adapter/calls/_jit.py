"""FlashInfer 0.7.2.post1's JIT module getters, as the strategies name them for warm-up.

Each getter is the one a wrapper calls at plan time, with the same arguments (its memo key), so a
wrapper reuses what warm-up built; its JitSpec is what that getter builds, unrolled, so warm-up
can compile every module of a plan with one ninja (``warmup.prebuild``). The argument tuples are
built from a plan module's params (``module_dtypes`` and the strategies' ``jit``).
"""

from __future__ import annotations

from typing import Any, Callable

from ..dtypes import NVFP4, torch_dtype
from ._contract import JitGetter


def module_dtypes(p: dict[str, Any]) -> tuple[Any, Any, Any, bool, bool]:
    """(query, KV, output torch dtypes, sliding window?, soft cap?) of a plan module's params."""
    import torch

    q, o = torch_dtype(p["dtype_q"]), torch_dtype(p["dtype_o"])
    kv = torch.uint8 if p["dtype_kv"] == NVFP4 else torch_dtype(p["dtype_kv"])
    return q, kv, o, bool(p["sliding_window"]), bool(p["logits_soft_cap"])


def prefill_args(p: dict[str, Any]) -> tuple:
    """``get_batch_prefill_module``'s arguments after the backend (flashinfer/prefill.py)."""
    import torch

    q, kv, o, sw, cap = module_dtypes(p)
    return (q, kv, o, torch.int32, p["head_dim_qk"], p["head_dim_vo"], 0, sw, cap, False)


def _prefill_loader(backend: str, args: tuple) -> Callable[[], Any]:
    from flashinfer.prefill import get_batch_prefill_module

    return lambda: get_batch_prefill_module(backend, *args)


def _prefill_spec(backend: str, args: tuple) -> Any:
    from flashinfer.jit.attention import modules as m

    # fa2's getter builds the "primary" (equal K/V strides) module; fa3's the public one
    # (flashinfer/prefill.py get_batch_prefill_module branches on the backend argument).
    return (m._gen_batch_prefill_primary_module if backend == "fa2" else m.gen_batch_prefill_module)(backend, *args)


def _decode_loader(backend: str, args: tuple) -> Callable[[], Any]:
    from flashinfer.decode import get_batch_decode_module

    return lambda: get_batch_decode_module(*args)


def _decode_spec(backend: str, args: tuple) -> Any:
    from flashinfer.jit.attention import modules as m

    return m.gen_batch_decode_module(*args)


def _mla_loader(backend: str, args: tuple) -> Callable[[], Any]:
    from flashinfer.mla import get_batch_mla_module

    return lambda: get_batch_mla_module(backend, *args)


def _mla_spec(backend: str, args: tuple) -> Any:
    from flashinfer.jit.attention import modules as m

    return m.gen_batch_mla_module(backend, *args)


def _xqa_loader(backend: str, args: tuple) -> Callable[[], Any]:
    from flashinfer.xqa import get_xqa_module

    return lambda: get_xqa_module(*args)


def _xqa_spec(backend: str, args: tuple) -> Any:
    from flashinfer.jit.xqa import gen_xqa_module

    return gen_xqa_module(*args)


def _custom_prefill_loader(backend: str, args: tuple) -> Callable[[], Any]:
    from flashinfer.prefill import get_customize_batch_prefill_module

    return lambda: get_customize_batch_prefill_module(backend, *args[0], **args[1])


def _custom_prefill_spec(backend: str, args: tuple) -> Any:
    from flashinfer.jit.attention import modules as m

    return m.gen_customize_batch_prefill_module(backend, *args[0], **args[1])


def _merge_loader(backend: str, args: tuple) -> Callable[[], Any]:
    from flashinfer.cascade import get_cascade_module

    return get_cascade_module


def _merge_spec(backend: str, args: tuple) -> Any:
    from flashinfer.jit.cascade import gen_cascade_module

    return gen_cascade_module()


PREFILL = JitGetter("prefill", _prefill_loader, _prefill_spec)
DECODE = JitGetter("decode", _decode_loader, _decode_spec)
MLA = JitGetter("mla", _mla_loader, _mla_spec)
XQA = JitGetter("xqa", _xqa_loader, _xqa_spec)
# A customised prefill module (a JIT variant: the attention-sink wrapper's), args = (args, kwargs).
SINK = JitGetter("sink", _custom_prefill_loader, _custom_prefill_spec)
# flashinfer/cascade.py merge_state_in_place: no call's module, the merge of partial states by LSE.
MERGE = JitGetter("merge", _merge_loader, _merge_spec)
