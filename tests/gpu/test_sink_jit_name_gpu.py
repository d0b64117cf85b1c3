"""sink.jit-name's premise, in one process (bench/logs/h100-2026-11-25c): FlashInfer names the
attention-sink module batch_prefill_attention_sink_{q dtype}_swa_{window?}_{backend}
(flashinfer/attention/_core.py BatchAttentionWithAttentionSinkWrapper.__init__) and compiles the
head size into it without naming it. Two layer groups that differ only in head size, each planned
by the rules (fa2 forced: its modules build in about a minute), run in one process one after the
other, as one engine process would serve them: the first group runs; the second gets a module
built under the first one's name. The rule rejects a model that needs both; if FlashInfer ever
serves the second correctly, this test fails and the rule is stale for one process.

Built on purpose one module after the other (no prebuild: a parallel build of two same-named
modules is the cross-process race the sweep measured, not this case).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gpu_common import TOL, Batch, executor_for, real_plan, rel_err  # noqa: E402

from attnplan.policy import default_ruleset  # noqa: E402
from attnplan.policy.jit_names import clashes  # noqa: E402

pytestmark = pytest.mark.gpu
CFG = dict(num_qo_heads=8, num_kv_heads=1, dtype="bf16", sinks=True, attention_backend="fa2")


def sink_plan(head: int):
    return real_plan(dict(CFG, head_dim=head), "flashinfer",
                     lambda a: a.plan.prefill.call == "sink" and a.plan.decode.call == "sink",
                     f"the fa2 sink wrapper at head {head}")


def run(a) -> float:
    b = Batch(executor_for(a), [1, 1, 37, 200], [300, 2050, 37, 900], 2)
    return rel_err(b.run(), b.reference())


def test_a_second_head_size_under_one_sink_module_name_does_not_run_correctly():
    first, second = sink_plan(128), sink_plan(64)
    pairs = [(0, first.plan.prefill), (0, first.plan.decode), (1, second.plan.prefill), (1, second.plan.decode)]
    v = clashes(default_ruleset(), pairs)
    assert v and v[0].rule == "sink.jit-name"          # what the rule says of these very plans
    err = run(first)
    print(f"head 128 first: rel err {err:.2e}")
    assert err <= TOL
    try:
        err2 = run(second)
    except (AssertionError, RuntimeError) as exc:      # NaN rows (rel_err's assert) or a CUDA/JIT error
        print(f"head 64 second, same module name: {type(exc).__name__}: {str(exc)[:300]}")
        return
    print(f"head 64 second, same module name: rel err {err2:.2e}")
    assert err2 > TOL, (f"FlashInfer served head 64 correctly after head 128 in one process (rel err {err2:.2e}): "
                        "sink.jit-name is stale for one process (backends.yaml calls.sink.jit_name)")
