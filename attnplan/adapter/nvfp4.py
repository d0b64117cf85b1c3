"""NVFP4 KV in torch: e2m1 codes (two per byte, low nibble first) and one fp8_e4m3 scale per
block of 16 values, linear (row-major) block scales, times a global scale per tensor.

FlashInfer 0.7.2's own NVFP4 quantizers need SM100+ (``flashinfer.quantization``), while its fa2
kernels read an NVFP4 cache on 8.x/9.x/12.x (``kv_cache_sf=``) - so the adapter appends with this
quantizer, which runs on any device. The values it writes are what FlashInfer's dequantizer
(``fp4_quantization.nvfp4_kv_dequantize``, SM80+) reads back: value = e2m1 * block scale *
global scale (``page.py nvfp4_quantize_append_paged_kv_cache`` documents the same contract);
the GPU tests hold the two to it.
"""

from __future__ import annotations

from typing import Any

# e2m1 magnitudes, indexed by the 3 low bits of a code.
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbours. A value on a midpoint rounds to the even code (round to
# nearest even, as the hardware's cvt.rn does): down at 0.25, 1.25, 2.5, 5; up at 0.75, 1.75, 3.5.
_MIDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIES_UP = (0.75, 1.75, 3.5)
E2M1_MAX = 6.0
SCALE_MIN = 2.0 ** -9            # the smallest fp8_e4m3 subnormal: a zero block keeps a finite scale


def quantize(x: Any, block: int = 16, global_scale: float = 1.0) -> tuple[Any, Any]:
    """x [..., D] -> (packed uint8 [..., D/2], fp8_e4m3 block scales [..., D/block]) such that
    x ~ e2m1 * scale * global_scale. Works on the CPU and on any CUDA device."""
    import torch

    *lead, dim = x.shape
    xb = (x.float() / global_scale).reshape(*lead, dim // block, block)
    amax = xb.abs().amax(-1, keepdim=True)
    scale = (amax / E2M1_MAX).clamp(min=SCALE_MIN).to(torch.float8_e4m3fn)
    # The fp8 scale may have rounded down: |y| can pass 6, which saturates to the largest code.
    y = xb / scale.float()
    a = y.abs()
    mids = torch.tensor(_MIDS, device=x.device)
    code = torch.bucketize(a, mids)                         # ties go to the lower code here...
    for t in _TIES_UP:                                      # ...except where the upper one is even
        code = code + (a == t).long()
    code = code | ((y < 0).long() << 3)
    code = code.reshape(*lead, dim).to(torch.uint8)
    return code[..., 0::2] | (code[..., 1::2] << 4), scale.squeeze(-1)


def dequantize(packed: Any, scale: Any, block: int = 16, global_scale: float = 1.0) -> Any:
    """The inverse: float32 [..., D] = e2m1 * block scale * global scale."""
    import torch

    lo, hi = packed & 0xF, packed >> 4
    code = torch.stack((lo, hi), -1).reshape(*packed.shape[:-1], packed.shape[-1] * 2).long()
    grid = torch.tensor(E2M1, device=packed.device)
    val = grid[code & 7] * torch.where((code & 8) > 0, -1.0, 1.0)
    *lead, dim = val.shape
    val = val.reshape(*lead, dim // block, block) * scale.float().unsqueeze(-1)
    return val.reshape(*lead, dim) * global_scale
