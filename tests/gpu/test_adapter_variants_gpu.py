"""Kernel variants through the adapter on a real GPU: sliding window + soft cap (Gemma-2 style)
and head dims 64 / 128 / 256, each on the plan this machine's rules choose, vs the float32
reference (bf16: rel err <= 1e-2), fresh random inputs, NaN-poisoned cache and outputs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, Batch, answer, executor, prebuild, random_lens, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu

SWCAP = dict(head_dim=128, num_qo_heads=16, num_kv_heads=4, sliding_window=256, logits_soft_cap=30.0)
HEADS = {hd: dict(head_dim=hd, num_qo_heads=16, num_kv_heads=4) for hd in (64, 128, 256)}


def built(cfg):
    """Each test builds only its own plan's modules (prebuild skips what is built), so
    ``-k head_dims`` or ``-k sliding`` alone fits a short GPU session."""
    prebuild(answer(**cfg))
    return executor(**cfg)


def mixed(ex):
    nd = 6
    q = [1] * nd + random_lens(3, 1, 400)
    seq = random_lens(nd, 1, 2500) + [q[nd], q[nd + 1] + 900, q[nd + 2] + random_lens(1, 0, 1500)[0]]
    b = Batch(ex, q, seq, nd)
    return rel_err(b.run(), b.reference())


def test_sliding_window_and_soft_cap():
    ex = built(SWCAP)
    assert ex.params.window_left == 255 and ex.params.soft_cap == 30.0
    err = mixed(ex)
    print(f"sliding window 256 + soft cap 30 on {ex.answer.backends()}: rel err {err:.2e}")
    assert err <= TOL


def test_sliding_window_really_cuts():
    """Same keys, window on vs off: the outputs must differ once contexts exceed the window."""
    on = built(SWCAP)
    b = Batch(on, [1] * 4, [2000] * 4, 4)
    out_on = b.run()
    ref_full = b.reference()
    b.ex.params = type(on.params)(**{**on.params.__dict__, "window_left": -1})   # reference without window
    ref_nowin = b.reference()
    assert rel_err(out_on, ref_full) <= TOL
    assert rel_err(out_on, ref_nowin) > 10 * TOL


@pytest.mark.parametrize("hd", [64, 128, 256])
def test_head_dims(hd):
    ex = built(HEADS[hd])
    err = mixed(ex)
    print(f"head_dim {hd} on {ex.answer.backends()}: rel err {err:.2e}")
    assert err <= TOL
