"""The plan's dtype names as torch dtypes (seed 002).

The plan names a KV cache's *storage* dtype (what is allocated) and its *view* dtype (what
the kernels are told). Quantized caches are uint8 storage viewed as the float8 type they hold;
nvfp4 is packed uint8 plus fp8 block scales. The view always comes from the plan: nothing here
looks at a tensor's dtype and guesses what it holds (a uint8 tensor is fp8 or nvfp4 depending
on the plan, never on itself).
"""

from __future__ import annotations

from typing import Any

from attnplan.errors import AdapterCallError

NVFP4 = "nvfp4"


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` -> ``torch.bfloat16``. ``nvfp4`` has no torch dtype: it is an error here."""
    import torch

    if name == NVFP4:
        raise AdapterCallError("nvfp4 is packed uint8 data plus fp8 block scales, not a torch dtype; "
                         "use the KV cache's data and scale tensors")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise AdapterCallError(f"unknown torch dtype name {name!r}")
    return dtype


def is_float8(name: str) -> bool:
    return name in ("float8_e4m3fn", "float8_e5m2")


def elements_per_byte(view: str) -> int:
    """nvfp4 packs two 4-bit values in a byte; every other view is one element per element."""
    return 2 if view == NVFP4 else 1


def view_as(storage: Any, view: str) -> Any:
    """The tensor the kernels read: ``storage`` reinterpreted as the plan's view dtype.

    fp8 views reinterpret the uint8 storage bytes (same shape); 16-bit views are the storage
    itself; nvfp4 stays uint8 (the kernels take packed bytes plus the scale tensors).
    """
    if view == NVFP4:
        return storage
    target = torch_dtype(view)
    return storage if storage.dtype == target else storage.view(target)
