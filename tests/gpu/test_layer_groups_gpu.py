"""Issue 15.2: layered models run on the H100 layer group by layer group, each group with the
scale, window, soft-cap and sinks its plan names (no hard-coded 1/sqrt(head_dim)), against the
float32 reference. Plans are the rules' own: ``plan_model`` over the public config.json files in
tests/models/ on this machine's probed facts, kernel truth (``--engine flashinfer``), fa2 forced
so that the file builds in one short call (fa3 modules take minutes each).

* Gemma-3-27B: 52 sliding layers (window 1024) and 10 global ones, softmax scale 168^-0.5.
* gpt-oss-20b: alternating window-128 and full layers, attention sinks on every layer.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, Batch, prebuild, random_lens, rel_err  # noqa: E402

from attnplan import plan_model  # noqa: E402
from attnplan.adapter import AttentionExecutor  # noqa: E402

pytestmark = pytest.mark.gpu
MODELS = Path(__file__).resolve().parents[1] / "models"


def groups(name: str):
    m = plan_model(MODELS / name, overrides={"attention_backend": "fa2"}, engine="flashinfer")
    assert m.ok, [(g.layers[:3], [v.rule for v in g.violations]) for g in m.layer_groups]
    return m, [g for g in m.attention_groups if g.status == "ok"]


GEMMA, GEMMA_GROUPS = groups("gemma-3-27b-it.json")
GPT_OSS, GPT_OSS_GROUPS = groups("gpt-oss-20b.json")
prebuild(*(g.answer for g in (*GEMMA_GROUPS, *GPT_OSS_GROUPS)))


def run_group(g, *, long_ctx: int) -> float:
    ex = AttentionExecutor(g.answer, device="cuda")
    # The executor takes the group's scalars from its plan (Plan.attention), not from head_dim.
    assert math.isclose(ex.params.sm_scale, g.attention.sm_scale)
    assert ex.params.window_left == g.attention.window_left
    nd = 5
    q = [1] * nd + random_lens(3, 1, 300)
    # Contexts past the window, so a kernel that ignored the window would differ from the reference.
    seq = random_lens(nd, long_ctx // 2, long_ctx) + [q[nd], q[nd + 1] + 700, q[nd + 2] + random_lens(1, 0, long_ctx)[0]]
    b = Batch(ex, q, seq, nd)
    return rel_err(b.run(), b.reference())


def test_gemma3_groups_each_with_its_window_and_the_models_scale():
    assert len(GEMMA_GROUPS) == 2
    windows = sorted(g.attention.window_left for g in GEMMA_GROUPS)
    assert windows == [-1, 1023]
    for g in GEMMA_GROUPS:
        assert math.isclose(g.attention.sm_scale, 168 ** -0.5)
        err = run_group(g, long_ctx=3000)
        print(f"gemma-3-27b layers {g.layers[0]}..{g.layers[-1]} ({g.kind}, window_left {g.attention.window_left}, "
              f"scale {g.attention.sm_scale:.5f}): rel err {err:.2e}")
        assert err <= TOL


def test_gpt_oss_alternating_window_and_full_with_sinks():
    assert len(GPT_OSS_GROUPS) == 2
    assert sorted(g.attention.window_left for g in GPT_OSS_GROUPS) == [-1, 127]
    for g in GPT_OSS_GROUPS:
        assert g.attention.sinks and g.prefill.call == "sink" and g.decode.call == "sink"
        err = run_group(g, long_ctx=1200)
        print(f"gpt-oss-20b layers {g.layers[0]}..{g.layers[-1]} ({g.kind}, window_left {g.attention.window_left}, "
              f"sinks): rel err {err:.2e}")
        assert err <= TOL
