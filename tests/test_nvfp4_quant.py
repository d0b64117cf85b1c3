"""The torch NVFP4 quantizer the adapter appends with on 8.x/9.x (FlashInfer's own needs SM100+):
each value against an independent per-element round-to-nearest-even reference, the packing
order, the block scales, and the round trip. The GPU check against FlashInfer's dequantizer is
tests/gpu/test_adapter_kernel_paths_gpu.py::test_nvfp4_quantizer_matches_flashinfer_dequantizer."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from attnplan.adapter import nvfp4  # noqa: E402

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def code_of(y: float) -> int:
    """Round |y| to the nearest e2m1 magnitude, ties to the even code; saturate at 6."""
    a = min(abs(y), 6.0)
    best = min(range(8), key=lambda i: (abs(GRID[i] - a), i % 2))
    return best | (8 if y < 0 and best else 0) if y < 0 else best


def test_every_code_matches_a_scalar_reference():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 64, generator=gen) * torch.tensor([0.01, 0.3, 1, 5, 40, 300]).view(6, 1)
    packed, scale = nvfp4.quantize(x, 16)
    assert packed.dtype == torch.uint8 and packed.shape == (6, 32)
    assert scale.dtype == torch.float8_e4m3fn and scale.shape == (6, 4)
    codes = torch.stack((packed & 0xF, packed >> 4), -1).reshape(6, 64)
    for r in range(6):
        for b in range(4):
            blk = x[r, b * 16:(b + 1) * 16]
            s = float(max(blk.abs().max() / 6.0, 2.0 ** -9))
            s8 = float(torch.tensor(s).to(torch.float8_e4m3fn).float())
            assert float(scale[r, b].float()) == s8
            for i in range(16):
                want = code_of(float(blk[i]) / s8)
                got = int(codes[r, b * 16 + i])
                assert got == want or (want == 0 and got == 8), (r, b, i, float(blk[i]) / s8, got, want)


def test_ties_round_to_even_and_low_nibble_first():
    x = torch.tensor([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.9, -0.75, -3.5, 0, 0, 0, 0, 0, 6.0]])
    packed, scale = nvfp4.quantize(x, 16)
    assert float(scale.float()) == 1.0                       # amax 6: the codes are the values
    codes = torch.stack((packed & 0xF, packed >> 4), -1).reshape(-1).tolist()
    # 0.25->0.0 (code 0), 0.75->1.0 (2), 1.25->1.0 (2), 1.75->2.0 (4), 2.5->2.0 (4), 3.5->4.0 (6),
    # 5->4.0 (6), 5.9 -> 6.0 (7), -0.75 -> -1.0 (8|2), -3.5 -> -4.0 (8|6)
    assert codes[:10] == [0, 2, 2, 4, 4, 6, 6, 7, 10, 14] and codes[15] == 7
    assert int(packed[0, 0]) == codes[0] | (codes[1] << 4)


def test_round_trip_error_and_global_scale():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, 128, generator=gen, dtype=torch.float32).bfloat16()
    for g in (1.0, 0.05):
        packed, scale = nvfp4.quantize(x, 16, g)
        back = nvfp4.dequantize(packed, scale, 16, g)
        rel = ((back - x.float()).norm() / x.float().norm()).item()
        assert rel < 0.12, rel                     # e2m1: ~3 bits of mantissa, per-16 scale
        blockmax = x.float().reshape(32, 8, 8, 16).abs().amax(-1)
        err = (back - x.float()).abs().reshape(32, 8, 8, 16).amax(-1)
        assert bool((err <= blockmax * 0.25 + 1e-6).all())    # half a step of the widest gap (2 of 6)


def test_zero_block_stays_zero_and_finite():
    packed, scale = nvfp4.quantize(torch.zeros(2, 32), 16)
    back = nvfp4.dequantize(packed, scale, 16)
    assert not back.any() and math.isfinite(float(scale.float().min())) and float(scale.float().min()) > 0
