"""Prefill and mixed steps planned by FlashInfer's scheduler call alone once learned and checked on the
wrapper (issue 41; attnplan/adapter/general_plans.py), on a real GPU against the float32 reference.

One executor per plan runs a sequence of prefill-only and mixed steps whose counts change every step (an
engine's first steps): the first plan each wrapper's own, two observed, one checked, every later one the
replay. Every step's output is held to the reference (bf16: rel err <= 1e-2) with fresh random inputs
over a NaN-poisoned cache and output, and the replay must have taken over.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, answer, Batch, executor, prebuild, rel_err  # noqa: E402

from attnplan.adapter.general_plans import replay_of  # noqa: E402

pytestmark = pytest.mark.gpu

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
CONFIGS = {
    "probed": LLAMA,                                            # this machine's plan (H100: fa3 prefill)
    "fa2": dict(LLAMA, attention_backend="fa2"),                # fa2 prefill and tensor-core decode
    "spec-q3": dict(LLAMA, attention_backend="fa2", num_speculative_tokens=2),
    "window": dict(LLAMA, attention_backend="fa2", sliding_window=256),
    "fa2-host-table": dict(LLAMA, attention_backend="fa2"),    # steps carry the engine's host block table
    "sink": dict(LLAMA, sinks=True),                            # the sink wrapper: fa3 prefill, fa2 decode
    "cuda-core": dict(head_dim=128, num_qo_heads=8, num_kv_heads=8, attention_backend="fa2"),  # group 1
    "fa3-spec-q3": dict(LLAMA, attention_backend="fa3", num_speculative_tokens=2),  # decode on fa3's prefill
}


@pytest.fixture(scope="module", autouse=True)
def built():
    prebuild(*(answer(**c) for c in CONFIGS.values()))


def _with_host_table(b):
    """The step's input with the engine's host copy of the block table (StepInput.block_table_cpu)."""
    import dataclasses

    b.input = dataclasses.replace(b.input, block_table_cpu=b.table.cpu())
    return b


def _shapes(qd, n, seed):
    """n steps: prefill-only and mixed, every count other than the step before."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        nd = 0 if i % 3 == 0 else rnd.randint(1, 12)
        npre = rnd.randint(1, 4)
        q = [qd] * nd + [rnd.randint(1, 700) for _ in range(npre)]
        seq = [rnd.randint(qd, 3000) for _ in range(nd)] + [x + rnd.choice([0, 0, rnd.randint(1, 900)]) for x in q[nd:]]
        out.append((q, seq, nd))
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_general_steps_replay_the_scheduler_and_stay_exact(name):
    ex = executor(**CONFIGS[name])
    qd = ex.plan.decode.q_len_per_req
    errs = []
    for q, seq, nd in _shapes(qd, 12, seed=41 + len(name)):
        b = Batch(ex, q, seq, nd)
        if name.endswith("host-table"):
            b = _with_host_table(b)
        errs.append(rel_err(b.run(), b.reference()))
    wrappers = {ph: w for ph, w in ex.backend._wrappers.items() if w is not None}
    summary = {}
    for ph, w in wrappers.items():
        r = replay_of(ex.backend, w)
        summary[ph] = None if r is None else dict(ready=r.ready, replays=r.replays, refused=r.refused,
                                                   narrowed=r.narrowed, whole_steps=r.whole_steps)
    print(f"general replay {name} {ex.answer.backends()}: {summary}; rel err max {max(errs):.2e}")
    assert max(errs) <= TOL, errs
    prefill = replay_of(ex.backend, ex.backend._prefill)
    assert prefill is not None and prefill.ready and prefill.replays >= 4, summary
    # every wrapper whose call replays (KernelCall.general_replay) took over in the mixed steps too; a plan
    # with a per-shape decode choice (the probed one: XQA or fa2 by pages) may run its mixed steps' decode
    # on the other call's wrapper, so there only the prefill is required
    for ph, w in wrappers.items():
        if ph == "decode" and ex.backend.switch is not None:
            continue
        if ex.backend.calls[ph].general_replay(getattr(ex.plan, ph)):
            r = replay_of(ex.backend, w)
            assert r is not None and r.ready and r.replays >= 2 and not r.refused, (ph, summary)
